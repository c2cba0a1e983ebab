"""Long-form figures laid out for reading: one line per table row (and setup), one column per metric.

A cell reads ``median (min–max)`` when the figure spreads over several values, the value alone
when it is one value (a count, a share, a single run), and "–" when it is missing. A column ``n``
gives the largest n of the line; a cell whose own n is smaller says ``n=k``.
"""

from __future__ import annotations

import math

import pandas as pd

MISSING = "–"


def number(value: float, metric: str) -> str:
    """A value in the unit its metric name says."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if metric.endswith("_share"):
        return f"{value * 100:.0f}%"
    if metric.endswith("_pct"):
        return f"{0.0 if abs(value) < 0.05 else value:+.1f}%"  # no "-0.0%"
    if metric.endswith("_ms"):
        return f"{value:.1f}"
    if metric.endswith("_s"):
        return f"{value:.3f}"
    if metric.endswith("_tps"):
        return f"{value:.1f}"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def cell(figure: dict, metric: str, line_n: int) -> str:
    text = number(figure["median"], metric)
    if text != MISSING and pd.notna(figure["min"]) and figure["n"] > 1:
        text += f" ({number(figure['min'], metric)}–{number(figure['max'], metric)})"
    if 0 < figure["n"] < line_n:
        text += f" n={figure['n']}"
    return text


def display(long: pd.DataFrame, keys: dict[str, str] | None = None) -> pd.DataFrame:
    """One table's long rows as strings: ``row``, the metrics, ``n``.

    With several setups (``keys``: label -> short key) each row gets one line per setup, the lines
    of a row together, and a column ``setup`` holding the key: the table grows down, not sideways.
    """
    metrics = list(dict.fromkeys(long["metric"]))
    rows = list(dict.fromkeys(long["row"]))
    by_key = {(r["setup"], r["row"], r["metric"]): r for r in long.to_dict("records")}
    line_n = long.groupby(["setup", "row"])["n"].max().to_dict()
    present = set(zip(long["setup"], long["row"]))
    setups = keys or dict.fromkeys(long["setup"])
    lines = []
    for row in rows:
        for setup in setups:
            if (setup, row) not in present:
                continue
            n = line_n[(setup, row)]
            line = {"row": row} | ({"setup": keys[setup]} if keys else {})
            line |= {metric: cell(by_key[(setup, row, metric)], metric, n) if (setup, row, metric) in by_key
                     else MISSING for metric in metrics}
            lines.append(line | {"n": str(int(n))})
    return pd.DataFrame(lines, columns=["row", *(["setup"] if keys else []), *metrics, "n"])
