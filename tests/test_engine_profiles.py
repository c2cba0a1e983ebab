"""Engine profiles in configs/engines/*.toml: schema, sources and loading."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from bench_tasks import engine

PROFILES_DIR = Path(__file__).resolve().parent.parent / "configs" / "engines"
FILES = sorted(PROFILES_DIR.glob("*.toml"))
EXPECTED = {"vllm", "llamacpp", "sglang", "ollama", "generic", "sim"}

METRIC_KEYS = ("ttft_histogram", "prompt_tokens_total", "generation_tokens_total",
               "cached_prompt_tokens_total", "requests_running", "requests_waiting", "kv_cache_usage")
SCHEMA: dict[str, object] = {
    "name": str,
    "description": str,
    "detect": {"models_owned_by": list, "server_header": list, "probe_paths": list},
    "request": {"thinking_off": dict, "ignore_eos": bool, "continuous_usage_stats": bool, "include_usage": bool},
    "tokenize": {"path": str, "shape": str},
    "metrics": {"path": str, **{key: str for key in METRIC_KEYS}},
    "timings": {"per_request": bool},
}
# Sections and keys a profile has only where its engine's source says something about them.
OPTIONAL: dict[str, dict[str, type]] = {
    "metrics": {"prompt_tokens_counted": str, "decode_time_histogram": str, "generation_tokens_histogram": str,
                "spec_drafts_total": str, "spec_draft_tokens_total": str, "spec_accepted_tokens_total": str},
    "stream": {"first_event_tokens": int},
    # The other APIs' paths, where the engine's source or a measurement says what they take.
    "responses": {"thinking_off": dict, "ignore_eos": bool},
    "messages": {"thinking_off": dict, "ignore_eos": bool},
}
OPTIONAL_SERIES = [k for k in OPTIONAL["metrics"] if k != "prompt_tokens_counted"]
PROMETHEUS_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
KEY_LINE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
SECTION_LINE = re.compile(r"^\s*\[([^\]]+)\]\s*$")


def _load(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def test_all_expected_profiles_exist():
    assert {p.stem for p in FILES} == EXPECTED


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_schema_keys_and_types(path):
    data = _load(path)
    assert set(SCHEMA) <= set(data) <= set(SCHEMA) | set(OPTIONAL), f"{path.name}: top-level keys"
    for key, kind in SCHEMA.items():
        if isinstance(kind, dict):
            assert isinstance(data[key], dict), f"{path.name}: [{key}] is a table"
            assert set(kind) <= set(data[key]) <= set(kind) | set(OPTIONAL.get(key, {})), f"{path.name}: keys of [{key}]"
            for sub, sub_kind in kind.items():
                value = data[key][sub]
                # bool is a subclass of int, but never the other way round: exact check
                assert type(value) is sub_kind, f"{path.name}: {key}.{sub} is {sub_kind.__name__}"
        else:
            assert type(data[key]) is kind, f"{path.name}: {key} is {kind.__name__}"
    for section, keys in OPTIONAL.items():
        for sub, sub_kind in keys.items():
            if sub in data.get(section, {}):
                assert type(data[section][sub]) is sub_kind, f"{path.name}: {section}.{sub} is {sub_kind.__name__}"
    assert data["name"] == path.stem
    for key in ("models_owned_by", "server_header", "probe_paths"):
        assert all(isinstance(item, str) and item for item in data["detect"][key])
    assert all(p.startswith("/") for p in data["detect"]["probe_paths"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_values_are_consistent(path):
    data = _load(path)
    tokenize, metrics = data["tokenize"], data["metrics"]
    assert tokenize["shape"] in {"vllm", "llamacpp", "none"}
    assert (tokenize["shape"] == "none") == (tokenize["path"] == ""), "a path iff a shape"
    assert tokenize["path"] == "" or tokenize["path"].startswith("/")
    assert metrics["path"] == "" or metrics["path"].startswith("/")
    assert metrics.get("prompt_tokens_counted", "all") in {"all", "processed"}
    for key in [*METRIC_KEYS, *(k for k in OPTIONAL_SERIES if k in metrics)]:
        name = metrics[key]
        assert name == "" or PROMETHEUS_NAME.match(name), f"{path.name}: metrics.{key}={name!r}"
        if not metrics["path"]:
            assert name == "", f"{path.name}: metrics.{key} named without a metrics path"
    if data["request"]["continuous_usage_stats"]:
        assert data["request"]["include_usage"], "continuous usage implies include_usage"


def test_names_unique():
    names = [_load(p)["name"] for p in FILES]
    assert len(names) == len(set(names))


def test_detect_values_unique_across_profiles():
    seen: dict[tuple[str, str], str] = {}
    for path in FILES:
        data = _load(path)
        for key in ("models_owned_by", "probe_paths"):
            for value in data["detect"][key]:
                assert (key, value) not in seen, f"{value!r} in {path.name} and {seen[(key, value)]}"
                seen[(key, value)] = path.name


@pytest.mark.parametrize("path", [p for p in FILES if p.stem != "generic"], ids=lambda p: p.stem)
def test_every_claim_has_a_source_comment(path):
    """Every key outside [detect] has a `#` comment within the 3 lines above it."""
    lines = path.read_text().splitlines()
    section = ""
    for number, line in enumerate(lines):
        header = SECTION_LINE.match(line)
        if header:
            section = header.group(1).strip()
            continue
        if not KEY_LINE.match(line) or section == "detect":
            continue
        above = lines[max(0, number - 3):number]
        assert any(a.strip().startswith("#") for a in above), f"{path.name}:{number + 1}: no source for {line.strip()!r}"


def test_load_profiles_loads_all():
    profiles = engine.load_profiles()
    assert set(profiles) == EXPECTED
    for name, prof in profiles.items():
        assert isinstance(prof, engine.Profile)
        assert prof.name == name


def test_vllm_extras_switch_thinking_off_and_ask_per_event_usage():
    extras = engine.profile("vllm").extras()
    assert extras["chat_template_kwargs"] == {"enable_thinking": False}
    assert extras["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert "chat_template_kwargs" not in engine.profile("vllm").extras(thinking_off=False)


def test_generic_sends_nothing_engine_specific():
    generic = engine.profile("generic")
    assert generic.extras() == {}
    assert not generic.ignore_eos


def test_detect_falls_back_to_generic_and_matches_owned_by(monkeypatch):
    from bench_tasks import server

    def no_probe(*args, **kwargs):
        raise server.ServerError("no such path")

    monkeypatch.setattr(server, "get_json", no_probe)
    monkeypatch.setattr(engine, "_server_header", lambda base_url, api_key: "")
    base = "http://127.0.0.1:9"
    assert engine.detect(base, {"data": [{"id": "m", "owned_by": "someone"}]}).name == "generic"
    for owner, name in (("vllm", "vllm"), ("llamacpp", "llamacpp"), ("sglang", "sglang"),
                        ("library", "ollama"), ("llm-bench-sim", "sim")):
        assert engine.detect(base, {"data": [{"id": "m", "owned_by": owner}]}).name == name
