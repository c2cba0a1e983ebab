"""Is the default capacity search right, and how much sooner is it? A benchmark, not a test (pytest does not
collect it: it runs for up to an hour).

    python tests/benchmarks/capacity_truth.py --out results/truth                 # both searches, on the sim
    python tests/benchmarks/capacity_truth.py --only default --out results/truth  # the default search alone
    python tests/benchmarks/capacity_truth.py --host http://127.0.0.1:8080 --slo ttft_p95=1.0,decode_p5=10 \\
        --only default --out results/smollm2                                      # a real server (SmolLM2)
    python tests/benchmarks/capacity_truth.py --compare results/truth/default results/truth/exhaustive

Without --host it serves the simulated engine as "a server like the issue's": 4 slots, every answer exactly
256 tokens (its natural length, --answer-tokens-min/max 256, at the class's --max-tokens 256), each decoded at
100 tok/s whatever the others do (--decode-slowdown 0), prompts read at 40000 tok/s (a 1.2K-token conversation
in 30 ms). Its paper capacity for the class of 10-40 s thinkers and ttft_p95 <= 1 s is what the queueing model
(bench_tasks/capacity/queue_model.py) says on those true timings (printed first: 24, with the p95 at 24 and 25 about
0.95 and 1.2 s, so "24-25").

The default search is `llm-bench capacity --host URL --slo SLO --out DIR` with no other option; the exhaustive
one is the ladder as it was before the probe (--start-students 2 --step x2 --resolution 1), or with
--exhaustive-from N every class from N up (--start-students N --step +1) until one misses. Each prints its
verdicts as it goes; at the end both results are printed side by side, with their times, and whether the
default search landed within one student of the exhaustive answer in at most a third of its time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import simengine
from bench_tasks import slo as slos
from bench_tasks.capacity.queue_model import Server, predict
from bench_tasks.classroom import ThinkTime

SIM = simengine.SimConfig(port=0, slots=4, decode_tps=100.0, decode_slowdown=0.0, answer_tokens_min=256,
                          answer_tokens_max=256, prefill_tps=40000.0)
PAPER_SERVER = Server(slots=4, token_s=1 / 100, answer_tokens=(256,), first_token_s=0.001, prefill_tps=40000.0,
                      first_prompt_tokens=60, cached_history=True)


def paper(slo_text: str) -> str:
    goal = slos.parse(slo_text)
    prediction = predict(PAPER_SERVER, ThinkTime(10, 40), goal, max_students=256, requests=100000)
    shown = ", ".join(f"{n}: {c.figures[g.figure]:.3g} {g.unit}" for n, c in sorted(prediction.classes.items())
                      for g in goal.goals if abs(n - prediction.capacity) <= 1)
    return f"paper capacity (queueing model on the sim's true timings): {prediction.capacity} ({shown})"


def search(url: str, out: Path, slo_text: str, extra: list[str]) -> dict:
    command = [sys.executable, "-m", "llm_bench.cli", "capacity", "--host", url, "--slo", slo_text, *extra,
               "--out", str(out)]
    print("$", " ".join(command[2:]), flush=True)
    started = time.monotonic()
    subprocess.run(command, check=True)
    took_s = time.monotonic() - started
    (out / "truth.json").write_text(json.dumps({"command": command[2:], "took_s": took_s}))
    return result(out)


def result(out: Path) -> dict:
    events = [json.loads(line) for line in (out / "capacity.jsonl").read_text().splitlines() if line.strip()]
    end = events[-1] if events and events[-1]["event"] == "end" else {}
    steps = [(e["students"], e["outcome"]) for e in events if e["event"] == "step"]
    probe = next((e for e in events if e["event"] == "probe"), None)
    took = json.loads((out / "truth.json").read_text())["took_s"] if (out / "truth.json").exists() else None
    return {"dir": str(out), "capacity": end.get("capacity"), "bound": end.get("bound"), "why": end.get("why"),
            "steps": steps, "took_s": took, "predicted": probe and probe["capacity"]}


def side_by_side(default: dict, exhaustive: dict) -> str:
    lines = []
    for name, run in (("default", default), ("exhaustive", exhaustive)):
        took = f"{run['took_s'] / 60:.1f} min" if run["took_s"] else "time unknown"
        predicted = f", predicted {run['predicted']}" if run["predicted"] is not None else ""
        steps = " ".join(f"{n}{'+' if o == slos.MEETS else '-'}" for n, o in run["steps"])
        lines.append(f"{name:>10}: capacity {run['capacity']} (bound {run['bound']}, {run['why']}){predicted}, "
                     f"{len(run['steps'])} steps [{steps}], {took}")
    if default["capacity"] is not None and exhaustive["capacity"] is not None:
        near = abs(default["capacity"] - exhaustive["capacity"]) <= 1
        third = default["took_s"] and exhaustive["took_s"] and default["took_s"] <= exhaustive["took_s"] / 3
        lines.append(f"within one student: {'yes' if near else 'NO'}; in at most a third of the time: "
                     f"{'yes' if third else 'NO' if third is False else 'unknown'}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="a server to search (default: serve the simulated engine like the issue's)")
    parser.add_argument("--slo", default="ttft_p95=1.0")
    parser.add_argument("--only", choices=["default", "exhaustive"], help="run one of the two searches")
    parser.add_argument("--exhaustive-from", type=int, help="every class from this one up (default: the old ladder)")
    parser.add_argument("--out", type=Path, help="directory for both searches' runs")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("DEFAULT_DIR", "EXHAUSTIVE_DIR"),
                        help="print two finished searches side by side, run nothing")
    args = parser.parse_args()
    if args.compare:
        print(side_by_side(result(args.compare[0]), result(args.compare[1])))
        return 0
    if args.out is None:
        parser.error("--out is required to run a search")
    runs: dict[str, dict] = {}
    sim = None if args.host else simengine.start_process(SIM)
    try:
        url = args.host or sim.url
        if sim is not None:
            print(paper(args.slo), flush=True)
        exhaustive = ["--start-students", str(args.exhaustive_from), "--step", "+1"] if args.exhaustive_from else [
            "--start-students", "2", "--step", "x2", "--resolution", "1"]
        for name, extra in (("default", []), ("exhaustive", exhaustive)):
            if args.only in (None, name):
                runs[name] = search(url, args.out / name, args.slo, extra)
    finally:
        if sim is not None:
            sim.stop()
    if len(runs) == 2:
        print(side_by_side(runs["default"], runs["exhaustive"]))
    else:
        for name, run in runs.items():
            print(f"{name}: {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
