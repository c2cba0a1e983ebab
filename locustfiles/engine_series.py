"""The engine's queue and cache every second during a run: ``engine_series.jsonl``.

Read where the records come together (the local runner, or the master), in a greenlet of its own
(``EngineSeries``, started and stopped with each run by llm_run.py):
never on a request's path. One GET of the profile's metrics path per second; only the lines of its
gauges (requests running, waiting, KV cache in use) are parsed. A line per reading: ``t`` (when the
answer came, on this process's perf_counter: the records' clock in a local run, the master's clock
in a distributed one), ``t_wall`` (the same in unix time, to place it when the records' clock is
another machine's), ``read_s`` (how long the GET took), ``runner`` (local or master) and the gauges
read (a gauge the engine does not serve is absent). A failed reading is skipped; the run goes on.

The answer's time, not the request's: llama.cpp renders /metrics in its compute loop, after the
batch it is computing (measured on SmolLM2 with one thread: a GET sent during a 1k-token paste's
6.3 s prompt batch came back when the batch ended, its gauges those of that moment).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import gevent
from locust.runners import MasterRunner

from bench_tasks import metrics, server
from bench_tasks.records_file import ENGINE_SERIES_JSONL, JsonlWriter
from locustfiles.target import Target

INTERVAL_S = 1.0
TIMEOUT_S = 2.0


class EngineSeries:
    """The run's reader of the engine's gauges (``environment.llm.series``): one greenlet while a run goes."""

    def __init__(self) -> None:
        self._greenlet: gevent.Greenlet | None = None

    def start(self, environment, target: Callable[[], Target]) -> None:
        """Read every second, if the engine's profile names gauges (``target`` resolves the server)."""
        self.stop()
        if not environment.host:
            return
        try:
            resolved = target()
        except Exception as exc:  # noqa: BLE001 - the users' own start reports a server that cannot be resolved
            logging.warning("llm-bench: the engine's queue and cache are not read: %s", exc)
            return
        names, path = metrics.gauge_names(resolved.profile), resolved.profile.metrics.get("path", "")
        if path and names:
            self._greenlet = gevent.spawn(_read_every_second, environment, path, names, resolved.api_key)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None


def _read_every_second(environment, path: str, names: dict[str, str], api_key: str) -> None:
    runner = "master" if isinstance(environment.runner, MasterRunner) else "local"  # the records' clock
    writer = JsonlWriter(Path(environment.parsed_options.out) / ENGINE_SERIES_JSONL)
    try:
        while True:
            before = time.perf_counter()
            try:
                text = server.get_text(environment.host, path, api_key=api_key, timeout_s=TIMEOUT_S)
            except Exception:  # noqa: BLE001 - a reading missed (refused, cut, odd): the next one may come
                text = None
            after = time.perf_counter()
            if text is not None:
                writer.write({"t": after, "t_wall": time.time(), "read_s": after - before, "runner": runner,
                              **metrics.gauges(text, names)})
            gevent.sleep(max(0.0, INTERVAL_S - (time.perf_counter() - before)))
    finally:
        writer.close()
