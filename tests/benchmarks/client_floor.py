"""CPU per token of reading selftest's W3 c=400 streams, from the floor up:
`python tests/benchmarks/client_floor.py [--rounds 3]`.

Three readers of the same streams (400 streams of 200 tokens at 50 tok/s, two requests each), each
in a process of its own on the client's core with the simulated engine on the other, in turn:

- asyncio: selftest's bare reader (llm_bench.bare_reader), parsing nothing;
- gevent: the same reading on gevent with kernel receive stamps (tests/benchmarks/gevent_reader.py):
  the cost of the client's event loop and of its stamped reads;
- llm-bench: the Locust client as selftest runs it (kernel stamps on): HTTP, SSE (bench_tasks.stream),
  JSON, the Recorder, Locust's request and the record of every request, its warm-up included.

Prints each one's CPU per token in every round, then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llm_bench import selftest

HERE = Path(__file__).parent
W3 = selftest.W3_400
READERS = {"asyncio": ["-m", "llm_bench.bare_reader"], "gevent": [str(HERE / "gevent_reader.py")]}


def read(reader: str, workload: selftest.Workload, out: Path) -> float:
    """One reader's pass on its own engine: CPU microseconds per token."""
    import simengine

    config = selftest.sim_config(workload)
    body = out / "body.json"
    selftest.write_bare_body(workload, config.model, body)
    cores = sorted(os.sched_getaffinity(0))
    with simengine.start_process(config) as sim:
        os.sched_setaffinity(sim.popen.pid, {cores[0]})
        subprocess.run([sys.executable, *READERS[reader], sim.url, str(body), "--streams", str(workload.streams),
                        "--requests-per-stream", str(workload.requests_per_stream), "--out", str(out / "out.json")],
                       check=True, timeout=300, preexec_fn=lambda: os.sched_setaffinity(0, {cores[-1]}))
    result = json.loads((out / "out.json").read_text())
    events = sum(request["content_events"] for request in result["requests"])
    assert events == workload.streams * workload.requests_per_stream * workload.tokens, events
    return result["cpu_s"] / events * 1e6


def llm_bench(workload: selftest.Workload, out: Path) -> float:
    no_bare = {workload.streams_shape: {"bare_ttft_err_p50_ms": None, "bare_cpu_us_per_token": None}}
    return selftest.measure(workload, out, no_bare)["cpu_us_per_token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"asyncio": [], "gevent": [], "llm-bench": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, values in runs.items():
                out = Path(tmp) / f"{name}-{round_}"
                out.mkdir()
                values.append(llm_bench(W3, out) if name == "llm-bench" else read(name, W3, out))
                print(f"round {round_ + 1} {name:>9}: {values[-1]:5.1f} us per token", flush=True)
    floor = statistics.median(runs["asyncio"])
    for name, values in runs.items():
        median = statistics.median(values)
        print(f"{name:>9}: median {median:5.1f} us per token ({min(values):.1f} to {max(values):.1f}), "
              f"{median / floor:.2f}x asyncio's")


if __name__ == "__main__":
    main()
