"""The study's tables: records in, long-form figures out (table, row, metric, median, min, max, n and
the interval: ci_low, ci_high, ci_level, ci_method).

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
  turn, a needle cell) this is the median, min and max over requests. Its interval is the
  order-statistic interval of the median over those values (``spread.spread``: at n = 3, min–max
  at 75%).
- Counts and pooled shares are one value, not a spread: it is in ``median``, ``min`` and ``max``
  are empty, and n is the number it counts over (requests, or tool calls for a share). A share
  has Clopper-Pearson's interval; a count has none.
- A burst round's figures are one value each: its p95 first token has the order-statistic
  interval of a p95 over the round's requests, its median decode tok/s that of a median; its
  total tok/s and start spread are one measurement each, without interval.
"""

from __future__ import annotations

import pandas as pd

from analysis import cache_hits, outages
from analysis.records import (as_rows, failed, flags_seen, has_flag, measured, of_scenario, ok_mask, phase_order,
                              succeeded)
from analysis.spread import LEVEL, NAN, long_frame, long_rows, share, share_figure, single, spread
from bench_tasks import figures
from bench_tasks.statistics import quantile_interval

KNOWN_FLAGS = ("cache_hit", "client_saturated", "cpu_stolen", "bunched")
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
        _valid_share, calls = share(ok["tool_call_valid"])
        rows += long_rows("agent_turns", f"turn {int(turn)}", {
            "ttft_s": over_runs(ok, "ttft_s"),
            "prompt_tokens": over_runs(ok, "prompt_tokens"),
            "cached_tokens": over_runs(ok, "cached_tokens"),
            "tool_calls": single(calls, len(ok)),
            "tool_call_valid_share": share_figure(ok["tool_call_valid"]),
        })
    return long_frame(rows)


ROUND_COLUMNS = ["phase", "concurrency", "round", "requests", "ok", "total_tps", "ttft_p95_s", "start_spread_s",
                 "per_user_decode_tps"]


def burst_rounds(records: pd.DataFrame) -> pd.DataFrame:
    """One row per burst phase and round, phases in suite order, rounds ascending:

    - requests, ok: the round's requests, and those that succeeded;
    - total_tps, ttft_p95_s, per_user_decode_tps: the round's ``total_tps``, ``ttft_p95_s`` and
      ``decode_tps_p50`` as bench_tasks.figures defines them (the live table's and the overview's): the
      tokens of the round's ok requests over the time from the release to the last end, the p95 of their
      ttft_s, their median decode_tps;
    - start_spread_s: latest minus earliest release offset of every request sent, whatever its outcome.
    """
    burst = of_scenario(measured(records), "burst")
    rounds = _rounds(burst)
    rank = {phase: i for i, phase in enumerate(phase_order(burst))}
    table = pd.DataFrame([_round(phase, rows) for (phase, _number), rows in rounds.items()], columns=ROUND_COLUMNS)
    table = table.assign(rank=table["phase"].map(rank)).sort_values(["rank", "round"], na_position="last",
                                                                    kind="stable")
    return table[ROUND_COLUMNS].reset_index(drop=True).astype({"requests": int, "ok": int})


def _rounds(burst: pd.DataFrame) -> dict[tuple, list[dict]]:
    """(phase, round number) -> the round's records as dicts (what bench_tasks.figures reads)."""
    rounds: dict[tuple, list[dict]] = {}
    for row in as_rows(burst, ["phase", "concurrency", *figures.READS]):
        rounds.setdefault((row["phase"], figures.number(row["round"])), []).append(row)
    return rounds


def _round(phase: str, rows: list[dict]) -> dict:
    shown = figures.phase(rows)
    offsets = [o for o in (figures.number(row.get("release_offset_s")) for row in rows) if o is not None]
    concurrency = [c for c in (figures.number(row.get("concurrency")) for row in rows) if c is not None]
    return {"phase": phase, "concurrency": max(concurrency) if concurrency else NAN,
            "round": rows[0]["round"], "requests": shown["requests"],
            "ok": shown["requests"] - shown["errors"], "total_tps": _nan(shown["total_tps"]),
            "ttft_p95_s": _nan(shown["ttft_p95_s"]), "start_spread_s": max(offsets) - min(offsets) if offsets else NAN,
            "per_user_decode_tps": _nan(shown["decode_tps_p50"])}


def _nan(value: float | None) -> float:
    return NAN if value is None else value


BURST_METRICS = ("total_tps", "ttft_p95_s", "start_spread_s", "per_user_decode_tps")


def burst_tables(records: pd.DataFrame) -> pd.DataFrame:
    """Table ``burst``: per burst size, each round's figures (see burst_rounds), then median, min and max
    over the rounds; table ``burst_rounds``: each round's figure in median, n = the round's ok requests, its
    p95 first token and median decode tok/s with their order-statistic intervals over those requests."""
    rounds = burst_rounds(records)
    rows = []
    for phase, group in rounds.groupby("phase", sort=False):
        rows += long_rows("burst", phase, {metric: spread(group[metric]) for metric in BURST_METRICS})
    rows_of = _rounds(of_scenario(measured(records), "burst"))
    for r in rounds.itertuples(index=False):
        label = f"{r.phase} round {r.round}" if pd.notna(r.round) else r.phase
        mine = _round_intervals(rows_of[(r.phase, figures.number(r.round))])
        rows += long_rows("burst_rounds", label, {m: single(getattr(r, m), r.ok, mine.get(m)) for m in BURST_METRICS})
    return long_frame(rows)


ROUND_INTERVALS = {"ttft_p95_s": ("ttft_s", 0.95), "per_user_decode_tps": ("decode_tps", 0.5)}


def _round_intervals(rows: list[dict]) -> dict:
    """{metric: its order-statistic interval} for a round's figures that are a percentile of its ok requests'
    values (the values bench_tasks.figures takes them from)."""
    ok = [row for row in rows if figures.succeeded(row)]
    found = {}
    for metric, (column, q) in ROUND_INTERVALS.items():
        values = [v for v in (figures.number(row.get(column)) for row in ok) if v is not None]
        found[metric] = quantile_interval(values, q, LEVEL)
    return found


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
            _found_share, answered = share(ok["needle_found"])
            found = int(ok["needle_found"].dropna().astype(bool).sum())
            rows += long_rows("needle", label, {"found": single(found if answered else NAN, answered),
                                                "found_share": share_figure(ok["needle_found"]),
                                                "e2e_s": spread(ok["e2e_s"])})
    return long_frame(rows)


def requests_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per phase: requests sent, ok, failed, and how many carry each flag; n = requests."""
    kept = measured(records)
    flags = list(dict.fromkeys([*KNOWN_FLAGS, *flags_seen(kept)]))
    rows = []
    for phase, group in phases(records):
        fine = int(ok_mask(group).sum())
        counts = {"requests": len(group), "ok": fine, "failed": len(group) - fine}
        counts |= {flag: int(has_flag(group, flag).sum()) for flag in flags}
        if not cache_hits.checked(group).any():
            counts["cache_hit"] = NAN  # not checked: unknown, never 0
        if group.get("cpu_stolen_s", pd.Series(dtype=float)).isna().all():
            counts["cpu_stolen"] = NAN  # no steal counter on the client's machine (or an older run): unknown
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
    return failed(records)["error"].fillna("").astype(str).replace("", "unknown")


TABLES = (requests_table, chat_table, prompt_table, agent_table, agent_turns_table, burst_tables, needle_table,
          errors_table)


def study(records: pd.DataFrame) -> pd.DataFrame:
    """All the study's tables of one setup, in the order the summary shows them."""
    frames = [table(records) for table in TABLES]
    return pd.concat([f for f in frames if not f.empty] or [long_frame([])], ignore_index=True)


def _most_stolen_at_once(group: pd.DataFrame) -> float:
    """The longest the host stopped a CPU during a flagged request: its ``cpu_pause_s`` (runs before it was
    kept flagged by ``cpu_stolen_s``, the sum over the request)."""
    flagged = group[has_flag(group, "cpu_stolen")]
    pause = flagged.get("cpu_pause_s", pd.Series(dtype=float)).astype(float)
    return (pause if pause.notna().any() else flagged["cpu_stolen_s"].astype(float)).max()


def warnings(records: pd.DataFrame) -> list[str]:
    """Sentences the summary must show above its tables: untrustworthy or empty phases, requests served from a
    cache beyond their share (or that could not be checked), and gaps when the server could not be reached."""
    notes = []
    for phase, group in phases(records):
        saturated = int(has_flag(group, "client_saturated").sum())
        if saturated:
            notes.append(f"{phase}: {saturated} of {len(group)} requests were read too late by a saturated client "
                         "for their stamps to be trusted (add client processes or machines).")
        stolen = int(has_flag(group, "cpu_stolen").sum())
        if stolen:
            most_ms = _most_stolen_at_once(group) * 1000
            notes.append(f"{phase}: during {stolen} of {len(group)} requests the client machine's host took one of its "
                         f"CPUs away for up to {most_ms:.0f} ms at a time (steal): their stamps may be that late; "
                         "measure from a machine whose host does not share its CPUs.")
        bunched = int(has_flag(group, "bunched").sum())
        if bunched:
            notes.append(f"{phase}: {bunched} of {len(group)} streams arrived in lumps; their decode and gap "
                         "figures time the delivery, not the generation.")
        if succeeded(group).empty:
            notes.append(f"{phase}: all {len(group)} requests failed; it shows no figure.")
    return notes + cache_hits.sentences(records) + outages.sentences(records)
