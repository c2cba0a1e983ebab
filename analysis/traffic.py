"""What a run's requests were made to share, beside what the engine served them from its cache.

A trace's requests share the blocks their hash ids name, and a shared prefix's requests their group's N
tokens (``shared_tokens``: what a prefix cache holding every earlier request of the run could serve). Per
phase of such requests (those whose ``shared_tokens`` is known), over the successful ones whose server
counted their prompt:

- ``requests``, ``prompt_tokens``: how many, and their prompts' tokens in all;
- ``shared_tokens``, ``shared_share``: the tokens made to be shared, and their share of the prompts';
- ``cached_tokens``, ``cached_share``: what the engine reports it served from its cache (over the requests
  for which it reports it; missing when it reports none), and its share of those requests' prompts;
- ``cached_of_shared``: cached over shared tokens, over the requests reporting both (an engine caches whole
  blocks of its own, and keeps what its memory holds: below 1 is what it lost or could not hold, above 1
  what it served beyond the trace's reuse: the chat template and the opener every prompt shares);
- ``cache_hits``: requests served beyond what they may share (``cache_hit``: bench_tasks.cache_share).

``reread``: the phases of an open loop that needed more requests than the file holds and read it again from its
start (the same line and turn sent twice by one process in one phase), said as a warning.

Pure: records in, DataFrames out.
"""

from __future__ import annotations

import pandas as pd

from analysis.records import measured, succeeded
from analysis.spread import NAN, long_frame, long_rows, single
from bench_tasks.cache_share import CACHE_HIT
from bench_tasks.formatting import MISSING, percent, shown
from bench_tasks.open_loop import LATE_S
from bench_tasks.record import flag_set

REUSE_COLUMNS = ["phase", "requests", "prompt_tokens", "shared_tokens", "shared_share", "cached_requests",
                 "cached_tokens", "cached_share", "cached_of_shared", "cache_hits"]


def reuse(records: pd.DataFrame) -> pd.DataFrame:
    """One row per phase of requests made to share (see the module's notes), in the order they came."""
    made = measured(records)
    made = made[pd.to_numeric(made["shared_tokens"], errors="coerce").notna()]
    rows = [_phase(phase, succeeded(made[made["phase"] == phase])) for phase in pd.unique(made["phase"])]
    return pd.DataFrame(rows, columns=REUSE_COLUMNS)


def _phase(phase: str, ok: pd.DataFrame) -> dict:
    prompt = pd.to_numeric(ok["prompt_tokens"], errors="coerce")
    ok, prompt = ok[prompt.notna()], prompt[prompt.notna()]
    shared = pd.to_numeric(ok["shared_tokens"], errors="coerce")
    cached = pd.to_numeric(ok["cached_tokens"], errors="coerce")
    told = cached.notna()
    total = prompt.sum()
    return {"phase": phase, "requests": len(ok), "prompt_tokens": int(total), "shared_tokens": int(shared.sum()),
            "shared_share": shared.sum() / total if total else NAN, "cached_requests": int(told.sum()),
            "cached_tokens": cached[told].sum() if told.any() else NAN,
            "cached_share": cached[told].sum() / prompt[told].sum() if told.any() and prompt[told].sum() else NAN,
            "cached_of_shared": cached[told].sum() / shared[told].sum() if told.any() and shared[told].sum() else NAN,
            "cache_hits": int(sum(CACHE_HIT in flag_set(cell) for cell in ok["flags"]))}


def tables(records: pd.DataFrame) -> pd.DataFrame:
    """Table ``reuse``: a row per phase of requests made to share; empty when there is none."""
    rows = []
    for row in reuse(records).to_dict("records"):
        n, told = row["requests"], row["cached_requests"]
        rows += long_rows("reuse", row["phase"], {
            "requests": single(n, n), "prompt_tokens": single(row["prompt_tokens"], n),
            "shared_tokens": single(row["shared_tokens"], n), "shared_share": single(row["shared_share"], n),
            "cached_tokens": single(row["cached_tokens"], told), "cached_share": single(row["cached_share"], told),
            "cached_of_shared": single(row["cached_of_shared"], told), "cache_hits": single(row["cache_hits"], n)})
    return long_frame(rows)


def format_reuse(table: pd.DataFrame) -> str:
    """The reuse table as the terminal shows it after a run."""
    header = [("phase", 12), ("requests", 9), ("prompt tok", 11), ("shared tok", 11), ("shared", 7),
              ("cached tok", 11), ("cached", 7), ("cached/shared", 14), ("cache_hit", 10)]
    lines = ["".join(f"{name:>{width}}" for name, width in header)]
    for row in table.to_dict("records"):
        cells = [row["phase"], str(row["requests"]), str(row["prompt_tokens"]), str(row["shared_tokens"]),
                 percent(row["shared_share"]), shown(row["cached_tokens"], 0), percent(row["cached_share"]),
                 shown(row["cached_of_shared"], 2), str(row["cache_hits"])]
        lines.append("".join(f"{cell:>{width}}" for cell, (_name, width) in zip(cells, header)))
    return "\n".join(lines)


def format_replay(steps: pd.DataFrame) -> str:
    """A trace's replay as the terminal shows it (``steps``: analysis.rates.steps of its records): what was due,
    how late it left, and the waits timed from when each request was due."""
    lines = []
    for step in steps.to_dict("records"):
        lines += [f"{step['phase']}: {step['requests']} requests due over {shown(step['span_s'], 1)} s "
                  f"({shown(step['due_rps'], 2)}/s); sent {step['sent']}, answered {step['ok']}, failed "
                  f"{step['failed']}, never sent {step['not_sent']}",
                  f"  send lag: p50 {_ms(step['send_lag_p50_s'])}, p99 {_ms(step['send_lag_p99_s'])}; "
                  f"{step['late']} of {step['sent']} left more than {LATE_S * 1000:g} ms after they were due",
                  "  from due: " + "; ".join(
                      f"{label} p50 {shown(step[f'{figure}_p50_s'], 3)} s, p95 {shown(step[f'{figure}_p95_s'], 3)} s, "
                      f"p99 {shown(step[f'{figure}_p99_s'], 3)} s"
                      for label, figure in (("first token", "ttft_due"), ("end to end", "e2e_due"))),
                  f"  answers: {shown(step['output_tps'], 1)} output tok/s within the span, decode p50 "
                  f"{shown(step['decode_tps_p50'], 1)} tok/s a request"]
    return "\n".join(lines)


def _ms(seconds) -> str:
    return MISSING if pd.isna(seconds) else f"{shown(seconds * 1000, 1)} ms"


def reread(records: pd.DataFrame) -> list[str]:
    """A phase whose process sent a file's line (and turn) more than once: the file ran out and was read again."""
    made = measured(records)
    if "source" not in made:
        return []
    made = made[made["source"].fillna("").astype(str) != ""]  # read from a file (an invented request has none)
    if made.empty:
        return []
    keys = ["phase", "client_host", "client_pid", "source", made["turn"].fillna(0)]
    times = made.groupby(keys, sort=False).size()
    most = {phase: int(times.loc[phase].max()) for phase in pd.unique(made["phase"])}
    again = [f"{phase} ({n} times)" for phase, n in most.items() if n > 1]
    if not again:
        return []
    return [f"the file ran out and was read again from its start in {', '.join(again)}: its requests were sent "
            f"more than once (each time opened afresh, so none was served from an earlier sending's cache)"]
