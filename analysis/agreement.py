"""Agreement between the client's figures and the engine's own clock and counters.

Two sources on the engine side:

- per request, llama.cpp's ``timings`` (``engine_predicted_n``, ``engine_predicted_ms``,
  ``engine_prompt_ms``) kept in the records: ``engine_clock`` sets the client's decode rate
  beside the engine's and the client's first token beside the engine's prompt time;
- per phase, the engine's Prometheus counters read before and after each phase
  (``DIR/metrics.jsonl``, see ``load.load_metrics``): ``metrics_agreement``.

The engine's decode rate convention is a parameter, not a guess: what exactly llama.cpp's
``predicted_ms`` spans decides which client rate is like-for-like with it.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from analysis.records import measured, ok_mask, succeeded
from analysis.spread import long_frame, long_rows, single, spread

Rate = Callable[[pd.DataFrame], pd.Series]

ENGINE_CLOCK_COLUMNS = ["phase", "round", "turn", "client_host", "request_id", "client_decode_tps",
                        "engine_decode_tps", "decode_diff_pct", "ttft_s", "ttfb_s", "engine_prompt_s",
                        "ttft_diff_ms", "ttft_diff_pct", "engine_draft_n", "engine_draft_accepted_n",
                        "draft_acceptance_share"]
ENGINE_CLOCK_METRICS = ("client_decode_tps", "engine_decode_tps", "decode_diff_pct", "ttfb_s", "ttft_diff_ms",
                        "ttft_diff_pct", "draft_acceptance_share")
METRICS_COLUMNS = ["phase", "window_s", "engine_requests", "client_requests", "client_failed_requests",
                   "warmup_requests_in_window", "warmup_requests_straddling", "records_outside_window",
                   "engine_ttft_mean_s", "client_ttft_mean_s", "engine_prompt_tokens", "client_prompt_tokens",
                   "engine_generation_tokens", "client_completion_tokens", "engine_decode_tps", "client_decode_tps",
                   "decode_diff_pct", "engine_spec_draft_tokens", "engine_spec_accepted_tokens",
                   "engine_spec_acceptance_share"]
# What each series of a profile is, recognised in the file when the profile did not say (older runs).
SERIES_SUFFIXES = {"ttft_histogram": "time_to_first_token_seconds_sum",
                   "decode_time_histogram": "request_decode_time_seconds_sum",
                   "generation_tokens_histogram": "request_generation_tokens_sum",
                   "spec_draft_tokens_total": "spec_decode_num_draft_tokens_total",
                   "spec_accepted_tokens_total": "spec_decode_num_accepted_tokens_total"}
HISTOGRAMS = ("ttft_histogram", "decode_time_histogram", "generation_tokens_histogram")


def _number(records: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(records[column], errors="coerce").astype(float)


def _ratio(numerator: pd.Series, denominator: pd.Series) -> pd.Series:
    """numerator / denominator, missing where the denominator is not positive (never inf, never 0)."""
    return (numerator / denominator.where(denominator > 0)).astype(float)


def predicted_per_second(records: pd.DataFrame) -> pd.Series:
    """DEFAULT engine convention: llama.cpp's own ``timings.predicted_per_second`` as it reports it.

    llama.cpp (tools/server, and measured on the real server: docs/engines.md#llamacpp-timings) times
    ``predicted_ms`` from the first sampled token to the last and reports (predicted_n - 1) / predicted_ms:
    the tokens after the first over the time they took, which is exactly the client's ``decode_tps`` definition.
    Speculating, it stamps a step's tokens before writing them: its clock misses the writing of the last
    step, which the client waits for (docs/engines.md#llamacpp-speculation-timings).
    Where the engine sent no rate, (predicted_n - 1) / predicted_ms is computed the same way."""
    reported = _number(records, "engine_predicted_tps")
    computed = _ratio(_number(records, "engine_predicted_n") - 1, _number(records, "engine_predicted_ms") / 1000)
    return reported.fillna(computed)


def client_decode_rate(records: pd.DataFrame) -> pd.Series:
    """DEFAULT client side: (completion_tokens - first_event_tokens) / decode_s, the tokens after the
    first content event over the time from the first content event to the last (the record's decode_tps)."""
    after_first = _number(records, "completion_tokens") - _number(records, "first_event_tokens")
    return _ratio(after_first, _number(records, "decode_s"))


def engine_clock(records: pd.DataFrame, engine_rate: Rate = predicted_per_second,
                 client_rate: Rate = client_decode_rate) -> pd.DataFrame:
    """Per successful measured request that carries engine timings, the client's figure beside the engine's.

    ``engine_rate(records) -> Series`` is the engine's decode tok/s under its convention and
    ``client_rate(records) -> Series`` the client rate that is like-for-like with it; defaults:
    ``predicted_per_second`` and ``client_decode_rate``. Columns:

    - decode_diff_pct = (client_decode_tps - engine_decode_tps) / engine_decode_tps * 100
    - engine_prompt_s = engine_prompt_ms / 1000
    - ttft_diff_ms = (ttft_s - ttfb_s - engine_prompt_s) * 1000; ttft_diff_pct = that / engine_prompt_s
      * 100. llama.cpp's prompt_ms runs from a slot taking the request to the first sampled token,
      and it sends the response headers when the slot takes it: the client's time from the headers
      to the first token is the like-for-like span, and the wait for a slot (in ``ttfb_s``) is in
      neither side. Sending and reading the first event remain, so a small positive difference is
      expected.
    - draft_acceptance_share = engine_draft_accepted_n / engine_draft_n (speculative decoding).
    """
    ok = succeeded(measured(records))
    timed = ok[ok[["engine_predicted_ms", "engine_prompt_ms"]].notna().any(axis=1)]
    client, engine = client_rate(timed), engine_rate(timed)
    ttft, ttfb, prompt_s = _number(timed, "ttft_s"), _number(timed, "ttfb_s"), _number(timed, "engine_prompt_ms") / 1000
    after_headers = ttft - ttfb
    frame = timed[["phase", "round", "turn", "client_host", "request_id", "engine_draft_n",
                   "engine_draft_accepted_n"]].assign(
        client_decode_tps=client, engine_decode_tps=engine,
        decode_diff_pct=_ratio(client - engine, engine) * 100,
        ttft_s=ttft, ttfb_s=ttfb, engine_prompt_s=prompt_s, ttft_diff_ms=(after_headers - prompt_s) * 1000,
        ttft_diff_pct=_ratio(after_headers - prompt_s, prompt_s) * 100,
        draft_acceptance_share=_ratio(_number(timed, "engine_draft_accepted_n"), _number(timed, "engine_draft_n")))
    return frame[ENGINE_CLOCK_COLUMNS].reset_index(drop=True)


def engine_clock_table(per_request: pd.DataFrame) -> pd.DataFrame:
    """engine_clock per phase: median, min and max over its requests (not over runs), n = requests."""
    rows = []
    for phase, group in per_request.groupby("phase", sort=False):
        rows += long_rows("engine_clock", phase, {m: spread(group[m]) for m in ENGINE_CLOCK_METRICS})
    return long_frame(rows)


def series_names(metrics: pd.DataFrame, names: dict | None = None) -> dict:
    """The series to compare and what the prompt counter counts: the engine profile's ``metrics``
    names when given (as the run wrote them into metrics.jsonl), else recognised in the file by
    their vLLM-style names (``SERIES_SUFFIXES``), a ``*prompt_tokens*`` counter (not a cached one)
    and a ``*generation_tokens*`` or ``*tokens_predicted*`` counter; histograms by their base name.
    ``prompt_tokens_counted`` is "all" (cached tokens included, vLLM) or "processed" (llama.cpp)."""
    if names:
        found = {key: names.get(key, "") for key in ("prompt_tokens_total", "generation_tokens_total",
                                                     *SERIES_SUFFIXES)}
        return {**found, "prompt_tokens_counted": names.get("prompt_tokens_counted", "all")}
    present = list(dict.fromkeys(metrics["series"]))

    def first(test) -> str:
        return next((s for s in present if test(s)), "")

    found = {key: first(lambda s, end=end: s.endswith(end)) for key, end in SERIES_SUFFIXES.items()}
    found = {key: name.removesuffix("_sum") if key in HISTOGRAMS else name for key, name in found.items()}
    return {**found,
            "prompt_tokens_total": first(lambda s: "prompt_tokens" in s and "cache" not in s and "request" not in s),
            "generation_tokens_total": first(lambda s: ("generation_tokens" in s and "request" not in s)
                                             or "tokens_predicted" in s),
            "prompt_tokens_counted": "all"}


def counter_deltas(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per phase: t_before, t_after and each series' after - before (missing when either is)."""
    readings = metrics.pivot_table(index=["phase", "when"], columns="series", values="value", aggfunc="last")
    times = metrics.groupby(["phase", "when"])["t"].last().unstack("when")
    phases = list(dict.fromkeys(metrics["phase"]))
    deltas = pd.DataFrame(index=pd.Index(phases, name="phase"))
    deltas["t_before"] = times.get("before", pd.Series(dtype=float)).reindex(phases)
    deltas["t_after"] = times.get("after", pd.Series(dtype=float)).reindex(phases)
    for series in readings.columns:
        after = _reading(readings, "after", series).reindex(phases)
        before = _reading(readings, "before", series).reindex(phases)
        deltas[series] = after - before
    return deltas


def _reading(readings: pd.DataFrame, when: str, series: str) -> pd.Series:
    if when not in readings.index.get_level_values("when"):
        return pd.Series(dtype=float)
    return readings.xs(when, level="when")[series]


def metrics_agreement(records: pd.DataFrame, metrics: pd.DataFrame, names: dict | None = None) -> pd.DataFrame:
    """Per phase with counters read before and after it: the engine's figures beside the client's.

    - engine_ttft_mean_s = Δ ttft_histogram_sum / Δ ttft_histogram_count over the phase's window
      (the time between the before and the after reading); engine_requests is Δ ttft_histogram_count
      (the requests whose first token the engine timed); engine_prompt_tokens and
      engine_generation_tokens are the counters' deltas.
    - The client side holds the phase's successful records AND the successful warm-ups sent
      inside the window: the engine counted those too. A warm-up (phase ``warmup-<scenario>``) is
      inside when t_before <= t_send + clock_offset_s <= t_after (clock_offset_s taken as 0 when
      unknown). The readings' ``t`` is the coordinator's clock; records of another machine without
      a clock offset cannot be placed, which shows as records_outside_window > 0 (the phase's own
      records that fall outside its window): then the warm-up count is not to be trusted.
      warmup_requests_straddling counts the warm-ups still running when a reading was taken
      (t_send + clock_offset_s < t <= that + e2e_s, for t = t_before or t_after): the engine counted
      only part of their tokens, which explains a small difference.
    - client_ttft_mean_s = mean ttft_s of those records; client_completion_tokens the sum of their
      completion_tokens; client_prompt_tokens the sum of what the engine's counter counts: every
      prompt token (vLLM), or only those it processed, prompt_tokens - cached_tokens (llama.cpp's
      counter leaves cached tokens out), missing when a record does not say its cached tokens.
    - Decode: engine_decode_tps = (Δ generation-tokens histogram sum - Δ its count) / Δ decode-time
      histogram sum (vLLM's request_generation_tokens and request_decode_time_seconds: the tokens
      after each request's first over the time from its first token to its last, pooled);
      client_decode_tps = Σ (completion_tokens - first_event_tokens) / Σ decode_s over the same
      records, the same convention; decode_diff_pct = (client - engine) / engine * 100.
    - Speculative decoding: engine_spec_draft_tokens and engine_spec_accepted_tokens, the counters'
      deltas, and engine_spec_acceptance_share = accepted / drafted.
    - client_failed_requests counts the failed records the engine may have counted but the client
      side leaves out (the phase's own, and warm-ups sent inside the window): an answer that was
      only an end-of-sequence token has a first token for the engine and none for the client. The
      means compare like with like only when engine_requests == client_requests.
    """
    if metrics.empty:
        return pd.DataFrame(columns=METRICS_COLUMNS)
    names = series_names(metrics, names)
    deltas = counter_deltas(metrics)
    ok = ok_mask(records)
    start = _number(records, "t_send") + _number(records, "clock_offset_s").fillna(0)
    end = start + _number(records, "e2e_s")
    rows = []
    for phase, window in deltas.iterrows():
        inside = start.between(window["t_before"], window["t_after"])
        own = records["phase"] == phase
        warmup = records["scenario"] == "warmup"
        running = pd.concat([(start < t) & (end >= t) for t in (window["t_before"], window["t_after"])],
                            axis=1).any(axis=1)
        mine = own | (warmup & inside)
        rows.append({"phase": phase, "window_s": window["t_after"] - window["t_before"],
                     "client_requests": int((mine & ok).sum()), "client_failed_requests": int((mine & ~ok).sum()),
                     "warmup_requests_in_window": int((warmup & inside & ok).sum()),
                     "warmup_requests_straddling": int((warmup & running & ok).sum()),
                     "records_outside_window": int((own & ok & ~inside).sum()),
                     **_engine_side(window, names), **_client_side(records[mine & ok], names)})
    frame = pd.DataFrame(rows, columns=METRICS_COLUMNS)
    return frame.assign(decode_diff_pct=_ratio(frame["client_decode_tps"] - frame["engine_decode_tps"],
                                               frame["engine_decode_tps"]) * 100)


def _engine_side(window: pd.Series, names: dict) -> dict:
    def delta(series: str) -> float:
        return float(window[series]) if series and series in window.index else float("nan")

    def histogram(key: str) -> tuple[float, float]:
        base = names[key]
        return (delta(f"{base}_sum"), delta(f"{base}_count")) if base else (float("nan"), float("nan"))

    (ttft_sum, ttft_count), (decode_sum, _), (tokens_sum, tokens_count) = (
        histogram(key) for key in HISTOGRAMS)
    drafted, accepted = delta(names["spec_draft_tokens_total"]), delta(names["spec_accepted_tokens_total"])
    return {"engine_requests": ttft_count,
            "engine_ttft_mean_s": ttft_sum / ttft_count if ttft_count > 0 else float("nan"),
            "engine_prompt_tokens": delta(names["prompt_tokens_total"]),
            "engine_generation_tokens": delta(names["generation_tokens_total"]),
            "engine_decode_tps": (tokens_sum - tokens_count) / decode_sum if decode_sum > 0 else float("nan"),
            "engine_spec_draft_tokens": drafted, "engine_spec_accepted_tokens": accepted,
            "engine_spec_acceptance_share": accepted / drafted if drafted > 0 else float("nan")}


def _client_side(counted: pd.DataFrame, names: dict) -> dict:
    prompt = _number(counted, "prompt_tokens")
    if names["prompt_tokens_counted"] == "processed":
        prompt = prompt - _number(counted, "cached_tokens")  # unknown cached tokens: unknown, not 0
        prompt_sum = prompt.sum() if prompt.notna().all() and len(prompt) else float("nan")
    else:
        prompt_sum = prompt.sum(min_count=1)
    decode_s = _number(counted, "decode_s")
    timed = decode_s.notna() & (decode_s > 0)
    after_first = (_number(counted, "completion_tokens") - _number(counted, "first_event_tokens"))[timed]
    return {"client_ttft_mean_s": _number(counted, "ttft_s").mean(),
            "client_prompt_tokens": prompt_sum,
            "client_completion_tokens": _number(counted, "completion_tokens").sum(min_count=1),
            "client_decode_tps": after_first.sum() / decode_s[timed].sum() if timed.any() else float("nan")}


def metrics_table(agreement: pd.DataFrame) -> pd.DataFrame:
    """metrics_agreement in long form: one value per phase and figure, n = client_requests. A figure
    the engine exposes in no phase (no such series: llama.cpp has no TTFT histogram, an engine that
    does not speculate no draft counters) is left out rather than shown missing in every row."""
    figures = [c for c in METRICS_COLUMNS if c not in ("phase", "client_requests")
               and pd.to_numeric(agreement[c], errors="coerce").notna().any()]
    rows = []
    for row in agreement.to_dict("records"):
        rows += long_rows("engine_metrics", row["phase"], {m: single(row[m], row["client_requests"])
                                                             for m in figures})
    return long_frame(rows)
