"""What a Locust worker does when its master vanishes: `python tests/benchmarks/master_lost.py`.

Starts the simulated engine, a master running the quick suite's chat phase and two workers on 127.0.0.1,
kills the master (SIGKILL) once its first measured job is out, then watches each worker: the records its
own ``worker-HOST-PID.jsonl`` gains after the kill (and when), when its log says it gave up on the master
and when it exits, with which status. ``--decode-tps 1.5`` keeps an answer streaming when the worker gives
up (answers of 40-160 tokens); ``--stop-timeout S`` is the master's (llm-bench passes 30, Locust's default
is 0), which the workers received with their users; ``--interrupt-after S`` sends each worker SIGINT (a
student's Ctrl-C) that long after the kill instead of waiting for it. docs/locust.md#master-loss quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import simengine
from llm_bench.headless import free_port

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "locustfiles" / "quick_suite.py"
GAVE_UP = re.compile(r"^\[(.+?)\].*Didn't get heartbeat from master", re.M)


def locust(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", str(SUITE), *args], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, cwd=log.parent)


def first_measured_job(master: subprocess.Popen, progress: Path, deadline: float) -> None:
    while time.monotonic() < deadline and master.poll() is None:
        lines = progress.read_text().splitlines() if progress.exists() else []
        if any(json.loads(line).get("event") == "job" and not json.loads(line)["phase"].startswith("warmup")
               for line in lines if line.strip()):
            return
        time.sleep(0.05)
    raise SystemExit(f"the suite handed out no measured job (master: {master.poll()})")


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode-tps", type=float, default=100.0, help="the engine's decode rate (default 100)")
    parser.add_argument("--stop-timeout", type=int, default=0, help="the master's --stop-timeout (default 0)")
    parser.add_argument("--kill-after-s", type=float, default=1.0, help="after the first measured job (default 1)")
    parser.add_argument("--interrupt-after", type=float, default=None, help="SIGINT the workers after S seconds")
    parser.add_argument("--watch-s", type=float, default=150.0, help="how long to watch the workers (default 150)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="master-lost-"))
    out = work / "run"
    with simengine.start_process(simengine.SimConfig(port=0, decode_tps=args.decode_tps)) as sim:
        port = str(free_port())
        master = locust(["--headless", "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                         "--master-bind-port", port, "--host", sim.url, "--out", str(out), "--only", "chat",
                         "--runs", "6", "--stop-timeout", str(args.stop_timeout)], work / "master.log")
        workers = [locust(["--worker", "--master-host", "127.0.0.1", "--master-port", port, "--client-host",
                           f"laptop-{i}"], work / f"worker-{i}.log") for i in range(2)]
        try:
            first_measured_job(master, out / "progress.jsonl", time.monotonic() + 120)
            time.sleep(args.kill_after_s)
            os.kill(master.pid, signal.SIGKILL)
            killed, killed_wall = time.monotonic(), time.time()
            files = {w.pid: out / f"worker-laptop-{i}-{w.pid}.jsonl" for i, w in enumerate(workers)}
            at_kill = {pid: lines(path) for pid, path in files.items()}
            print(f"master killed (SIGKILL) at its first measured job + {args.kill_after_s:g} s; "
                  f"records in the workers' files then: {list(at_kill.values())}")
            seen, ended = dict(at_kill), {}
            while time.monotonic() - killed < args.watch_s and len(ended) < len(workers):
                now = time.monotonic() - killed
                if args.interrupt_after is not None and now >= args.interrupt_after and not ended:
                    for worker in workers:
                        if worker.poll() is None and worker.pid not in ended:
                            worker.send_signal(signal.SIGINT)
                    args.interrupt_after = None
                    print(f"{now:6.1f} s: SIGINT to each worker")
                for i, worker in enumerate(workers):
                    count = lines(files[worker.pid])
                    if count != seen[worker.pid]:
                        print(f"{now:6.1f} s: laptop-{i} has {count} records in its file")
                        seen[worker.pid] = count
                    if worker.pid not in ended and worker.poll() is not None:
                        ended[worker.pid] = now
                        print(f"{now:6.1f} s: laptop-{i} exited with status {worker.returncode}")
                time.sleep(0.1)
            for i, worker in enumerate(workers):
                log = (work / f"worker-{i}.log").read_text()
                gave_up = GAVE_UP.search(log)
                when = ""
                if gave_up:
                    stamp = time.mktime(time.strptime(gave_up.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
                    when = f" {stamp + int(gave_up.group(1).split(',')[1]) / 1000 - killed_wall:.1f} s after the kill"
                print(f"laptop-{i}: {at_kill[worker.pid]} records at the kill, {seen[worker.pid]} at the end; "
                      f"gave up on its master: {'yes' + when if gave_up else 'no'}; "
                      f"exited: {f'{ended[worker.pid]:.1f} s after the kill' if worker.pid in ended else 'no'}")
        finally:
            for process in [master, *workers]:
                process.kill()
    print(f"logs and files in {work}")


if __name__ == "__main__":
    main()
