"""Stalls and who caused them: pure analysis over records (records in, frames out).

A stall (bench_tasks.stream) is a gap in a stream long against its own rhythm, kept per request as
``start_s:stall_s`` pairs. Its cause is looked for among the other requests to the same server
(the same setup) whose prompt was being read while it happened:

- A request's prompt is read from its send to its first token (``t_send`` to ``t_send + ttft_s``;
  a request that failed before its first token: to its end). Where the engine timed its prompt
  (llama.cpp's ``engine_prompt_ms``, from the slot taking it to its first token) the reading starts
  that long before the first token instead: its wait for a slot read nothing.
- Of those overlapping the stall, the cause is the one that read the most of its prompt during it:
  the overlap times its reading rate, (prompt_tokens - cached_tokens) over its reading time. By
  overlap alone a short question that arrived during a paste and waited in the same batch behind
  it would tie with the paste; by tokens the paste's 4000 outweigh its 20. Without token counts,
  the longest overlap.

The clock (``common_clock``): one machine's records share its perf_counter (``t_send``); records
of several machines share the master's clock when every one carries ``clock_offset_s`` (a worker's
ping/pong), else they fall back to wall time (``t_start``), and say so: laptops' clocks may
disagree by milliseconds or more.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import measured, phase_order, succeeded
from analysis.spread import long_frame, long_rows, single
from bench_tasks.formatting import MISSING, shown
from bench_tasks.stream import STALL_FACTOR, STALL_FLOOR_S, STALLS_KEPT

STALL_COLUMNS = ["setup", "phase", "round", "user", "client_host", "client_pid", "request_id", "stall_start_s",
                 "stall_s", "stall_at_s", "cause_phase", "cause_user", "cause_client_host", "cause_request_id",
                 "cause_overlap_s", "cause_tokens", "readers", "clock"]
LONGEST_SHOWN = 10  # stalls in the report's table
PERF_CLOCK, MASTER_CLOCK, WALL_CLOCK = "perf_counter", "master", "wall"
CLOCK_WORDS = {PERF_CLOCK: "one machine's perf_counter (t_send)",
               MASTER_CLOCK: "the master's clock (t_send + clock_offset_s, measured by ping/pong)",
               WALL_CLOCK: "wall time (t_start): several machines and no clock offset for every request; their "
                           "clocks may disagree by milliseconds or more, so the causes are less certain"}


def _number(records: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(records[column], errors="coerce").astype(float)


def common_clock(records: pd.DataFrame) -> tuple[pd.Series, str]:
    """Each record's send time on one clock shared by the setup's records, and which clock that is."""
    offset = _number(records, "clock_offset_s")
    if len(offset) and offset.notna().all():  # every record sent by a worker that measured its offset
        return _number(records, "t_send") + offset, MASTER_CLOCK
    if records["client_host"].nunique(dropna=False) <= 1:
        return _number(records, "t_send"), PERF_CLOCK
    return _number(records, "t_start"), WALL_CLOCK


def readings(records: pd.DataFrame, sent: pd.Series) -> pd.DataFrame:
    """Each request's prompt reading on the common clock: start, end, tokens it read (NaN: unknown)."""
    ttft, e2e = _number(records, "ttft_s"), _number(records, "e2e_s")
    first = sent + ttft.fillna(e2e)
    prompt_s = _number(records, "engine_prompt_ms") / 1000
    start = (first - prompt_s).clip(lower=sent).fillna(sent)
    tokens = _number(records, "prompt_tokens") - _number(records, "cached_tokens").fillna(0)
    return pd.DataFrame({"start": start, "end": first, "tokens": tokens.clip(lower=0)}, index=records.index)


def stalls(records: pd.DataFrame) -> pd.DataFrame:
    """One row per kept stall of a measured request (STALL_COLUMNS), with its cause where a prompt was
    being read while it happened; longest first."""
    frames = [_setup_stalls(group) for _setup, group in records.groupby("setup", sort=False)]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=STALL_COLUMNS)
    found = pd.concat(frames, ignore_index=True)
    return found.sort_values("stall_s", ascending=False, kind="stable").reset_index(drop=True)[STALL_COLUMNS]


def _setup_stalls(records: pd.DataFrame) -> pd.DataFrame:
    sent, clock = common_clock(records)
    victims = measured(records)
    victims = victims[victims["stalls"].fillna("").astype(str) != ""]
    if victims.empty:
        return pd.DataFrame(columns=STALL_COLUMNS)
    pairs = victims["stalls"].astype(str).str.split(";").explode()
    pairs = pairs[pairs != ""].str.split(":", expand=True).astype(float)  # the cells' start_s:stall_s
    index, start_s, stall_s = pairs.index.to_numpy(), pairs[0].to_numpy(), pairs[1].to_numpy()
    at = sent.loc[index].to_numpy() + start_s
    origin = float(sent.min())
    found = victims.loc[index, ["setup", "phase", "round", "user", "client_host", "client_pid", "request_id"]]
    found = found.reset_index(drop=True).assign(stall_start_s=start_s, stall_s=stall_s, stall_at_s=at - origin,
                                                clock=clock)
    causes = _causes(index, at, at + stall_s, readings(records, sent))
    named = causes["cause"].notna().to_numpy()
    chosen = causes.loc[named, "cause"].astype(int).to_numpy()
    for column in ("phase", "user", "client_host", "request_id"):
        values = np.full(len(found), "", dtype=object)
        values[named] = records.loc[chosen, column].astype(str).to_numpy()
        found[f"cause_{column}"] = values
    return found.assign(cause_overlap_s=causes["overlap"], cause_tokens=causes["tokens"],
                        readers=causes["readers"].astype(int))


def _causes(victim: np.ndarray, lo: np.ndarray, hi: np.ndarray, reading: pd.DataFrame) -> pd.DataFrame:
    """For each stall [lo, hi] of request ``victim``: the other request whose prompt reading read most
    during it (its index, overlap and tokens read; NaN when none), and how many were reading."""
    reading = reading.dropna(subset=["start", "end"]).sort_values("start")
    starts, ends = reading["start"].to_numpy(), reading["end"].to_numpy()
    rate = (reading["tokens"] / (reading["end"] - reading["start"])).to_numpy()
    longest = float((ends - starts).max()) if len(starts) else 0.0
    # Candidates start before the stall ends and no earlier than the longest reading before it begins.
    first, last = np.searchsorted(starts, lo - longest), np.searchsorted(starts, hi)
    counts = np.maximum(last - first, 0)
    stall = np.repeat(np.arange(len(lo)), counts)
    # The ranges first..last, one after another: each pair's place in its range plus its range's first.
    candidate = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    overlap = np.minimum(hi[stall], ends[candidate]) - np.maximum(lo[stall], starts[candidate])
    own = reading.index.to_numpy()[candidate] == victim[stall]
    keep = (overlap > 0) & ~own
    pairs = pd.DataFrame({"stall": stall[keep], "cause": reading.index.to_numpy()[candidate[keep]],
                          "overlap": overlap[keep], "tokens": overlap[keep] * rate[candidate[keep]]})
    # By tokens read where known (a NaN rate sorts last), then by overlap.
    pairs = pairs.assign(known=pairs["tokens"].notna()).sort_values(["known", "tokens", "overlap"],
                                                                    ascending=False, kind="stable")
    best = pairs.drop_duplicates("stall").set_index("stall")
    readers = pairs.groupby("stall").size()
    out = pd.DataFrame(index=pd.RangeIndex(len(lo)))
    return out.assign(cause=best["cause"], overlap=best["overlap"], tokens=best["tokens"],
                      readers=readers.reindex(out.index, fill_value=0))


STALL_METRICS = ("stalled_requests", "stalls", "stall_s", "decode_s", "stall_share")


def stall_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per phase, over its successful requests: how many stalled, their stalls (all of them, not only
    those kept), the seconds stalled and decoding, and ``stall_share`` = stall_s / decode_s, the share
    of the decode time lost to stalls. Empty when no request of the setup has stall figures."""
    ok = succeeded(measured(records))
    figures = pd.DataFrame({"phase": ok["phase"], "count": _number(ok, "stall_count"),
                            "stall_s": _number(ok, "stall_s"), "decode_s": _number(ok, "decode_s")})
    figures = figures[figures["count"].notna() & figures["decode_s"].notna()]
    if figures.empty:
        return long_frame([])
    per_phase = figures.assign(stalled=figures["count"] > 0).groupby("phase", sort=False).agg(
        n=("count", "size"), stalled=("stalled", "sum"), count=("count", "sum"), stall_s=("stall_s", "sum"),
        decode_s=("decode_s", "sum"))
    rows = []
    for phase in (p for p in phase_order(ok) if p in per_phase.index):
        line = per_phase.loc[phase]
        n, decode = int(line["n"]), float(line["decode_s"])
        rows += long_rows("stalls", phase, {
            "stalled_requests": single(int(line["stalled"]), n), "stalls": single(int(line["count"]), n),
            "stall_s": single(float(line["stall_s"]), n), "decode_s": single(decode, n),
            "stall_share": single(float(line["stall_s"]) / decode if decode > 0 else None, n)})
    return long_frame(rows)


def longest(found: pd.DataFrame, n: int = LONGEST_SHOWN) -> pd.DataFrame:
    """The ``n`` longest stalls as the report's table: who stalled, when, how long, and the cause."""
    kept = found.head(n)
    return pd.DataFrame({
        "phase": kept["phase"], "user": kept["user"], "laptop": kept["client_host"],
        "at s": kept["stall_at_s"].map(lambda v: shown(v, 2)),
        "after send s": kept["stall_start_s"].map(lambda v: shown(v, 2)),
        "stall s": kept["stall_s"].map(lambda v: shown(v, 3)),
        "cause": [f"{phase} ({user}, {host})" if phase else f"{MISSING} (no prompt was being read)"
                  for phase, user, host in zip(kept["cause_phase"], kept["cause_user"], kept["cause_client_host"])],
        "overlap s": kept["cause_overlap_s"].map(lambda v: shown(v, 3)),
        "prompts read": kept["readers"].astype(str)}).reset_index(drop=True)


def sentence(found: pd.DataFrame, records: pd.DataFrame) -> str:
    """What the stalls table shows, and on which clock its times are."""
    if found.empty:  # a stream that never paused is a finding too, said plainly
        return (f"No stall: no answer's stream paused longer than {STALL_FACTOR:g} times its median gap and "
                f"{STALL_FLOOR_S:g} s.")
    clocks = list(dict.fromkeys(found["clock"]))
    caused = int((found["cause_phase"] != "").sum())
    shown = min(len(found), LONGEST_SHOWN)
    return (f"{len(found)} stalls kept (a stream's {STALLS_KEPT} longest gaps above {STALL_FACTOR:g} times its median "
            f"gap and {STALL_FLOOR_S:g} s), "
            f"{caused} with a cause: the other request that read the most of its prompt during the stall. "
            f"The {shown} longest below; all in `stalls.csv`. `at s`: seconds since the run's first request, on "
            f"{'; '.join(CLOCK_WORDS[c] for c in clocks)}.")
