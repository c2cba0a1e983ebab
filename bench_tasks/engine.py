"""Engine profiles: what a serving engine accepts and exposes, read from ``configs/engines/*.toml``.

A profile says how to switch thinking off, whether ``ignore_eos`` and per-event usage are
accepted, how to tokenize and where the metrics are. ``detect`` recognises the engine from the
server itself; ``--engine NAME`` overrides it.
"""

from __future__ import annotations

import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench_tasks import server

PROFILES_DIR = Path(__file__).resolve().parent.parent / "configs" / "engines"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    detect: dict = field(default_factory=dict)
    request: dict = field(default_factory=dict)
    tokenize: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    stream: dict = field(default_factory=dict)  # what its stream is known to carry (first_event_tokens)

    @property
    def first_event_tokens(self) -> float | None:
        """Tokens its first content event carries, when the engine's source says (else None)."""
        return self.stream.get("first_event_tokens") or None

    @property
    def ignore_eos(self) -> bool:
        return bool(self.request.get("ignore_eos"))

    def extras(self, thinking_off: bool = True) -> dict:
        """Body keys merged into every chat request for this engine."""
        extras: dict = dict(self.request.get("thinking_off") or {}) if thinking_off else {}
        if self.request.get("continuous_usage_stats"):
            extras["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return extras


def load_profiles(directory: Path = PROFILES_DIR) -> dict[str, Profile]:
    profiles = {}
    for path in sorted(directory.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        profiles[data["name"]] = Profile(**data)
    return profiles


def profile(name: str) -> Profile:
    profiles = load_profiles()
    if name not in profiles:
        raise ValueError(f"unknown engine {name!r}; choose one of: {', '.join(sorted(profiles))}")
    return profiles[name]


def detect(base_url: str, models: dict, *, api_key: str = "") -> Profile:
    """The first profile whose owned_by, Server header or probe path matches; else 'generic'."""
    profiles = load_profiles()
    owners = {str(m.get("owned_by", "")) for m in models.get("data", [])}
    server_header = _server_header(base_url, api_key)
    candidates = [p for p in profiles.values() if p.name != "generic"]
    for candidate in candidates:
        if owners & set(candidate.detect.get("models_owned_by", [])):
            return candidate
        if any(s and s in server_header for s in candidate.detect.get("server_header", [])):
            return candidate
    for candidate in candidates:
        for path in candidate.detect.get("probe_paths", []):
            try:
                server.get_json(base_url, path, api_key=api_key, timeout_s=3)
                return candidate
            except server.ServerError:
                continue
    return profiles["generic"]


def _server_header(base_url: str, api_key: str) -> str:
    request = urllib.request.Request(base_url.rstrip("/") + "/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.headers.get("Server", "") or ""
    except OSError:
        return ""
