"""Which records a figure is made of, and the order phases are shown in.

Warm-ups (scenario ``warmup``) never count. Failed requests (``ok`` false or missing) are
counted, never measured.
"""

from __future__ import annotations

import re

import pandas as pd

SCENARIO_ORDER = ("chat", "prompt", "agent", "burst", "needle")  # the suite's own order


def measured(records: pd.DataFrame) -> pd.DataFrame:
    """Requests that count: not warm-ups."""
    return records[records["scenario"] != "warmup"]


def succeeded(records: pd.DataFrame) -> pd.DataFrame:
    return records[records["ok"].fillna(False).astype(bool)]


def failed(records: pd.DataFrame) -> pd.DataFrame:
    return records[~records["ok"].fillna(False).astype(bool)]


def of_scenario(records: pd.DataFrame, scenario: str) -> pd.DataFrame:
    return records[records["scenario"] == scenario]


def has_flag(records: pd.DataFrame, flag: str) -> pd.Series:
    """Flags are ';'-joined in one cell; a flag is present when it is one of the parts."""
    flags = records["flags"].fillna("").astype(str)
    present = pd.Series(False, index=records.index)
    flagged = flags != ""  # most records carry none: only those that do are searched
    present[flagged] = flags[flagged].str.contains(f"(?:^|;){re.escape(flag)}(?:;|$)", regex=True)
    return present


def flags_seen(records: pd.DataFrame) -> list[str]:
    flags = records["flags"].fillna("").astype(str)
    parts = flags[flags != ""].str.split(";").explode()
    return sorted(p for p in parts.unique() if p)


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

