"""Engine profiles: what a serving engine accepts and exposes, read from ``configs/engines/*.toml``.

A profile says how to switch thinking off, whether ``ignore_eos`` and per-event usage are
accepted (on Chat Completions, and in its ``[responses]`` and ``[messages]`` tables on those APIs), how
to tokenize and where the metrics are. ``detect`` recognises the engine from the
server itself; ``--engine NAME`` overrides it.

The profiles ship inside the ``configs`` package and are found through ``importlib.resources``,
so an installed wheel reads its own copy wherever it was installed. A missing or broken set is a
damaged install: ``ProfileError`` says so in one line, before any request is sent.
"""

from __future__ import annotations

import tomllib
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable

from bench_tasks import server

PROFILES_PACKAGE, PROFILES_FOLDER = "configs", "engines"
FALLBACK = "generic"  # what detect() answers when nothing else matches: a set without it is broken


class ProfileError(Exception):
    """The engine profiles of this install are missing or unreadable; the message says which and where."""


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
    # What a request on the other APIs takes (thinking_off, ignore_eos); none: the engine's path is unknown
    responses: dict = field(default_factory=dict)
    messages: dict = field(default_factory=dict)

    @property
    def first_event_tokens(self) -> float | None:
        """Tokens its first content event carries, when the engine's source says (else None)."""
        return self.stream.get("first_event_tokens") or None

    @property
    def ignore_eos(self) -> bool:
        return bool(self.request.get("ignore_eos"))

    def extras(self, thinking_off: bool = True, api: str = "chat") -> dict:
        """Body keys merged into every request on ``api`` (chat, responses, messages) for this engine."""
        if api != "chat":
            return dict(self._api_table(api).get("thinking_off") or {}) if thinking_off else {}
        extras: dict = dict(self.request.get("thinking_off") or {}) if thinking_off else {}
        if self.request.get("continuous_usage_stats"):
            extras["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return extras

    def takes_ignore_eos(self, api: str = "chat") -> bool:
        """Whether the engine honours ``ignore_eos`` on ``api``."""
        return self.ignore_eos if api == "chat" else bool(self._api_table(api).get("ignore_eos"))

    def _api_table(self, api: str) -> dict:
        if api not in ("responses", "messages"):
            raise ValueError(f"unknown API {api!r}")
        return getattr(self, api)


def profiles_dir() -> Traversable:
    """Where this install keeps its engine profiles (inside the ``configs`` package)."""
    try:
        return resources.files(PROFILES_PACKAGE).joinpath(PROFILES_FOLDER)
    except ModuleNotFoundError:
        raise ProfileError(f"the engine profiles are not installed (no package {PROFILES_PACKAGE!r}); "
                           "reinstall llm-bench") from None


def load_profiles(directory: Traversable | None = None) -> dict[str, Profile]:
    """Every profile of ``directory`` (default: this install's), by name; ProfileError when the set is
    missing, a file cannot be read, or the fallback profile is not among them."""
    directory = profiles_dir() if directory is None else directory
    try:
        files = sorted((f for f in directory.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    except OSError:
        files = []
    profiles = {}
    for file in files:
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
            profiles[data["name"]] = Profile(**data)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
            raise ProfileError(f"engine profile {file} cannot be read ({type(exc).__name__}: {exc}); "
                               "reinstall llm-bench") from None
    if FALLBACK not in profiles:
        found = f"only {', '.join(sorted(profiles))}" if profiles else "none"
        raise ProfileError(f"no {FALLBACK!r} engine profile in {directory} ({found} found): the install is "
                           "incomplete; reinstall llm-bench")
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
    candidates = [p for p in profiles.values() if p.name != FALLBACK]
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
    return profiles[FALLBACK]


def _server_header(base_url: str, api_key: str) -> str:
    request = urllib.request.Request(base_url.rstrip("/") + "/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.headers.get("Server", "") or ""
    except OSError:
        return ""
