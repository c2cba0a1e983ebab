"""The engine's Prometheus counters, read into ``metrics.jsonl`` before and after each phase (the suite's
shape, between phases) or around a whole run (``around_each_run``: a free run such as chat.py's).

Read where the records come together (the local runner or the master). Metrics are a bonus: a reading
that fails is logged, and the run goes on.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from locust import events
from locust.runners import WorkerRunner

from bench_tasks import metrics
from bench_tasks.records_file import METRICS_JSONL, JsonlWriter
from locustfiles.target import target


def read(environment, phase: str, when: str) -> None:
    """One reading of the engine's counters into metrics.jsonl ("before" or "after" ``phase``)."""
    try:
        server = target(environment)
        values = metrics.scrape(environment.host, server.profile, server.api_key)
        if values is None:
            return
        log = JsonlWriter(Path(environment.parsed_options.out) / METRICS_JSONL)
        # The profile's names say what each series is (and what its counter counts).
        log.write({"phase": phase, "when": when, "t": time.perf_counter(), "metrics": values,
                   "names": server.profile.metrics})
        log.close()
    except Exception as exc:  # noqa: BLE001
        logging.warning("llm-bench: could not read the engine's metrics: %s", exc)


def around_each_run(phase: str) -> None:
    """Read the counters when each run starts and when it stops, as the readings of ``phase``."""
    def before(environment, **_kwargs) -> None:
        if not isinstance(environment.runner, WorkerRunner):
            read(environment, phase, "before")

    def after(environment, **_kwargs) -> None:
        if not isinstance(environment.runner, WorkerRunner):
            read(environment, phase, "after")

    events.test_start.add_listener(before)
    events.test_stop.add_listener(after)
