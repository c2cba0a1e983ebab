"""The shape every quoted figure takes: median with min and max kept, how many values made it, and a
confidence interval at a stated level.

A figure of no values is missing (NaN), with n = 0, never 0. Percentiles interpolate linearly
between the two nearest values (numpy's and pandas' default), so p95 of [1, 2] is 1.95.

The interval (``ci_low``, ``ci_high``, ``ci_level``, ``ci_method``) is ``bench_tasks.statistics``':
asked at ``LEVEL`` (90%), and ``ci_level`` is the coverage it achieved. A median or percentile of
values (a median over runs, a round's p95) gets order statistics: when the values are too few for
an end to reach its share the end falls back to the extreme value and the level says what that
covers (at n = 3 the median's interval is min–max at 75%; at n = 5 it reaches 94%). A pooled share
gets Clopper-Pearson's exact interval. One value covers nothing, and a count or a value that is one
measurement (a round's total tok/s) is not a sample of anything: their interval is empty.
"""

from __future__ import annotations

import math

import pandas as pd

from bench_tasks.statistics import Interval, median_interval, share_interval

CI_COLUMNS = ["ci_low", "ci_high", "ci_level", "ci_method"]
LONG_COLUMNS = ["setup", "table", "row", "metric", "median", "min", "max", "n", *CI_COLUMNS]
LEVEL = 0.90  # what every interval asks for; ``ci_level`` says what it achieved
NAN = float("nan")
NO_INTERVAL = {"ci_low": NAN, "ci_high": NAN, "ci_level": NAN, "ci_method": ""}


def values_of(series: pd.Series) -> pd.Series:
    """The measured values as plain floats: missing ones dropped, never read as 0."""
    return pd.to_numeric(series, errors="coerce").dropna().astype(float)


def interval_columns(interval: Interval | None) -> dict:
    """An interval as the long frame's columns; none (or one that covers nothing) is empty."""
    if interval is None or not interval.level > 0:
        return dict(NO_INTERVAL)
    # The level is a sum of binomial terms: 0.75 comes out as 0.7500000000000007, rounded for the CSV's reader.
    return {"ci_low": _float(interval.low), "ci_high": _float(interval.high),
            "ci_level": round(float(interval.level), 4), "ci_method": interval.method}


def spread(series: pd.Series) -> dict:
    """median, min, max and n of the non-missing values, and the median's interval."""
    values = values_of(series)
    if values.empty:
        return {"median": NAN, "min": NAN, "max": NAN, "n": 0, **NO_INTERVAL}
    return {"median": float(values.median()), "min": float(values.min()), "max": float(values.max()),
            "n": int(len(values)), **interval_columns(median_interval(values.tolist(), LEVEL))}


def single(value: float | None, n: int, interval: Interval | None = None) -> dict:
    """A figure that is one value, not a spread (a count, a pooled share, a round's p95): min and max stay
    empty; ``interval``, when the value estimates something (a share, a percentile), its interval."""
    missing = value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA
    return {"median": NAN if missing else float(value), "min": NAN, "max": NAN, "n": int(n),
            **interval_columns(None if missing else interval)}


def share_figure(flags: pd.Series) -> dict:
    """The share of true among the known booleans, pooled, with Clopper-Pearson's interval; n = the known."""
    known = flags.dropna().astype(bool)
    if known.empty:
        return single(NAN, 0)
    return single(float(known.mean()), len(known), share_interval(int(known.sum()), len(known), LEVEL))


def share(flags: pd.Series) -> tuple[float, int]:
    """Share of true among the known booleans, and how many were known."""
    known = flags.dropna().astype(bool)
    return (float(known.mean()) if len(known) else NAN), int(len(known))


def long_rows(table: str, row: str, figures: dict[str, dict]) -> list[dict]:
    """One long-form row per metric of a table row (setup is added by the caller that knows it)."""
    return [{"setup": "", "table": table, "row": row, "metric": metric, **NO_INTERVAL, **figure}
            for metric, figure in figures.items()]


def long_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=LONG_COLUMNS)
    return frame.astype({"median": float, "min": float, "max": float, "n": int, "ci_low": float, "ci_high": float,
                         "ci_level": float, "ci_method": str})


def _float(value: float | None) -> float:
    return NAN if value is None else float(value)
