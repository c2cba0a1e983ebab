"""llm-bench selftest: how accurate is this client on this machine, and from which load on it is not.

The simulated engine knows the true time of every token it sends. The selftest runs workloads against
it with the engine and the client pinned to different cores (so neither slows the other), joins each
request with the engine's log, and prints the client's errors and its own cost:

- W1: 12 streams, 128 tokens each, with 1 and with 4 tokens per event (speculative decoding);
- W3: c streams of 50 tok/s, 200 tokens each, for c = 50, 200, 400 (ideal total: 50 x c tok/s);
- the fallback of laptops without kernel receive stamps (macOS, Windows): W1 1/event, W3 c=200 and
  c=400 again with the stamps switched off (``LLM_BENCH_KERNEL_STAMPS=0``), rows of their own.

Each workload's streams are read a second time, in the same run and from the same engine, by the bare
reader (llm_bench.bare_reader: the cheapest honest Python client), in its own process on the client's
core: ``cpu_vs_bare`` is llm-bench's CPU per token over the bare reader's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from analysis.load import load_run
from analysis.records import has_flag, ok_mask
from bench_tasks import chat, engine, options
from bench_tasks.formatting import shown
from bench_tasks.payload import chat_body, encode
from llm_bench import headless

TTFT_ERROR_LIMIT_S = 0.040  # beyond this a first-token figure says more about the client
DELIVERED_LIMIT = 0.97  # share of the engine's true tok/s the client must see
OVER_LIMIT_SHARE = 0.01  # first tokens dated more than TTFT_ERROR_LIMIT_S off: at most this share (the p99)


@dataclass(frozen=True)
class Workload:
    name: str
    streams: int
    tokens: int
    tokens_per_event: int = 1
    stream_tps: float = 50.0
    requests_per_stream: int = 2
    kernel_stamps: bool = True

    @property
    def streams_shape(self) -> tuple:
        """What the engine streams: the same for both stamp settings, so one bare pass serves both."""
        return self.streams, self.tokens, self.tokens_per_event, self.stream_tps, self.requests_per_stream


NO_STAMPS = " (no kernel stamps)"
W1, W3_200, W3_400 = Workload("W1 12x128 1/event", 12, 128, 1), Workload("W3 c=200", 200, 200), \
    Workload("W3 c=400", 400, 200)
W1_SMALL = Workload("W1 4x32 1/event", 4, 32, 1, 100.0)
WORKLOADS = (
    W1,
    Workload("W1 12x128 4/event", 12, 128, 4),
    Workload("W3 c=50", 50, 200),
    W3_200,
    W3_400,
    *(replace(w, name=w.name + NO_STAMPS, kernel_stamps=False) for w in (W1, W3_200, W3_400)),
)
SMALL_WORKLOADS = (W1_SMALL, Workload("W1 4x32 4/event", 4, 32, 4, 100.0),
                   replace(W1_SMALL, name=W1_SMALL.name + NO_STAMPS, kernel_stamps=False))

TABLE_COLUMNS = ["workload", "requests", "ttft_err_p50_ms", "bare_ttft_err_p50_ms", "ttft_err_p99_ms",
                 "engine_read_lag_p50_ms", "decode_err_p50_pct", "delivered_tps", "true_tps", "delivered_share",
                 "cpu_us_per_token", "bare_cpu_us_per_token", "cpu_vs_bare", "client_cpu_load", "over_limit",
                 "saturated", "missed", "trustworthy"]


def add_parser(commands) -> None:
    parser = commands.add_parser("selftest", help="measure this client's own accuracy and capacity here")
    parser.add_argument("--small", action="store_true", help="three tiny workloads only (a check, not a measurement)")
    parser.add_argument("--out", default="", help="keep each workload's records in this directory")
    parser.set_defaults(handler=run)


def run(args, _argv) -> int:
    import tempfile

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="llm-bench-selftest-"))
    bare_passes: dict = {}  # streams shape -> the bare reader's figures (one pass serves both stamp settings)
    rows = [measure(workload, out / _slug(workload.name), bare_passes)
            for workload in (SMALL_WORKLOADS if args.small else WORKLOADS)]
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    table.to_csv(out / "selftest.csv", index=False)
    print(format_table(table))
    print(verdict(table))
    print(f"records: {out}")
    return 0


def measure(workload: Workload, out_dir: Path, bare_passes: dict) -> dict:
    """Run one workload: engine on core 0, client on core 1 (when there are two); then, the first time
    these streams are run, the bare reader on the client's core against the same engine (its figures
    kept in ``bare_passes`` by streams shape)."""
    import simengine

    out_dir = headless.prepare_out_dir(str(out_dir))
    truth_log = out_dir / "sim-truth.jsonl"
    config = sim_config(workload, truth_log=str(truth_log))
    cores = _cores()
    client_cpu = cores[-1] if len(cores) >= 2 else None
    with simengine.start_process(config) as sim:
        if len(cores) >= 2:
            os.sched_setaffinity(sim.popen.pid, {cores[0]})
        requests = workload.streams * workload.requests_per_stream
        argv = options.locust_argv(options.given(options.RUN, requests=str(requests), max_tokens=str(workload.tokens),
                                                 ignore_eos=True, engine="sim"), options.RUN)
        with _kernel_stamps(workload.kernel_stamps):
            headless.run_locust("chat.py", sim.url, out_dir, workload.streams, argv, api_key="", cpu=client_cpu)
        shape = workload.streams_shape
        bare = None if shape in bare_passes else read_bare(workload, config.model, sim.url, out_dir, client_cpu)
    records, _info = load_run(out_dir)
    truth = pd.read_json(truth_log, lines=True)  # the bare reader's requests are in it too
    if bare is not None:
        bare_passes[shape] = bare_accuracy(bare, truth)
    row = {"workload": workload.name, **accuracy(records, truth, _client_cost(out_dir)), **bare_passes[shape]}
    row["cpu_vs_bare"] = _ratio(row["cpu_us_per_token"], row["bare_cpu_us_per_token"])
    return row


def sim_config(workload: Workload, **more):
    """The simulated engine that streams ``workload``: a slot per stream, prompts read at once, every
    answer ``tokens`` long at ``stream_tps`` whatever the load."""
    import simengine

    return simengine.SimConfig(port=0, slots=workload.streams, prefill_tps=1e6, decode_tps=workload.stream_tps,
                               decode_slowdown=0.0, tokens_per_event=workload.tokens_per_event,
                               answer_tokens_min=workload.tokens, answer_tokens_max=workload.tokens, **more)


def _cores() -> list[int]:
    """The cores this process may use where a process can be pinned (Linux); elsewhere none: nothing
    is pinned, and engine and client share the cores as the system schedules them."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []


@contextlib.contextmanager
def _kernel_stamps(on: bool):
    """Locust runs with kernel receive stamps on (where the system has them) or switched off."""
    saved = os.environ.get("LLM_BENCH_KERNEL_STAMPS")
    if not on:
        os.environ["LLM_BENCH_KERNEL_STAMPS"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("LLM_BENCH_KERNEL_STAMPS", None)
        else:
            os.environ["LLM_BENCH_KERNEL_STAMPS"] = saved


def read_bare(workload: Workload, model: str, url: str, out_dir: Path, cpu: int | None) -> dict:
    """The bare reader on the same streams: the body llm-bench sends to this engine, in a process of
    its own on the client's core."""
    write_bare_body(workload, model, out_dir / "bare-body.json")
    out = out_dir / "bare-reader.json"
    timeout_s = 60 + 3 * workload.requests_per_stream * workload.tokens / workload.stream_tps
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    subprocess.run([sys.executable, "-m", "llm_bench.bare_reader", url, str(out_dir / "bare-body.json"),
                    "--streams", str(workload.streams), "--requests-per-stream", str(workload.requests_per_stream),
                    "--timeout-s", str(timeout_s), "--out", str(out)],
                   check=True, timeout=timeout_s + 30, preexec_fn=pin)
    return json.loads(out.read_text())


def write_bare_body(workload: Workload, model: str, path: Path) -> None:
    """The body llm-bench sends the simulated engine in this workload, for a reader of the same streams."""
    body = chat_body(model, chat.messages(chat.QUESTIONS[0], "(run 1)"), workload.tokens, ignore_eos=True,
                     extras=engine.profile("sim").extras())
    path.write_bytes(encode(body))


def bare_accuracy(bare: dict, truth: pd.DataFrame) -> dict:
    """The bare reader's first-token error and CPU per token against the engine's truth (pure): it
    dates a first token when its read returns, and counts the tokens the engine sent it."""
    requests = pd.DataFrame(bare["requests"], columns=["request_id", "t_send", "t_first_content"])
    joined = requests.dropna().set_index("request_id").join(truth.set_index("request_id"), how="inner")
    ttft_err = joined["t_first_content"].astype(float) - joined["t_first_token"].astype(float)
    tokens = joined["completion_tokens"].astype(float).sum()
    return {"bare_ttft_err_p50_ms": ttft_err.median() * 1000 if len(joined) else None,
            "bare_cpu_us_per_token": bare["cpu_s"] / tokens * 1e6 if bare["cpu_s"] and tokens else None}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def _client_cost(out_dir: Path) -> dict:
    files = list(out_dir.glob("client-*.json"))
    return json.loads(files[0].read_text()) if files else {}


def accuracy(records: pd.DataFrame, truth: pd.DataFrame, client: dict) -> dict:
    """The client's figures against the engine's truth, joined on the response id (pure).

    The TTFT error is the client's own: when it dated the first token (``t_send + ttft_s``) against
    when the engine wrote it, both on the machine's monotonic clock. The engine's delay in reading the
    request after the client sent it (``engine_read_lag``) is part of every client's first token and
    not the client's error: it is shown apart (a loaded simulated engine reads requests late too)."""
    measured = records[(records["scenario"] == "chat") & ok_mask(records)]
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
    saturated = int(has_flag(measured, "client_saturated").sum())
    late = ttft_err.abs() > TTFT_ERROR_LIMIT_S
    flagged = has_flag(joined, "client_saturated")
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
        "over_limit": int(late.sum()),
        "saturated": saturated,
        "missed": int((late & ~flagged).sum()),  # late, and the guard did not say so
    }
    # Trustworthy: its figures were right, whatever the guard saw. A client whose guard flagged
    # nothing can still have dated first tokens late (without kernel stamps the loop-lag probe misses
    # a burst of reads served in one turn of the loop): those count against it too.
    row["trustworthy"] = bool(row["ttft_err_p50_ms"] <= TTFT_ERROR_LIMIT_S * 1000
                              and row["over_limit"] <= OVER_LIMIT_SHARE * row["requests"]
                              and row["delivered_share"] >= DELIVERED_LIMIT and saturated == 0)
    return row


# (header, column, decimals) of the printed table, after the workload's name
PRINTED = [("n", "requests", None), ("TTFT err p50 ms", "ttft_err_p50_ms", 2), ("bare", "bare_ttft_err_p50_ms", 2),
           ("p99 ms", "ttft_err_p99_ms", 1), ("engine lag ms", "engine_read_lag_p50_ms", 2),
           ("decode err %", "decode_err_p50_pct", 3), ("delivered tok/s", "delivered_tps", 0),
           ("true tok/s", "true_tps", 0), ("share", "delivered_share", 3), ("CPU us/token", "cpu_us_per_token", 0),
           ("bare", "bare_cpu_us_per_token", 0), ("vs bare", "cpu_vs_bare", 2), ("CPU load", "client_cpu_load", 2),
           ("over 40ms", "over_limit", None), ("flagged", "saturated", None), ("missed", "missed", None),
           ("trust", "trustworthy", None)]


def format_table(table: pd.DataFrame) -> str:
    def cell(value, digits):
        return str(value) if digits is None and not pd.isna(value) else shown(value, digits or 0)

    name_width = max([len("workload"), *map(len, table["workload"])]) + 2
    widths = [max(len(header), 5) + 2 for header, _, _ in PRINTED]
    lines = [f"{'workload':<{name_width}}" + "".join(f"{h:>{w}}" for (h, _, _), w in zip(PRINTED, widths))]
    for row in table.to_dict("records"):
        cells = [("yes" if row[column] else "NO") if column == "trustworthy" else cell(row[column], digits)
                 for _, column, digits in PRINTED]
        lines.append(f"{row['workload']:<{name_width}}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    return "\n".join(lines)


def verdict(table: pd.DataFrame) -> str:
    untrusted = table[~table["trustworthy"]]
    limit_ms = TTFT_ERROR_LIMIT_S * 1000
    if untrusted.empty:
        said = "This client was trustworthy at every load measured here."
    else:
        said = (f"This client stops being trustworthy at {untrusted.iloc[0]['workload']}: TTFT error p50 over "
                f"{limit_ms:.0f} ms, more than {OVER_LIMIT_SHARE:.0%} of first tokens off by more than "
                f"{limit_ms:.0f} ms, under {DELIVERED_LIMIT:.0%} of the true tok/s delivered, or saturated. Split "
                f"the load over more processes or machines (--processes N, workers) below that point.")
    missed = table[table["missed"] > 0]
    if len(missed):  # what a run would not have said: late first tokens its guard did not flag
        said += "\nThe saturation guard did not flag first tokens that were really late in: " + "; ".join(
            f"{row.workload} ({row.missed} of {row.over_limit} late)" for row in missed.itertuples())
    return said


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-").lower()

