"""The first summary printed after a run: per phase, bench_tasks.figures' figures (the live table's).

Pure: DataFrame in, DataFrame (and its text) out. Failed requests are counted, never averaged in; a
phase whose requests all failed shows no figure (missing), not 0.
"""

from __future__ import annotations

import pandas as pd

from analysis.records import as_rows, measured
from bench_tasks import figures
from bench_tasks.formatting import shown

OVERVIEW_COLUMNS = ["phase", *figures.FIGURES]
SHOWN = [("phase", "phase", 16, None), ("requests", "requests", 9, None), ("errors", "errors", 7, None),
         ("TTFT p50 s", "ttft_p50_s", 12, 3), ("TTFT p95 s", "ttft_p95_s", 12, 3),
         ("decode tok/s", "decode_tps_p50", 14, 1), ("total tok/s", "total_tps", 13, 1)]  # header, column, width, digits


def overview(records: pd.DataFrame) -> pd.DataFrame:
    """Per phase, in the order the records come."""
    phases: dict[str, figures.Phase] = {}
    for row in as_rows(measured(records), ["phase", *figures.READS]):
        phases.setdefault(row["phase"], figures.Phase()).add(row)
    return pd.DataFrame([{"phase": phase, **found.figures()} for phase, found in phases.items()],
                        columns=OVERVIEW_COLUMNS)


def format_overview(table: pd.DataFrame) -> str:
    def cell(text: str, column: str, width: int) -> str:
        return f"{text:<{width}}" if column == "phase" else f"{text:>{width}}"

    lines = ["".join(cell(header, column, width) for header, column, width, _digits in SHOWN)]
    for row in table.to_dict("records"):
        lines.append("".join(cell(str(row[column]) if digits is None else shown(row[column], digits), column,
                                  width) for _header, column, width, digits in SHOWN))
    return "\n".join(lines)
