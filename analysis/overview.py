"""The first summary printed after a run: per phase, requests, errors and the headline figures.

Pure: DataFrame in, DataFrame out. Failed requests are counted, never averaged in; a phase whose
requests all failed shows no figure (missing), not 0.
"""

from __future__ import annotations

import pandas as pd

from analysis.records import measured, succeeded
from analysis.study import burst_rounds

OVERVIEW_COLUMNS = ["phase", "requests", "errors", "ttft_median_s", "ttft_p95_s", "decode_tps_median",
                    "total_tps"]


def total_tps(group: pd.DataFrame) -> float | None:
    """Generated tokens of the successful requests over the wall time the group spanned."""
    tokens = pd.to_numeric(succeeded(group)["completion_tokens"], errors="coerce").sum(min_count=1)
    if pd.isna(tokens):  # no count at all: missing, not 0
        return None
    start = group["t_send"].min()
    end = (group["t_send"] + group["e2e_s"]).max()
    span = end - start
    return float(tokens / span) if pd.notna(span) and span > 0 else None


def overview(records: pd.DataFrame) -> pd.DataFrame:
    """Per phase; a burst phase's total tok/s is the report's: the median over its rounds of each
    round's tokens over the time from its release to its last answer (the pauses between rounds are
    not the server's)."""
    rows = []
    by_round = burst_rounds(records).groupby("phase")["total_tps"].median()
    for phase, group in measured(records).groupby("phase", sort=False):
        ok = succeeded(group)
        ttft = ok["ttft_s"].dropna()
        decode = ok["decode_tps"].dropna()
        rows.append({
            "phase": phase,
            "requests": len(group),
            "errors": len(group) - len(ok),
            "ttft_median_s": ttft.median() if len(ttft) else None,
            "ttft_p95_s": ttft.quantile(0.95) if len(ttft) else None,
            "decode_tps_median": decode.median() if len(decode) else None,
            "total_tps": by_round[phase] if phase in by_round.index else total_tps(group),
        })
    return pd.DataFrame(rows, columns=OVERVIEW_COLUMNS)


def format_overview(table: pd.DataFrame) -> str:
    def cell(value, digits):
        return "-" if value is None or pd.isna(value) else f"{value:.{digits}f}"

    lines = [f"{'phase':<16}{'requests':>9}{'errors':>7}{'TTFT p50 s':>12}{'TTFT p95 s':>12}"
             f"{'decode tok/s':>14}{'total tok/s':>13}"]
    for row in table.itertuples(index=False):
        lines.append(f"{row.phase:<16}{row.requests:>9}{row.errors:>7}{cell(row.ttft_median_s, 3):>12}"
                     f"{cell(row.ttft_p95_s, 3):>12}{cell(row.decode_tps_median, 1):>14}{cell(row.total_tps, 1):>13}")
    return "\n".join(lines)
