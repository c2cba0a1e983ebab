"""Which records a figure is made of, and the order phases are shown in.

Warm-ups (scenario ``warmup``) never count. Failed requests (``ok`` false or missing) are
counted, never measured.
"""

from __future__ import annotations

import pandas as pd

from bench_tasks.record import flag_set

SCENARIO_ORDER = ("chat", "prompt", "agent", "burst", "needle")  # the suite's own order


def measured(records: pd.DataFrame) -> pd.DataFrame:
    """Requests that count: not warm-ups."""
    return records[records["scenario"] != "warmup"]


def ok_mask(records: pd.DataFrame) -> pd.Series:
    """Whether each request succeeded: ``ok`` true (false, or missing: not known to have, counts as failed)."""
    return records["ok"].fillna(False).astype(bool)


def succeeded(records: pd.DataFrame) -> pd.DataFrame:
    return records[ok_mask(records)]


def failed(records: pd.DataFrame) -> pd.DataFrame:
    return records[~ok_mask(records)]


def of_scenario(records: pd.DataFrame, scenario: str) -> pd.DataFrame:
    return records[records["scenario"] == scenario]


def has_flag(records: pd.DataFrame, flag: str) -> pd.Series:
    """Whether each record carries ``flag`` (``record.flag_set``: the one reader of the cell). A run's
    records carry few distinct cells: each is read once."""
    cells = records["flags"].fillna("")
    carries = {cell: flag in flag_set(cell) for cell in cells.unique()}
    return cells.map(carries).astype(bool)


def flags_seen(records: pd.DataFrame) -> list[str]:
    return sorted(set().union(*map(flag_set, records["flags"].dropna().unique())))


def as_rows(records: pd.DataFrame, columns) -> list[dict]:
    """The records as dicts of those of ``columns`` they have (what bench_tasks' pure functions read):
    built from each column's values at once, several times faster than ``to_dict("records")``."""
    kept = [column for column in dict.fromkeys(columns) if column in records]
    values = [records[column].tolist() for column in kept]
    return [dict(zip(kept, row)) for row in zip(*values)]


def phase_order(records: pd.DataFrame) -> list[str]:
    """Suite order: scenario, then prompt size or concurrency ascending, then first appearance."""
    firsts = records.reset_index(drop=True).reset_index().groupby("phase", sort=False).agg(
        scenario=("scenario", "first"), size=("prompt_size", "min"), concurrency=("concurrency", "min"),
        first=("index", "min"))
    rank = firsts["scenario"].map(lambda s: SCENARIO_ORDER.index(s) if s in SCENARIO_ORDER else len(SCENARIO_ORDER))
    keyed = firsts.assign(rank=rank, size=firsts["size"].astype("Float64").fillna(0),
                          concurrency=firsts["concurrency"].astype("Float64").fillna(0))
    return list(keyed.sort_values(["rank", "size", "concurrency", "first"]).index)

