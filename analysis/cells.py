"""Long-form figures laid out for reading: one line per table row (and setup), one column per metric.

A cell reads ``median (75% CI low–high)`` when the figure has a confidence interval (a median over
runs, a percentile, a share: ``spread``), its level the coverage it reached (an end the values
cannot place is "?": ``formatting.ci``), the value alone when it has none (a count, one value), and ``MISSING`` when it
is missing. A column ``n`` gives the largest n of the line; a cell whose own n is smaller says
``n=k``. The min–max ranges stay in summary.csv.
"""

from __future__ import annotations

import pandas as pd

from bench_tasks.figures import number
from bench_tasks.formatting import MISSING, ci, in_unit


def cell(figure: dict, metric: str, line_n: int) -> str:
    text = in_unit(figure["median"], metric)
    if text != MISSING and number(figure.get("ci_level")) is not None:
        text += f" ({ci(figure['ci_level'], figure['ci_low'], figure['ci_high'], lambda end: in_unit(end, metric))})"
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
