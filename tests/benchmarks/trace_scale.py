"""Benchmark (not a test): a million-line Mooncake trace, checked and replayed by bench_tasks/traffic.

    .venv/bin/python tests/benchmarks/trace_scale.py [--work DIR] [--requests 1000000] [--prompts 10000]
    .venv/bin/python tests/benchmarks/trace_scale.py --cli [--send 300] [--speed 20]

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

With ``--cli``, the real command instead: ``llm-bench run trace WORK/trace-N.jsonl --requests SEND --speed X``
against a simulated engine started here (64 slots, 300 tokens a second each, prompts read at once), timed from
the command's start to the trace's first request sent (its record's ``t_start``), with the peak resident
memory of each process of the command (the CLI, which checks the whole file before it starts anything, and
Locust, which replays it on the CLI's summary, reading it as it goes), read from ``/proc/PID/status``
(``VmHWM``) while they run: until the replay ends, and with the report.
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


def through_cli(path: Path, work: Path, send: int, speed: float) -> dict:
    """The command, as a user runs it, against a fast simulated engine: its start and its processes' memory."""
    import threading

    import pandas as pd

    import simengine

    sim = simengine.start_process(simengine.SimConfig(port=0, slots=64, decode_tps=300.0, prefill_tps=1e7))
    out = work / "cli-out"
    shutil.rmtree(out, ignore_errors=True)
    peaks: dict[int, tuple[str, float]] = {}
    try:
        started = time.time()
        child = subprocess.Popen([sys.executable, "-m", "llm_bench.cli", "run", "trace", str(path), "--host", sim.url,
                                  "--requests", str(send), "--speed", str(speed), "--out", str(out)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        watching = threading.Thread(target=_watch_peaks, args=(child, peaks), daemon=True)
        watching.start()
        lines = [(time.time() - started, line) for line in child.stdout]  # each line when it came
        if child.wait(timeout=1800) != 0:
            raise SystemExit(f"llm-bench exited {child.returncode}:\n{''.join(line for _t, line in lines)[-3000:]}")
    finally:
        sim.stop()
    checked_s = next(t for t, line in lines if line.startswith("measuring "))
    ended_s = next(t for t, line in lines if line.startswith("records: "))  # the replay is over, the report next
    records = pd.read_csv(out / "requests.csv")
    trace = records[records["phase"] == "trace"]
    print("".join(f"{t:7.1f} s  {line}" for t, line in lines))
    figures = {"requests_sent": len(trace), "checked_s": checked_s,
               "first_request_s": trace["t_start"].min() - started, "replay_over_s": ended_s,
               "command_s": time.time() - started}
    for pid, (name, series) in sorted(peaks.items()):
        before = [hwm for t, hwm in series if t <= ended_s]
        figures[f"peak_mib_{name}_{pid}_replay"] = max(before) if before else float("nan")
        figures[f"peak_mib_{name}_{pid}_all"] = max(hwm for _t, hwm in series)
    return figures


def _watch_peaks(child: subprocess.Popen, peaks: dict) -> None:
    """Every 0.1 s: each process under ``child`` and its peak resident memory so far (VmHWM), with the time."""
    started = time.time()
    while child.poll() is None:
        for pid in [child.pid, *_descendants(child.pid)]:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            hwm = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM")), 0)
            name = "locust" if b"locust" in command else "cli"
            peaks.setdefault(pid, (name, []))[1].append((time.time() - started, hwm))
        time.sleep(0.1)


def _descendants(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [found for child in children for found in (int(child), *_descendants(int(child)))]


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
    parser.add_argument("--cli", action="store_true", help="run the trace through llm-bench run trace instead")
    parser.add_argument("--send", type=int, default=30, help="--cli: the trace's first requests sent")
    parser.add_argument("--speed", type=float, default=1.0, help="--cli: --speed")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.prompts)))
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"trace-{args.requests}{'-out-of-order' if args.ids_out_of_order else ''}.jsonl"
    make_trace(path, args.requests, not args.ids_out_of_order)
    if args.cli:
        for key, value in through_cli(path, work, args.send, args.speed).items():
            print(f"{key:>28}: {value:,.3f}" if isinstance(value, float) else f"{key:>28}: {value:,}")
        return
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
