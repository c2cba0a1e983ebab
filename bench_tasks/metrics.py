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
# A reading is taken between phases while nothing runs; an engine busy past this is not waited for.
SCRAPE_TIMEOUT_S = 5.0


def wanted_series(profile: Profile) -> set[str]:
    names = {profile.metrics.get(key, "") for key in _COUNTER_KEYS}
    for key in _HISTOGRAM_KEYS:
        histogram = profile.metrics.get(key, "")
        if histogram:
            names |= {f"{histogram}_sum", f"{histogram}_count"}
    return {n for n in names if n}


def parse(text: str, wanted: set[str]) -> dict[str, float]:
    """Sum each wanted series over its label sets. Prometheus may suffix counters with _total."""
    lines = (line for line in text.splitlines() if line and not line.startswith("#"))
    return _summed(lines, lambda name: _wanted_name(name, wanted))


def _summed(lines, key_of) -> dict[str, float]:
    """Each sample's value added to its series' key (``key_of(name)``; None: not wanted)."""
    values: dict[str, float] = {}
    for line in lines:
        match = _SAMPLE.match(line)
        key = key_of(match.group(1)) if match else None
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
    """The profile's series now, or None when the profile names no metrics endpoint. A reading that fails
    raises (OSError for a timeout, a refused connection or an HTTP error): the caller says so."""
    path = profile.metrics.get("path", "")
    wanted = wanted_series(profile)
    if not path or not wanted:
        return None
    return parse(server.get_text(base_url, path, api_key=api_key, timeout_s=SCRAPE_TIMEOUT_S), wanted)


# The engine's queue and cache, read every second during a run (locustfiles/engine_series.py).
GAUGE_KEYS = ("requests_running", "requests_waiting", "kv_cache_usage")


def gauge_names(profile: Profile) -> dict[str, str]:
    """The profile's gauges by key (GAUGE_KEYS), those it names."""
    return {key: profile.metrics[key] for key in GAUGE_KEYS if profile.metrics.get(key)}


def gauges(text: str, names: dict[str, str]) -> dict[str, float]:
    """Each named gauge, summed over its label sets; only lines that open with a wanted name are parsed
    (vLLM's /metrics is hundreds of lines, this runs every second beside the measurement)."""
    by_name = {name: key for key, name in names.items()}
    prefixes = tuple(by_name)
    # by_name.get: a longer name that merely starts like a wanted one is None, not wanted.
    return _summed((line for line in text.splitlines() if line.startswith(prefixes)), by_name.get)
