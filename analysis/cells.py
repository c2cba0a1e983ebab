"""Long-form figures laid out for reading: one line per table row, one column per metric.

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


def display(long: pd.DataFrame, setups: list[str] | None = None) -> pd.DataFrame:
    """One table's long rows as strings: ``row``, then per setup its metrics and ``n``.

    With several setups the headers are ``SETUP: metric`` (one column group per setup); with one
    (``setups`` None) they are the bare metric names.
    """
    metrics = list(dict.fromkeys(long["metric"]))
    rows = list(dict.fromkeys(long["row"]))
    groups = setups if setups is not None else [None]
    out = pd.DataFrame({"row": rows})
    for setup in groups:
        part = long if setup is None else long[long["setup"] == setup]
        prefix = "" if setup is None else f"{setup}: "
        by_key = {(r["row"], r["metric"]): r for r in part.to_dict("records")}
        line_n = part.groupby("row")["n"].max()
        for metric in metrics:
            out[prefix + metric] = [cell(by_key[(row, metric)], metric, line_n.get(row, 0))
                                    if (row, metric) in by_key else MISSING for row in rows]
        out[prefix + "n"] = [str(int(line_n.get(row, 0))) for row in rows]
    return out


def header_name(header: str) -> str:
    """The metric a displayed header stands for (without its ``SETUP: `` prefix)."""
    return header.rsplit(": ", 1)[-1]
