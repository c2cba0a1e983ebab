"""The highest rate one client core sends on time: `python tests/benchmarks/rate_lag.py [--rates 50,100,200]`.

`llm-bench run rate` (one Locust process, pinned to the client's core) against the simulated engine
(pinned to the other core: as many slots as requests in flight, prompts read at once, answers of
`--tokens` tokens at 1000 tok/s whatever the load, so the server always keeps up) offers each rate in
turn, Poisson arrivals, `--seconds` of schedule (at least `--min-requests` requests). For each rate,
from the run's own records: the send lag (the socket's send stamp minus the due time) at p50, p99 and
its largest, the requests sent over 5 ms late, the rate sent against the rate due, and the client's CPU
time per request (its process's user and system time over the run, warm-ups and start included). The
answer: the highest rate whose send lag p99 is at most `--lag-ms` (1 ms) with every request sent.
The machine's load average is printed with each rate: other processes on the client's core lengthen
the lags, so read the figures against it.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import simengine

LATE_S = 0.005


def one_rate(url: str, rate: float, seconds: float, min_requests: int, tokens: int, core: int, out: Path) -> dict:
    requests = max(min_requests, round(rate * seconds))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "llm_bench.cli", "run", "rate", "--host", url, "--rate", f"{rate:g}",
                           "--requests", str(requests), "--max-tokens", str(tokens), "--ignore-eos",
                           "--max-in-flight", "1024", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"rate {rate:g}: llm-bench exited {done.returncode}\n{done.stderr[-2000:]}")
    records = pd.read_csv(out / "requests.csv")
    window = records[records["scenario"] == "rate"]
    lag_ms = window["send_lag_s"].dropna() * 1000
    due = window["t_due"].sort_values()
    sent = window["t_send"].dropna()
    span = due.iloc[-1] - due.iloc[0]
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rate": rate, "requests": len(window), "sent": len(sent), "ok": int(window["ok"].sum()),
            "due_rps": (len(due) - 1) / span, "sent_rps": ((sent >= due.iloc[0]) & (sent <= due.iloc[-1])).sum() / span,
            "lag_p50_ms": lag_ms.quantile(0.5), "lag_p99_ms": lag_ms.quantile(0.99), "lag_max_ms": lag_ms.max(),
            "late": int((lag_ms > LATE_S * 1000).sum()), "cpu_ms_per_request": cpu_s / len(window) * 1000,
            "load_1m": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="25,50,100,150,200,300,400")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--min-requests", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--lag-ms", type=float, default=1.0)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    rates = [float(r) for r in args.rates.split(",")]
    config = simengine.SimConfig(port=0, slots=1024, prefill_tps=1e6, decode_tps=1000.0, decode_slowdown=0.0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, simengine.start_process(config) as sim:
        os.sched_setaffinity(sim.popen.pid, {cores[0]})
        for rate in rates:
            row = one_rate(sim.url, rate, args.seconds, args.min_requests, args.tokens, cores[-1],
                           Path(tmp) / f"rate-{rate:g}")
            rows.append(row)
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    kept = table[(table["lag_p99_ms"] <= args.lag_ms) & (table["sent"] == table["requests"])]
    print(f"highest rate with send lag p99 <= {args.lag_ms:g} ms on one client core: "
          + (f"{kept['rate'].max():g} requests/s" if len(kept) else "none of those tried"))


if __name__ == "__main__":
    main()
