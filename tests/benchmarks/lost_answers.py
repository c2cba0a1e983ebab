"""Capacity searches that lose an answer still end: `python tests/benchmarks/lost_answers.py [--searches 20]`.

Each search is a short one (classes from 2 students, a 4 s window, `--read-timeout 3`) against a simulated
engine of its own, with one fault injected into one judged window (the first or the second, in turn):

- `hang`: the engine never answers the next request that reaches it once the window's first question was
  handed out (``POST /sim/never-answer``, simengine's fault `hang`): not a byte, the connection held open;
- `kill`: one of the search's Locust workers is killed (SIGKILL) 1.5 s into the window, its students'
  questions in flight with it;

in either room: `processes` (``llm-bench capacity --processes 2``) or `workers` (``locust -f
locustfiles/capacity.py --master`` and two ``--worker``, as a classroom runs it). A search has ended when its
``end`` is in capacity.jsonl and its process (the master's) has exited. Its last overdue answer is due at the
fault (the hung request's arrival at the engine, from its truth log; the kill) + ``--read-timeout`` + the
record wait (``RECORD_WAIT_S``): the end delay is the end less that instant (negative: it ended before,
e.g. the hung request failed by its read timeout and the window was judged with it). A search that has not
ended ``--give-up-s`` after that instant is a hang: it is stopped and its directory kept.

Prints a line per search, then per variant how many ended and the end delays' distribution; writes
``results.jsonl`` (one line per search) into ``--out``. The CI test (tests/test_lost_answers.py) runs a few.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

import simengine
from bench_tasks.capacity.search_options import RECORD_WAIT_S
from bench_tasks.records_file import read_jsonl
from llm_bench.headless import free_port

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = ROOT / "locustfiles" / "capacity.py"
FAULTS = ("hang", "kill")
ROOMS = ("processes", "workers")
READ_TIMEOUT_S = 3.0
KILL_AFTER_S = 1.5  # into the window: its students' questions are in flight
# 2 slots, 20 tokens at 40 tok/s: a question holds a slot 0.5 s; students think 0.5 s. Class 2 never waits,
# class 4 does (the search's classes: 2, then 4 or 1, then 3 or the end).
ENGINE = dict(slots=2, prefill_tps=1e6, decode_tps=40.0, decode_slowdown=0.0)
SEARCH = ["--slo", "ttft_p95=0.3", "--think-time", "0.5", "--max-tokens", "20", "--ignore-eos",
          "--start-students", "2", "--max-students", "4", "--step-s", "4", "--settle-s", "2", "--min-requests", "5",
          "--read-timeout", f"{READ_TIMEOUT_S:g}"]


@dataclass
class Outcome:
    variant: str
    search: int
    window: str = ""  # the window the fault was injected into ("": never reached)
    injected: bool = False
    ended: bool = False  # capacity.jsonl's end and the process's exit
    exit_code: int | None = None
    end_delay_s: float | None = None  # the search's end less its last overdue answer's instant
    exit_delay_s: float | None = None  # the process's exit less that instant
    window_requests: int | None = None  # the faulted window's final verdict: its requests, failed, overdue
    window_failed: int | None = None
    window_overdue: int | None = None
    timed_out: str = ""  # the phases of the requests that failed by their read timeout (the hung one's)
    overdue: int | None = None  # every window's overdue answers (a job lost on its way to a student that stopped)
    capacity: int | None = None
    why: str = ""
    out: str = ""


def run_search(fault: str, room: str, number: int, work: Path, window_number: int = 1,
               give_up_s: float = 180.0) -> Outcome:
    """One search with ``fault`` injected into its ``window_number``-th window, in ``room``."""
    outcome = Outcome(f"{fault}-{room}", number)
    directory = work / f"{fault}-{room}-{number:02d}"
    out = directory / "run"
    out.mkdir(parents=True)
    outcome.out = str(out)
    sim = simengine.start_process(simengine.SimConfig(port=0, truth_log=str(directory / "truth.jsonl"), **ENGINE))
    processes = start_room(room, sim.url, out)
    try:
        window = wait_for_window(out, window_number, processes[0], deadline=time.monotonic() + 120)
        if window is None:
            return outcome
        outcome.window = window
        t_fault = inject(fault, room, sim.url, processes)
        outcome.injected = True
        master = processes[0]
        t_exit = wait_exit(master, give_up_s, lambda: due(fault, t_fault, directory / "truth.jsonl"))
        t_due = due(fault, t_fault, directory / "truth.jsonl")
        outcome.exit_code = master.returncode
        if t_exit is not None:
            outcome.exit_delay_s = t_exit - t_due
        judge(outcome, out, window, t_due)
        outcome.ended = outcome.ended and t_exit is not None
        return outcome
    finally:
        for process in processes:
            stop(process)
        sim.stop()


def start_room(room: str, url: str, out: Path) -> list[subprocess.Popen]:
    """The search's processes, the one whose exit ends it first."""
    log = out.parent
    if room == "processes":
        command = [sys.executable, "-m", "llm_bench.cli", "capacity", "--host", url, "--processes", "2",
                   *SEARCH, "--out", str(out)]
        return [subprocess.Popen(command, stdout=open(log / "cli.log", "w"), stderr=subprocess.STDOUT, cwd=log,
                                 start_new_session=True)]
    port = str(free_port())
    locust = [sys.executable, "-m", "locust", "-f", str(CAPACITY)]
    master = subprocess.Popen([*locust, "--headless", "--master", "--expect-workers", "2", "--master-bind-host",
                               "127.0.0.1", "--master-bind-port", port, "--host", url, "--out", str(out),
                               "--stop-timeout", "30", "--exit-code-on-error", "0", *SEARCH], stdout=open(log / "master.log", "w"),
                              stderr=subprocess.STDOUT, cwd=log, start_new_session=True)
    workers = [subprocess.Popen([*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", port,
                                 "--client-host", f"laptop-{i}"], stdout=open(log / f"worker{i}.log", "w"),
                                stderr=subprocess.STDOUT, cwd=log, start_new_session=True) for i in range(2)]
    return [master, *workers]


def wait_for_window(out: Path, number: int, master: subprocess.Popen, deadline: float) -> str | None:
    """The name of the ``number``-th judged window once its first question was handed out (None: the search
    ended first): the next request to reach the engine is then one of the window's, not a question handed
    out before it opened and sent late."""
    progress = out / "progress.jsonl"
    while time.monotonic() < deadline and master.poll() is None:
        events = read_jsonl(progress)[0] if progress.exists() else []
        windows = list(dict.fromkeys(e["phase"] for e in events
                                     if e.get("event") == "phase" and e["phase"].startswith("class-")))
        if len(windows) >= number and any(e.get("event") == "job" and e["phase"] == windows[number - 1]
                                          for e in events):
            return windows[number - 1]
        time.sleep(0.02)
    return None


def inject(fault: str, room: str, url: str, processes: list[subprocess.Popen]) -> float:
    """Inject the fault now; returns its instant (``perf_counter``: the engine's and the master's clock)."""
    if fault == "hang":
        asked = urllib.request.Request(url + "/sim/never-answer", data=b'{"after": 1}', method="POST",
                                       headers={"content-type": "application/json"})
        urllib.request.urlopen(asked, timeout=5).read()
        return time.perf_counter()
    time.sleep(KILL_AFTER_S)
    victim = workers(room, processes)[0]
    os.kill(victim, signal.SIGKILL)
    return time.perf_counter()


def workers(room: str, processes: list[subprocess.Popen]) -> list[int]:
    """The pids of the search's Locust workers: the two started, or the ones ``--processes`` forked."""
    if room == "workers":
        return [p.pid for p in processes[1:]]
    tree = psutil.Process(processes[0].pid).children(recursive=True)
    master = next(p for p in tree if p.children())  # the locust that forked them
    return [child.pid for child in master.children()]


def due(fault: str, t_fault: float, truth: Path) -> float:
    """When the last overdue answer was due: the fault + the read timeout + the record wait. For a hang the
    fault is when the hung request reached the engine (its truth line, once its client gave up on it)."""
    if fault == "hang" and truth.exists():
        hung = [row for row in read_jsonl(truth)[0] if row.get("fault") == "hang"]
        if hung:
            t_fault = hung[0]["t_arrival"]
    return t_fault + READ_TIMEOUT_S + RECORD_WAIT_S


def wait_exit(process: subprocess.Popen, give_up_s: float, t_due) -> float | None:
    """When ``process`` exited (``perf_counter``), or None when it had not ``give_up_s`` after ``t_due()``."""
    while process.poll() is None:
        if time.perf_counter() > t_due() + give_up_s:
            return None
        time.sleep(0.05)
    return time.perf_counter()


def judge(outcome: Outcome, out: Path, window: str, t_due: float) -> None:
    """What capacity.jsonl says: the search's end, and the faulted window's final verdict."""
    path = out / "capacity.jsonl"
    events = read_jsonl(path)[0] if path.exists() else []
    end = next((e for e in events if e["event"] == "end"), None)
    if end is not None:
        outcome.ended, outcome.end_delay_s = True, end["t"] - t_due
        outcome.capacity, outcome.why = end["capacity"], end["why"]
    records = out / "records.jsonl"
    rows = read_jsonl(records)[0] if records.exists() else []
    outcome.timed_out = ",".join(row["phase"] for row in rows if row.get("error") == "timeout")
    steps = [e for e in events if e["event"] == "step"]
    outcome.overdue = sum(e["overdue"] for e in steps)
    verdict = next((e for e in reversed(steps) if e["phase"] == window), None)
    if verdict is not None:
        outcome.window_requests, outcome.window_failed = verdict["requests"], verdict["failed"]
        outcome.window_overdue = verdict["overdue"]


def stop(process: subprocess.Popen) -> None:
    """The process and everything it started (a search's workers), if still there."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def describe(outcome: Outcome) -> str:
    def seconds(value):
        return "-" if value is None else f"{value:+.1f} s"

    state = "ended" if outcome.ended else ("NOT INJECTED" if not outcome.injected else "HUNG")
    return (f"{outcome.variant} #{outcome.search:02d}: {state} (exit {outcome.exit_code}); fault in {outcome.window or '-'}"
            f"{f' (timed out: {outcome.timed_out})' if outcome.timed_out else ''} (requests {outcome.window_requests}, failed {outcome.window_failed}, overdue {outcome.window_overdue});"
            f" end {seconds(outcome.end_delay_s)}, exit {seconds(outcome.exit_delay_s)} after its last overdue answer;"
            f" capacity {outcome.capacity} ({outcome.why or '-'}), {outcome.overdue} overdue in all its windows")


def distribution(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    return (f"min {ordered[0]:+.1f}, p50 {at(0.5):+.1f}, p90 {at(0.9):+.1f}, max {ordered[-1]:+.1f} s "
            f"(n={len(ordered)})")


def summary(variant: str, outcomes: list[Outcome]) -> list[str]:
    ended = [o for o in outcomes if o.ended]
    late = [o for o in ended if o.exit_delay_s is not None and o.exit_delay_s > 60]
    return [f"{variant}: {len(ended)} of {len(outcomes)} searches ended, {len(late)} more than a minute after "
            f"their last overdue answer",
            f"  end delay (capacity.jsonl's end): {distribution([o.end_delay_s for o in ended])}",
            f"  exit delay (the process's exit): {distribution([o.exit_delay_s for o in ended])}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=20, help="searches per variant (default 20)")
    parser.add_argument("--faults", default=",".join(FAULTS), help="hang, kill or both (default both)")
    parser.add_argument("--rooms", default=",".join(ROOMS), help="processes, workers or both (default both)")
    parser.add_argument("--give-up-s", type=float, default=180.0,
                        help="a search not ended this long after its last overdue answer is a hang (default 180)")
    parser.add_argument("--out", type=Path, default=None, help="where the searches go (default: a new temp dir)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: each search's processes are stopped too
    work = args.out or Path(tempfile.mkdtemp(prefix="lost-answers-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"searches in {work}", flush=True)
    results: dict[str, list[Outcome]] = {}
    with open(work / "results.jsonl", "a") as log:
        for fault in args.faults.split(","):
            for room in args.rooms.split(","):
                variant = results.setdefault(f"{fault}-{room}", [])
                for number in range(1, args.searches + 1):
                    outcome = run_search(fault, room, number, work, window_number=1 + (number - 1) % 2,
                                         give_up_s=args.give_up_s)
                    variant.append(outcome)
                    log.write(json.dumps(asdict(outcome)) + "\n")
                    log.flush()
                    print(describe(outcome), flush=True)
    print()
    for variant, outcomes in results.items():
        print("\n".join(summary(variant, outcomes)))
    failed = sum(not o.ended or (o.exit_delay_s or 0) > 60 for outcomes in results.values() for o in outcomes)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
