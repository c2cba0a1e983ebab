"""The engine's Prometheus counters, read into ``metrics.jsonl`` before and after each phase (the suite's
shape, between phases) or around a whole run (``AroundEachRun``: a free run such as chat.py's).

Read where the records come together (the local runner or the master). Metrics are a bonus: a reading
that fails is logged and written as its error (the report names the phase), and the run goes on.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from bench_tasks import metrics
from bench_tasks.records_file import METRICS_JSONL, JsonlWriter
from locustfiles.llm_run import LLMRun, RunListener


def read(run: LLMRun, phase: str, when: str) -> None:
    """One reading of the engine's counters into metrics.jsonl ("before" or "after" ``phase``); a reading
    that failed is written as its error, so the report says which phase lacks the engine's side."""
    environment = run.environment
    try:
        server = run.target()
        values = metrics.scrape(environment.host, server.profile, server.api_key)
    except Exception as exc:  # noqa: BLE001 - a timeout, an HTTP error, a cut connection: all said alike
        logging.warning("llm-bench: could not read the engine's metrics %s %s: %s", when, phase, exc)
        outcome = {"error": f"{type(exc).__name__}: {exc}"}
    else:
        if values is None:
            return
        # The profile's names say what each series is (and what its counter counts).
        outcome = {"metrics": values, "names": server.profile.metrics}
    log = JsonlWriter(Path(environment.parsed_options.out) / METRICS_JSONL)
    log.write({"phase": phase, "when": when, "t": time.perf_counter(), **outcome})
    log.close()


class AroundEachRun(RunListener):
    """Read the counters when each run starts and when it stops, as the readings of ``phase``."""

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def run_starts(self, run: LLMRun) -> None:
        if not run.is_worker:
            read(run, self.phase, "before")

    def run_stops(self, run: LLMRun) -> None:
        if not run.is_worker:
            read(run, self.phase, "after")
