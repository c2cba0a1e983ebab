"""The engine's own Prometheus counters, read before and after each phase of the suite.

Only the series an engine profile names are kept: histogram ``_sum``/``_count`` and counters,
summed over label sets (one engine, one model). The analysis compares their deltas per phase
with the client's own figures.
"""

from __future__ import annotations

import re

from bench_tasks import server
from bench_tasks.engine import Profile

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([^\s]+)")
_COUNTER_KEYS = ("prompt_tokens_total", "generation_tokens_total", "cached_prompt_tokens_total",
                 "spec_drafts_total", "spec_draft_tokens_total", "spec_accepted_tokens_total")
_HISTOGRAM_KEYS = ("ttft_histogram", "decode_time_histogram", "generation_tokens_histogram")


def wanted_series(profile: Profile) -> set[str]:
    names = {profile.metrics.get(key, "") for key in _COUNTER_KEYS}
    for key in _HISTOGRAM_KEYS:
        histogram = profile.metrics.get(key, "")
        if histogram:
            names |= {f"{histogram}_sum", f"{histogram}_count"}
    return {n for n in names if n}


def parse(text: str, wanted: set[str]) -> dict[str, float]:
    """Sum each wanted series over its label sets. Prometheus may suffix counters with _total."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        key = _wanted_name(match.group(1), wanted)
        if key is None:
            continue
        try:
            values[key] = values.get(key, 0.0) + float(match.group(3))
        except ValueError:
            continue
    return values


def _wanted_name(name: str, wanted: set[str]) -> str | None:
    for candidate in (name, f"{name}_total", name.removesuffix("_total")):
        if candidate in wanted:
            return candidate
    return None


def scrape(base_url: str, profile: Profile, api_key: str = "") -> dict[str, float] | None:
    """The profile's series now, or None when the engine has no metrics endpoint or it failed."""
    path = profile.metrics.get("path", "")
    wanted = wanted_series(profile)
    if not path or not wanted:
        return None
    try:
        return parse(server.get_text(base_url, path, api_key=api_key, timeout_s=5), wanted)
    except (server.ServerError, OSError):
        return None
