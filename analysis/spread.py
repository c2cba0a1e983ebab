"""The shape every quoted figure takes: median with min and max kept, and how many values made it.

A figure of no values is missing (NaN), with n = 0, never 0. Percentiles interpolate linearly
between the two nearest values (numpy's and pandas' default), so p95 of [1, 2] is 1.95.
"""

from __future__ import annotations

import math

import pandas as pd

LONG_COLUMNS = ["setup", "table", "row", "metric", "median", "min", "max", "n"]
NAN = float("nan")


def values_of(series: pd.Series) -> pd.Series:
    """The measured values as plain floats: missing ones dropped, never read as 0."""
    return pd.to_numeric(series, errors="coerce").dropna().astype(float)


def spread(series: pd.Series) -> dict:
    """median, min, max and n of the non-missing values."""
    values = values_of(series)
    if values.empty:
        return {"median": NAN, "min": NAN, "max": NAN, "n": 0}
    return {"median": float(values.median()), "min": float(values.min()), "max": float(values.max()),
            "n": int(len(values))}


def single(value: float | None, n: int) -> dict:
    """A figure that is one value, not a spread (a count, a pooled share): min and max stay empty."""
    missing = value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA
    return {"median": NAN if missing else float(value), "min": NAN, "max": NAN, "n": int(n)}


def p95(series: pd.Series) -> float:
    """95th percentile, linear interpolation; missing when there is no value."""
    values = values_of(series)
    return float(values.quantile(0.95)) if len(values) else NAN


def median(series: pd.Series) -> float:
    values = values_of(series)
    return float(values.median()) if len(values) else NAN


def share(flags: pd.Series) -> tuple[float, int]:
    """Share of true among the known booleans, and how many were known."""
    known = flags.dropna().astype(bool)
    return (float(known.mean()) if len(known) else NAN), int(len(known))


def long_rows(table: str, row: str, figures: dict[str, dict]) -> list[dict]:
    """One long-form row per metric of a table row (setup is added by the caller that knows it)."""
    return [{"setup": "", "table": table, "row": row, "metric": metric, **figure}
            for metric, figure in figures.items()]


def long_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=LONG_COLUMNS)
    return frame.astype({"median": float, "min": float, "max": float, "n": int})
