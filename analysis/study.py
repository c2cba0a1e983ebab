"""The study's tables: records in, long-form figures out (table, row, metric, median, min, max, n).

Every function takes the records of ONE setup (warm-ups may be present: they are left out here)
and returns long rows in ``spread.LONG_COLUMNS`` with ``setup`` left empty for the caller.

How a figure is made (also in docs/measurement.md#how-the-reports-figures-are-made and
docs/reference.md#the-tables):

- Only successful requests (``ok`` true) are measured; failed ones are counted in the
  ``requests`` and ``errors`` tables. A row whose requests all failed has missing figures and
  n = 0, never 0.
- "Median over runs": the requests of one run (the ``round`` column) are first reduced to their
  median, then the per-run medians give median, min and max; n is the number of runs that had a
  value. A run is one pass of the suite over its chat questions, its agent session, one fresh
  prompt of a size, one burst round. Where a run holds one request (a prompt size, an agent
  turn, a needle cell) this is the median, min and max over requests.
- Counts and pooled shares are one value, not a spread: it is in ``median``, ``min`` and ``max``
  are empty, and n is the number it counts over (requests, or tool calls for a share).
"""

from __future__ import annotations

import pandas as pd

from analysis.records import flags_seen, has_flag, measured, of_scenario, phase_order, succeeded
from analysis.spread import NAN, long_frame, long_rows, median, p95, share, single, spread

KNOWN_FLAGS = ("cache_hit", "client_saturated", "bunched")
TABLE_TITLES = {
    "requests": "Requests, failures and flags per phase",
    "chat": "One person at a time: chat",
    "prompt": "One person at a time: fresh prompts",
    "agent": "One person at a time: agent session",
    "agent_turns": "Agent session per turn",
    "burst": "N at once: bursts",
    "burst_rounds": "Burst rounds",
    "needle": "Needles",
    "errors": "Failed requests per phase and error class",
}


def over_runs(requests: pd.DataFrame, column: str) -> dict:
    """Median within each run (``round``), then median/min/max over the runs; n = runs with a value."""
    if requests.empty:
        return spread(pd.Series([], dtype=float))
    values = pd.to_numeric(requests[column], errors="coerce").astype(float)
    return spread(values.groupby(requests["round"], dropna=False, sort=True).median())


def phases(records: pd.DataFrame, scenario: str | None = None):
    """(phase, its measured records) in suite order, failed requests included."""
    kept = measured(records) if scenario is None else of_scenario(measured(records), scenario)
    for phase in phase_order(kept):
        yield phase, kept[kept["phase"] == phase]


def runs_table(records: pd.DataFrame, scenario: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """Per phase of ``scenario``: each column's median within each run, then over the runs."""
    rows = []
    for phase, group in phases(records, scenario):
        ok = succeeded(group)
        rows += long_rows(scenario, phase, {column: over_runs(ok, column) for column in columns})
    return long_frame(rows)


def chat_table(records: pd.DataFrame) -> pd.DataFrame:
    """Chat decode tok/s and first token, median over runs of each run's median."""
    return runs_table(records, "chat", ("decode_tps", "ttft_s"))


def prompt_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per fresh-prompt size: prompt tok/s, first token and the prompt's measured tokens, over runs."""
    return runs_table(records, "prompt", ("prompt_tps", "ttft_s", "prompt_tokens"))


def agent_table(records: pd.DataFrame) -> pd.DataFrame:
    """Agent first token and decode tok/s: each session's median over its turns, then over sessions."""
    return runs_table(records, "agent", ("ttft_s", "decode_tps"))


def agent_turns_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per agent turn: first token, prompt and cached tokens over sessions; tool calls pooled."""
    agent = of_scenario(measured(records), "agent")
    rows = []
    for turn in sorted(agent["turn"].dropna().unique()):
        group = agent[agent["turn"] == turn]
        ok = succeeded(group)
        valid_share, calls = share(ok["tool_call_valid"])
        rows += long_rows("agent_turns", f"turn {int(turn)}", {
            "ttft_s": over_runs(ok, "ttft_s"),
            "prompt_tokens": over_runs(ok, "prompt_tokens"),
            "cached_tokens": over_runs(ok, "cached_tokens"),
            "tool_calls": single(calls, len(ok)),
            "tool_call_valid_share": single(valid_share, calls),
        })
    return long_frame(rows)


ROUND_COLUMNS = ["phase", "concurrency", "round", "requests", "ok", "total_tps", "ttft_p95_s", "start_spread_s",
                 "per_user_decode_tps"]


def burst_rounds(records: pd.DataFrame) -> pd.DataFrame:
    """One row per burst phase and round, phases in suite order, rounds ascending:

    - requests, ok: the round's requests, and those that succeeded;
    - total_tps: generated tokens of the round's ok requests over the time from release to the last
      end, max(release_offset_s + e2e_s) over them. When any ok request lacks ``release_offset_s``
      the span falls back to the send times: max(start + e2e_s) - min(start), start = t_send +
      clock_offset_s (0 when unknown), so requests of several machines share a clock;
    - ttft_p95_s: p95 of the ok requests' ttft_s;
    - start_spread_s: latest minus earliest release offset of every request sent, whatever its outcome;
    - per_user_decode_tps: median decode_tps of the ok requests.
    """
    burst = of_scenario(measured(records), "burst")
    rounds = _round_figures(burst)
    rank = {phase: i for i, phase in enumerate(phase_order(burst))}
    rounds = rounds.assign(rank=rounds["phase"].map(rank)).sort_values(["rank", "round"], na_position="last",
                                                                        kind="stable")
    return rounds[ROUND_COLUMNS].reset_index(drop=True)


def _round_figures(requests: pd.DataFrame) -> pd.DataFrame:
    """burst_rounds' figures for every (phase, round) at once, grouped in pandas, not looped."""
    def number(column: str) -> pd.Series:
        return pd.to_numeric(requests[column], errors="coerce").astype(float)

    ok = requests["ok"].fillna(False).astype(bool)
    e2e, offset = number("e2e_s"), number("release_offset_s")
    start = number("t_send") + number("clock_offset_s").fillna(0)
    columns = pd.DataFrame({
        "phase": requests["phase"], "round": requests["round"], "concurrency": requests["concurrency"], "ok": ok,
        "tokens": number("completion_tokens").where(ok), "unreleased": ok & offset.isna(),
        "released_end": (offset + e2e).where(ok), "end": (start + e2e).where(ok), "start": start.where(ok),
        "offset": offset, "ttft": number("ttft_s").where(ok), "decode": number("decode_tps").where(ok)})
    groups = columns.groupby(["phase", "round"], dropna=False, sort=False)
    rounds = groups.agg(concurrency=("concurrency", "max"), requests=("ok", "size"), ok=("ok", "sum"),
                        unreleased=("unreleased", "any"), released_end=("released_end", "max"),
                        end=("end", "max"), start=("start", "min"), first=("offset", "min"),
                        last=("offset", "max"), per_user_decode_tps=("decode", "median"))
    rounds["tokens"] = groups["tokens"].sum(min_count=1)
    rounds["ttft_p95_s"] = groups["ttft"].quantile(0.95)
    span = rounds["released_end"].where(~rounds["unreleased"], rounds["end"] - rounds["start"])
    rounds["total_tps"] = rounds["tokens"] / span.where(span > 0)
    rounds["start_spread_s"] = rounds["last"] - rounds["first"]
    return rounds.reset_index().astype({"requests": int, "ok": int})


BURST_METRICS = ("total_tps", "ttft_p95_s", "start_spread_s", "per_user_decode_tps")


def burst_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per burst size: each round's figures (see burst_rounds), then median/min/max over rounds."""
    rounds = burst_rounds(records)
    rows = []
    for phase, group in rounds.groupby("phase", sort=False):
        rows += long_rows("burst", phase, {metric: spread(group[metric]) for metric in BURST_METRICS})
    return long_frame(rows)


def burst_rounds_table(records: pd.DataFrame) -> pd.DataFrame:
    """burst_rounds in long form: each round's figure in median, n = the round's ok requests."""
    rows = []
    for r in burst_rounds(records).itertuples(index=False):
        label = f"{r.phase} round {r.round}" if pd.notna(r.round) else r.phase
        rows += long_rows("burst_rounds", label, {m: single(getattr(r, m), r.ok) for m in BURST_METRICS})
    return long_frame(rows)


def needle_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per needle size and depth, then per size over all depths: found count and share over the
    answered (ok) requests, and answer time e2e_s: median, min and max over those requests (the
    suite sends one request per cell, so per cell this is also the spread over runs)."""
    rows = []
    for phase, group in phases(records, "needle"):
        cells = [(f"{phase} depth {depth:g}", group[group["needle_depth"] == depth])
                 for depth in sorted(group["needle_depth"].dropna().unique())]
        for label, cell in [*cells, (f"{phase} all depths", group)]:
            ok = succeeded(cell)
            found_share, answered = share(ok["needle_found"])
            found = int(ok["needle_found"].dropna().astype(bool).sum())
            rows += long_rows("needle", label, {"found": single(found if answered else NAN, answered),
                                                "found_share": single(found_share, answered),
                                                "e2e_s": spread(ok["e2e_s"])})
    return long_frame(rows)


def requests_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per phase: requests sent, ok, failed, and how many carry each flag; n = requests."""
    kept = measured(records)
    flags = list(dict.fromkeys([*KNOWN_FLAGS, *flags_seen(kept)]))
    rows = []
    for phase, group in phases(records):
        ok = int(group["ok"].fillna(False).astype(bool).sum())
        counts = {"requests": len(group), "ok": ok, "failed": len(group) - ok}
        counts |= {flag: int(has_flag(group, flag).sum()) for flag in flags}
        rows += long_rows("requests", phase, {k: single(v, len(group)) for k, v in counts.items()})
    return long_frame(rows)


def errors_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per phase, failed requests of each error class met in the setup (0 where a phase had none of
    that class); n = the phase's requests. Empty when no request failed. A failed request without
    an error class counts as ``unknown``."""
    classes = list(dict.fromkeys(_error_classes(measured(records))))
    rows = []
    for phase, group in phases(records) if classes else ():
        counts = _error_classes(group).value_counts()
        rows += long_rows("errors", phase, {cls: single(int(counts.get(cls, 0)), len(group)) for cls in classes})
    return long_frame(rows)


def _error_classes(records: pd.DataFrame) -> pd.Series:
    failed = records[~records["ok"].fillna(False).astype(bool)]
    return failed["error"].fillna("").astype(str).replace("", "unknown")


TABLES = (requests_table, chat_table, prompt_table, agent_table, agent_turns_table, burst_table,
          burst_rounds_table, needle_table, errors_table)


def study(records: pd.DataFrame) -> pd.DataFrame:
    """All the study's tables of one setup, in the order the summary shows them."""
    frames = [table(records) for table in TABLES]
    return pd.concat([f for f in frames if not f.empty] or [long_frame([])], ignore_index=True)


def warnings(records: pd.DataFrame) -> list[str]:
    """Sentences the summary must show above its tables: untrustworthy or empty phases."""
    notes = []
    for phase, group in phases(records):
        saturated = int(has_flag(group, "client_saturated").sum())
        if saturated:
            notes.append(f"{phase}: {saturated} of {len(group)} requests were read too late by a saturated client "
                         "for their stamps to be trusted (add client processes or machines).")
        cached = int(has_flag(group, "cache_hit").sum())
        if cached:
            notes.append(f"{phase}: {cached} of {len(group)} fresh prompts were served from the cache; "
                         "their prompt figures do not measure prompt processing.")
        bunched = int(has_flag(group, "bunched").sum())
        if bunched:
            notes.append(f"{phase}: {bunched} of {len(group)} streams arrived in lumps; their decode and gap "
                         "figures time the delivery, not the generation.")
        if succeeded(group).empty:
            notes.append(f"{phase}: all {len(group)} requests failed; it shows no figure.")
    return notes
