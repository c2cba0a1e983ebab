"""llm-bench selftest: how accurate is this client on this machine, and from which load on it is not.

The simulated engine knows the true time of every token it sends. The selftest runs workloads against
it with the engine and the client pinned to different cores (so neither slows the other), joins each
request with the engine's log, and prints the client's errors and its own cost:

- W1: 12 streams, 128 tokens each, with 1 and with 4 tokens per event (speculative decoding);
- W3: c streams of 50 tok/s, 200 tokens each, for c = 50, 200, 400 (ideal total: 50 x c tok/s).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.load import load_run
from llm_bench import headless

TTFT_ERROR_LIMIT_S = 0.040  # beyond this a first-token figure says more about the client
DELIVERED_LIMIT = 0.97  # share of the engine's true tok/s the client must see


@dataclass(frozen=True)
class Workload:
    name: str
    streams: int
    tokens: int
    tokens_per_event: int = 1
    stream_tps: float = 50.0
    requests_per_stream: int = 2


WORKLOADS = (
    Workload("W1 12x128 1/event", 12, 128, 1),
    Workload("W1 12x128 4/event", 12, 128, 4),
    Workload("W3 c=50", 50, 200),
    Workload("W3 c=200", 200, 200),
    Workload("W3 c=400", 400, 200),
)
SMALL_WORKLOADS = (Workload("W1 4x32 1/event", 4, 32, 1, 100.0), Workload("W1 4x32 4/event", 4, 32, 4, 100.0))

TABLE_COLUMNS = ["workload", "requests", "ttft_err_p50_ms", "ttft_err_p99_ms", "engine_read_lag_p50_ms",
                 "decode_err_p50_pct", "delivered_tps", "true_tps", "delivered_share", "cpu_us_per_token",
                 "client_cpu_load", "over_limit", "saturated", "trustworthy"]


def add_parser(commands) -> None:
    parser = commands.add_parser("selftest", help="measure this client's own accuracy and capacity here")
    parser.add_argument("--small", action="store_true", help="two tiny workloads only (a check, not a measurement)")
    parser.add_argument("--out", default="", help="keep each workload's records in this directory")
    parser.set_defaults(handler=run)


def run(args, _argv) -> int:
    import tempfile

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="llm-bench-selftest-"))
    rows = [measure(workload, out / _slug(workload.name)) for workload in (SMALL_WORKLOADS if args.small else WORKLOADS)]
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    table.to_csv(out / "selftest.csv", index=False)
    print(format_table(table))
    print(verdict(table))
    print(f"records: {out}")
    return 0


def measure(workload: Workload, out_dir: Path) -> dict:
    """Run one workload: engine on core 0, client on core 1 (when there are two)."""
    import simengine

    out_dir = headless.prepare_out_dir(str(out_dir))
    truth_log = out_dir / "sim-truth.jsonl"
    config = simengine.SimConfig(port=0, slots=workload.streams, prefill_tps=1e6, decode_tps=workload.stream_tps,
                                 decode_slowdown=0.0, tokens_per_event=workload.tokens_per_event,
                                 answer_tokens_min=workload.tokens, answer_tokens_max=workload.tokens,
                                 truth_log=str(truth_log))
    cores = sorted(os.sched_getaffinity(0))
    with simengine.start_process(config) as sim:
        if len(cores) >= 2:
            os.sched_setaffinity(sim.popen.pid, {cores[0]})
        extra = ["--llm-requests", str(workload.streams * workload.requests_per_stream),
                 "--max-tokens", str(workload.tokens), "--ignore-eos", "--engine", "sim"]
        headless.run_locust("chat.py", sim.url, out_dir, workload.streams, extra, api_key="",
                            cpu=cores[-1] if len(cores) >= 2 else None)
    records, _info = load_run(out_dir)
    truth = pd.read_json(truth_log, lines=True)
    client = _client_cost(out_dir)
    return {"workload": workload.name, **accuracy(records, truth, client)}


def _client_cost(out_dir: Path) -> dict:
    files = list(out_dir.glob("client-*.json"))
    return json.loads(files[0].read_text()) if files else {}


def accuracy(records: pd.DataFrame, truth: pd.DataFrame, client: dict) -> dict:
    """The client's figures against the engine's truth, joined on the response id (pure).

    The TTFT error is the client's own: when it dated the first token (``t_send + ttft_s``) against
    when the engine wrote it, both on the machine's monotonic clock. The engine's delay in reading the
    request after the client sent it (``engine_read_lag``) is part of every client's first token and
    not the client's error: it is shown apart (a loaded simulated engine reads requests late too)."""
    measured = records[(records["scenario"] == "chat") & records["ok"].fillna(False)]
    joined = measured.set_index("request_id").join(truth.add_suffix("_true").set_index("request_id_true"),
                                                   how="inner")
    t_first = joined["t_send"].astype(float) + joined["ttft_s"].astype(float)
    ttft_err = t_first - joined["t_first_token_true"].astype(float)
    read_lag = joined["t_arrival_true"].astype(float) - joined["t_send"].astype(float)
    decode_err = joined["decode_tps"].astype(float) / joined["decode_tps_true"].astype(float) - 1
    t_send = joined["t_send"].astype(float)
    delivered_span = (t_send + joined["e2e_s"].astype(float)).max() - t_send.min()
    true_span = joined["t_last_token_true"].max() - joined["t_arrival_true"].min()
    tokens = joined["completion_tokens"].astype(float).sum()
    delivered, true = tokens / delivered_span, joined["completion_tokens_true"].sum() / true_span
    all_tokens = records["completion_tokens"].astype(float).sum()
    cpu_s, wall_s = client.get("run_cpu_s"), client.get("run_wall_s")
    saturated = int(measured["flags"].fillna("").str.contains("client_saturated").sum())
    row = {
        "requests": len(joined),
        "ttft_err_p50_ms": ttft_err.median() * 1000,
        "ttft_err_p99_ms": ttft_err.quantile(0.99) * 1000,
        "engine_read_lag_p50_ms": read_lag.median() * 1000,
        "decode_err_p50_pct": decode_err.median() * 100,
        "delivered_tps": delivered,
        "true_tps": true,
        "delivered_share": delivered / true,
        "cpu_us_per_token": cpu_s / all_tokens * 1e6 if cpu_s and all_tokens else None,
        "client_cpu_load": cpu_s / wall_s if cpu_s and wall_s else None,
        # What the guard is for: requests whose first token really was off by more than the limit,
        # beside the requests it flagged.
        "over_limit": int((ttft_err.abs() > TTFT_ERROR_LIMIT_S).sum()),
        "saturated": saturated,
    }
    row["trustworthy"] = bool(row["ttft_err_p50_ms"] <= TTFT_ERROR_LIMIT_S * 1000
                              and row["delivered_share"] >= DELIVERED_LIMIT and saturated == 0)
    return row


def format_table(table: pd.DataFrame) -> str:
    def cell(value, digits):
        if value is None or pd.isna(value):
            return "-"
        return f"{0.0 if abs(value) < 0.5 * 10 ** -digits else value:.{digits}f}"  # no "-0.00"

    lines = [f"{'workload':<20}{'n':>5}{'TTFT err p50 ms':>17}{'p99 ms':>9}{'engine lag ms':>15}{'decode err %':>14}"
             f"{'delivered tok/s':>17}{'true tok/s':>12}{'share':>8}{'CPU us/token':>14}{'CPU load':>10}"
             f"{'over 40ms':>11}{'flagged':>9}{'trust':>7}"]
    for row in table.itertuples(index=False):
        lines.append(f"{row.workload:<20}{row.requests:>5}{cell(row.ttft_err_p50_ms, 2):>17}"
                     f"{cell(row.ttft_err_p99_ms, 1):>9}{cell(row.engine_read_lag_p50_ms, 2):>15}"
                     f"{cell(row.decode_err_p50_pct, 3):>14}"
                     f"{cell(row.delivered_tps, 0):>17}{cell(row.true_tps, 0):>12}{cell(row.delivered_share, 3):>8}"
                     f"{cell(row.cpu_us_per_token, 0):>14}{cell(row.client_cpu_load, 2):>10}{row.over_limit:>11}"
                     f"{row.saturated:>9}{'yes' if row.trustworthy else 'NO':>7}")
    return "\n".join(lines)


def verdict(table: pd.DataFrame) -> str:
    untrusted = table[~table["trustworthy"]]
    if untrusted.empty:
        return "This client was trustworthy at every load measured here."
    first = untrusted.iloc[0]["workload"]
    return (f"This client stops being trustworthy at {first}: TTFT error p50 over {TTFT_ERROR_LIMIT_S * 1000:.0f} ms, "
            f"under {DELIVERED_LIMIT:.0%} of the true tok/s delivered, or saturated. Split the load over more "
            f"processes or machines (--processes N, workers) below that point.")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-").lower()

