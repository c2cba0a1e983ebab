"""Gaps in the service: stretches of a run when no request succeeded because the server went away (it
crashed and its supervisor brought it back, a proxy lost it). Pure: records in, a frame or sentences out.

Requests are taken in the order they ended, on the setup's common clock (stalls.common_clock). A gap is a
run of consecutive failed requests, with no success ending among them, that holds a request which found
no server (``connect_error``, or a proxy's 502, 503 or 504) or two whose connection was cut
(``disconnect``, ``no_done``: a server that dies cuts every stream it holds; one cut stream alone is a
request's failure, not a gap). It begins when the first of them ended and ends when the first request
that succeeded after it was sent (the server was back by then, at the latest); a run that ended before
any did was never seen to recover. Warm-ups count: they are requests too.
"""

from __future__ import annotations

import time

import pandas as pd

from analysis.records import phase_order
from analysis.stalls import common_clock

UNREACHABLE = frozenset({"connect_error", "http_502", "http_503", "http_504"})
CUT = frozenset({"disconnect", "no_done"})
GAP_COLUMNS = ["start_s", "end_s", "duration_s", "start_wall", "end_wall", "failed", "errors", "phases", "recovered"]


def _number(records: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(records[column], errors="coerce").astype(float)


def gaps(records: pd.DataFrame) -> pd.DataFrame:
    """One row per gap (GAP_COLUMNS): ``start_s``, ``end_s`` (seconds since the run's first request, on the
    common clock; ``end_s`` missing when it never recovered), ``start_wall``, ``end_wall`` (unix time),
    ``failed`` (requests), ``errors`` (``class: count``, most first), ``phases`` (hit, in suite order)."""
    if records.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    sent, _clock = common_clock(records)
    e2e = _number(records, "e2e_s").fillna(0.0)
    timed = records.assign(_sent=sent, _ended=sent + e2e, _wall=_number(records, "t_start"), _e2e=e2e)
    timed = timed[timed["_sent"].notna()].sort_values("_ended", kind="stable")
    ok = timed["ok"].fillna(False).astype(bool).to_numpy()
    rows, start = [], None
    for i in range(len(timed) + 1):
        if i < len(timed) and not ok[i]:
            start = i if start is None else start
            continue
        if start is not None:
            failed = timed.iloc[start:i]
            if failed["error"].isin(UNREACHABLE).any() or failed["error"].isin(CUT).sum() >= 2:
                rows.append(_gap(failed, timed.iloc[i] if i < len(timed) else None, float(timed["_sent"].min()),
                                 phase_order(records)))
        start = None
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def _gap(failed: pd.DataFrame, back: pd.Series | None, origin: float, order: list[str]) -> dict:
    first = failed.iloc[0]
    start, start_wall = float(first["_ended"]), float(first["_wall"] + first["_e2e"])
    end = end_wall = float("nan")
    if back is not None:
        end, end_wall = max(float(back["_sent"]), float(failed["_ended"].max())), float(back["_wall"])
    counts = failed["error"].fillna("").replace("", "unknown").value_counts()
    hit = set(failed["phase"])
    return {"start_s": start - origin, "end_s": end - origin, "duration_s": end - start, "start_wall": start_wall,
            "end_wall": end_wall, "failed": len(failed), "errors": ", ".join(f"{k}: {v}" for k, v in counts.items()),
            "phases": ", ".join(p for p in order if p in hit), "recovered": back is not None}


def sentences(records: pd.DataFrame) -> list[str]:
    notes = []
    for gap in gaps(records).itertuples(index=False):
        if gap.recovered:
            span = (f"from {_clock(gap.start_wall)} to {_clock(gap.end_wall)} UTC ({gap.duration_s:.1f} s, "
                    f"{gap.start_s:.1f}–{gap.end_s:.1f} s into the run)")
            after = "then requests succeeded again"
        else:
            span = f"from {_clock(gap.start_wall)} UTC ({gap.start_s:.1f} s into the run) until the run ended"
            after = "no request succeeded after it"
        notes.append(f"No request succeeded {span}: the server went away; {gap.failed} failed ({gap.errors}) in "
                     f"{gap.phases}; {after}.")
    return notes


def _clock(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(wall)) if wall == wall and wall > 0 else "?"
