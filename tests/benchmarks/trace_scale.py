"""Benchmark (not a test): a million-line Mooncake trace, checked and replayed by bench_tasks/traffic.

    .venv/bin/python tests/benchmarks/trace_scale.py [--work DIR] [--requests 1000000] [--prompts 10000]

What it does:

1. Once (kept in ``WORK/trace-N.jsonl``, reused when present): a production-like trace of N requests from
   ``tests/traffic_files.mooncake_rows`` (Poisson arrivals, conversations growing after 20 shared system
   prompts, hash ids of 512-token blocks numbered as they first appear, as Mooncake's are;
   ``--ids-out-of-order``: not, so that the trace's reuse is counted on a bitmap instead).
2. In a fresh process, under ``/usr/bin/time -v`` when it is there: ``Trace.open`` (the whole file checked in
   one pass), the vocabulary measured on the simulated engine's tokenizer (its count in process, as its
   /tokenize would answer), the first request's prompt made: the time to the first request ready. Then
   every request of the file read again as a replay reads it (``Trace.requests``, the trace's reuse
   counted), and ``--prompts`` prompts synthesized, each counted on that tokenizer for the first hundred.
3. Prints the times and the process's peak resident memory (``ru_maxrss``; and time's figure).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def child(path: str, prompts: int) -> dict:
    from bench_tasks.traffic.trace import Trace, TracePrompts, TraceReuse
    from bench_tasks.traffic.vocabulary import measure
    from simengine.tokenizer import render_chat, tokenize

    def count(messages):
        return len(tokenize(render_chat(messages, None)))

    start = time.perf_counter()
    trace = Trace.open(path)
    checked = time.perf_counter()
    vocabulary = measure(count)
    measured = time.perf_counter()
    synthesis = TracePrompts(vocabulary, "[run bench]")
    replay = trace.requests()
    total = TraceReuse()
    request = next(replay)
    first = synthesis.messages(request)
    ready = time.perf_counter()
    total.add(request)
    for request in replay:
        total.add(request)
    replayed = time.perf_counter()
    made, tokens = 0, 0
    for request in trace.requests():
        messages = synthesis.messages(request)
        if made < 100:
            assert count(messages) == request.input_length
        made, tokens = made + 1, tokens + request.input_length
        if made == prompts:
            break
    synthesized = time.perf_counter()
    summary = trace.summary
    return {"requests": summary.requests, "file_mb": Path(path).stat().st_size / 1e6,
            "check_s": checked - start, "vocabulary_s": measured - checked, "first_ready_s": ready - start,
            "read_all_s": replayed - ready, "read_per_s": total.requests / (replayed - ready),
            "prompts": made, "prompt_tokens": tokens, "synthesis_s": synthesized - replayed,
            "first_prompt_chars": len(first[0]["content"]),
            "shared_token_share": total.shared_token_share, "shared_block_share": total.shared_block_share,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def make_trace(path: Path, requests: int, ids_in_order: bool) -> None:
    from tests.traffic_files import mooncake_rows, write_jsonl

    if path.exists():
        return
    print(f"writing {path} ...", flush=True)
    partial = path.with_suffix(".partial")
    write_jsonl(partial, mooncake_rows(requests, seed=7, ids_in_order=ids_in_order))
    partial.rename(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/llm-bench-trace-scale")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--prompts", type=int, default=10_000)
    parser.add_argument("--ids-out-of-order", action="store_true",
                        help="hash ids not numbered as they first appear (Mooncake's are): the bitmap's path")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.prompts)))
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"trace-{args.requests}{'-out-of-order' if args.ids_out_of_order else ''}.jsonl"
    make_trace(path, args.requests, not args.ids_out_of_order)
    command = [sys.executable, __file__, "--child", str(path), "--prompts", str(args.prompts)]
    timer = shutil.which("time") or "/usr/bin/time"
    timed = Path(timer).exists()
    result = subprocess.run(([timer, "-v"] if timed else []) + command, capture_output=True, text=True, check=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    if timed:
        line = next(line for line in result.stderr.splitlines() if "Maximum resident set size" in line)
        figures["time_v_max_rss_mib"] = int(line.split(":")[1]) / 1024
    for key, value in figures.items():
        print(f"{key:>22}: {value:,.3f}" if isinstance(value, float) else f"{key:>22}: {value:,}")


if __name__ == "__main__":
    main()
