"""Capacity of the simulated engine: `python -m simengine.bench [--streams 400] [--tps 50]`.

Starts the sim in its own process and a minimal asyncio raw-socket client in another (niced, so
that on a small box the sim wins the CPU), keeps `--streams` streams open (each restarts when it
ends), and reports over a steady window:
- events/s the sim wrote (from its /metrics) and the client received, vs ideal
  (streams x tps / tokens_per_event), and the sim's CPU% (from /proc);
- the sim's own write lateness against each event's due time (its /metrics histogram: bucket bounds);
- the median decode_tps of the truth log vs the configured rate;
- lateness as the client received events (first event + k intervals), and client TTFT minus truth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from time import perf_counter
from urllib.parse import urlsplit

from simengine.config import SimConfig
from simengine.process import start_process

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The client yields the CPU to the sim: on a 2-core box they contend, and it is the sim being measured.
CLIENT_NICE = 10
SETTLE_S = 0.5  # the window starts this long after the ramp and ends this long before the stop


class BenchStream(asyncio.Protocol):
    """One keep-alive connection that streams completions back to back."""

    def __init__(self, host: str, index: int, max_tokens: int, results: list, stop_at: float) -> None:
        self.host = host
        self.index = index
        self.max_tokens = max_tokens
        self.results = results
        self.stop_at = stop_at
        self.transport = None
        self.buffer = b""
        self.sequence = 0
        self.current: dict | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.send()

    def send(self) -> None:
        self.sequence += 1
        body = json.dumps({"stream": True, "max_tokens": self.max_tokens, "ignore_eos": True,
                           "messages": [{"role": "user", "content": f"stream {self.index} request {self.sequence}"}]})
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n")
        self.current = {"t_send": perf_counter(), "times": [], "id": None}
        self.transport.write(head.encode() + body.encode())

    def data_received(self, data: bytes) -> None:
        # C-level byte counting, no per-event Python work: the client must not be the bottleneck.
        t = perf_counter()
        end = data.rfind(b"\n\n")
        if end < 0:
            self.buffer += data
            return
        whole, self.buffer = self.buffer + data[:end + 2], data[end + 2:]
        current = self.current
        count = whole.count(b'{"content": "')
        if count:
            current["times"].extend([t] * count)
        if current["id"] is None:
            start = whole.find(b'"id": "') + 7
            current["id"] = whole[start:whole.index(b'"', start)].decode()
        if b"data: [DONE]" in whole:
            self.results.append(current)
            if perf_counter() < self.stop_at:
                self.send()
            else:
                self.current = {"t_send": 0.0, "times": [], "id": None}

    def connection_lost(self, exc) -> None:
        pass


def run_client(url: str, streams: int, max_tokens: int, ramp_s: float, run_s: float, queue, ramped) -> None:
    results: list = []
    os.nice(CLIENT_NICE)
    start_cpu = os.times()
    asyncio.run(_drive(url, streams, max_tokens, ramp_s, run_s, results, ramped))
    used = os.times()
    cpu_s = (used.user - start_cpu.user) + (used.system - start_cpu.system)
    queue.put({"results": results, "client_cpu_s": cpu_s})


async def _drive(url: str, streams: int, max_tokens: int, ramp_s: float, run_s: float, results: list,
                 ramped) -> None:
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    stop_at = perf_counter() + ramp_s + run_s  # restarts stop here; the window lies before it
    transports = []
    rng = random.Random(0)
    offsets = sorted(rng.uniform(0, ramp_s) for _ in range(streams))  # spread starts: no lockstep ticks
    started = perf_counter()
    for index, offset in enumerate(offsets):
        await asyncio.sleep(max(0.0, started + offset - perf_counter()))
        transport, protocol = await loop.create_connection(
            lambda i=index: BenchStream(parts.hostname, i, max_tokens, results, stop_at), parts.hostname, parts.port)
        transports.append((transport, protocol))
    ramped.set()
    await asyncio.sleep(max(0.0, stop_at - perf_counter()) + 0.5)
    for transport, protocol in transports:
        transport.abort()
        if protocol.current and protocol.current["times"]:  # its events up to now count too
            results.append(protocol.current)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None


def measure(streams: int, tps: float, tokens_per_event: int, ramp_s: float, run_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        truth_path = Path(tmp) / "truth.jsonl"
        config = SimConfig(slots=streams, decode_tps=tps, decode_slowdown=0.0, tokens_per_event=tokens_per_event,
                           truth_log=str(truth_path))
        sim = start_process(config)
        try:
            max_tokens = max(int(tps * 3), 10)  # ~3 s per request: new requests keep arriving
            context = multiprocessing.get_context("spawn")
            queue, ramped = context.Queue(), context.Event()
            client = context.Process(target=run_client,
                                     args=(sim.url, streams, max_tokens, ramp_s, run_s, queue, ramped))
            client.start()
            ramped.wait(60)
            time.sleep(SETTLE_S)
            late_start, tokens_start = scrape(sim.url)
            window_start, cpu_start = perf_counter(), cpu_seconds(sim.popen.pid)
            time.sleep(run_s - 2 * SETTLE_S)
            window_end, cpu_end = perf_counter(), cpu_seconds(sim.popen.pid)
            late_end, tokens_end = scrape(sim.url)
            outcome = queue.get(timeout=ramp_s + run_s + 60)
            client.join(10)
        finally:
            sim.stop()
        truth = {row["request_id"]: row for row in map(json.loads, truth_path.read_text().splitlines())}
    report = summarize(outcome, truth, streams, tps, tokens_per_event, max_tokens, window_start, window_end,
                       (cpu_end - cpu_start) / (window_end - window_start))
    sim_events_per_s = (tokens_end - tokens_start) / tokens_per_event / (window_end - window_start)
    report["sim_events_per_s"] = round(sim_events_per_s, 1)
    report["sim_events_vs_ideal"] = round(sim_events_per_s / report["ideal_events_per_s"], 4)
    window_counts = [(bound, end - start) for (bound, end), (_, start) in zip(late_end, late_start)]
    for q in (0.5, 0.99, 0.999):
        report[f"sim_write_lateness_ms_p{q * 100:g}_at_most"] = lateness_quantile_ms(window_counts, q)
    return report


def scrape(url: str) -> tuple[list[tuple[float, int]], float]:
    """The sim's own event lateness histogram as (upper bound s, cumulative count), and tokens written."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    buckets = re.findall(r'simengine:event_lateness_seconds_bucket\{[^}]*le="([^"]+)"\} (\d+)', text)
    tokens = float(re.search(r"vllm:generation_tokens_total\{[^}]*\} (\S+)", text).group(1))
    return [(float(bound), int(count)) for bound, count in buckets], tokens


def lateness_quantile_ms(cumulative: list[tuple[float, int]], q: float) -> float | str | None:
    """The upper bound of the bucket holding quantile q (histograms only bound it from above)."""
    total = cumulative[-1][1] if cumulative else 0
    for bound, count in cumulative:
        if total and count >= q * total:
            return bound * 1000 if bound != float("inf") else f"over {cumulative[-2][0] * 1000:g}"
    return None


def summarize(outcome: dict, truth: dict, streams: int, tps: float, tokens_per_event: int, max_tokens: int,
              window_start: float, window_end: float, sim_cpu: float) -> dict:
    interval_s = tokens_per_event / tps
    events = 0
    lateness_ms = []
    ttft_errors_ms = []
    for result in outcome["results"]:
        times = result["times"]
        events += sum(window_start <= t < window_end for t in times)
        if not times:
            continue
        lateness_ms += [(t - times[0] - k * interval_s) * 1000 for k, t in enumerate(times)
                        if window_start <= t < window_end]
        row = truth.get(result["id"])
        if row and row["ttft_s"] is not None and window_start <= times[0] < window_end:
            ttft_errors_ms.append(((times[0] - result["t_send"]) - row["ttft_s"]) * 1000)
    decode_rates = [row["decode_tps"] for row in truth.values()
                    if row["decode_tps"] and row["t_first_token"] >= window_start and row["t_last_token"] < window_end]
    ideal = streams * tps / tokens_per_event
    achieved = events / (window_end - window_start)
    return {
        "streams": streams, "tps_per_stream": tps, "tokens_per_event": tokens_per_event,
        "ideal_events_per_s": ideal, "client_received_events_per_s": round(achieved, 1),
        "sim_cpu_percent": round(100 * sim_cpu, 1),
        # as received by the (niced, Python) client: includes its own delays
        "client_event_lateness_ms_p50": percentile(lateness_ms, 0.5),
        "client_event_lateness_ms_p99": percentile(lateness_ms, 0.99),
        "sim_decode_tps_median_vs_ideal": round(statistics.median(decode_rates) / tps, 4) if decode_rates else None,
        "client_minus_truth_ttft_ms_median": round(statistics.median(ttft_errors_ms), 3) if ttft_errors_ms else None,
        "requests_measured": len(ttft_errors_ms),
        "client_cpu_s": round(outcome["client_cpu_s"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simengine.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=400)
    parser.add_argument("--tps", type=float, default=50.0, help="decode tokens/s of each stream")
    parser.add_argument("--tokens-per-event", type=int, default=1)
    parser.add_argument("--ramp-s", type=float, default=2.0, help="stream starts are spread over this long")
    parser.add_argument("--run-s", type=float, default=10.0, help="steady-state window after the ramp")
    args = parser.parse_args(argv)
    report = measure(args.streams, args.tps, args.tokens_per_event, args.ramp_s, args.run_s)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
