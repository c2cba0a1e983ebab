"""When this run last moved: a byte of an answer, a record, a job handed out or finished, a token
count answered (bench_tasks/stall.py says why these, and how long a run may stay still).

The shape's stall watchdog reads it where the coordinator lives; a worker's own quiet time rides
to the master with each stats report. Where the records come together, an ``alive`` line goes to
``progress.jsonl`` at most every ``ALIVE_S`` while the run moves, so the command line, which only
sees files, knows that a run streaming one long answer (no record for minutes) is not stuck.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import gevent
from locust import events
from locust.runners import WorkerRunner

from bench_tasks.records_file import PROGRESS_JSONL, JsonlWriter

REPORT_KEY = "llm_quiet_s"
ALIVE_S = 5.0

_last = time.perf_counter()
_alive: gevent.Greenlet | None = None


def note() -> None:
    global _last
    _last = time.perf_counter()


def quiet_s() -> float:
    """Seconds since the run last moved."""
    return time.perf_counter() - _last


def watched(chunks: Iterable) -> Iterator:
    """A stream's chunks as they come, each one noted (the chunks carry their own arrival stamps:
    noting after them touches no measurement)."""
    global _last
    for chunk in chunks:
        _last = time.perf_counter()
        yield chunk


def noted(call: Callable) -> Callable:
    """``call`` (a side request, e.g. counting tokens), noting when it has answered."""
    def noting(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        finally:
            note()
    return noting


def _write_alive(path: Path) -> None:
    written = _last
    while True:
        gevent.sleep(ALIVE_S)
        if _last > written:
            written = _last
            writer = JsonlWriter(path)
            writer.write({"event": "alive", "t": time.perf_counter()})
            writer.close()


@events.test_start.add_listener
def _run_starts(environment, **_kwargs) -> None:
    global _alive
    note()
    if isinstance(environment.runner, WorkerRunner) or (_alive is not None and not _alive.dead):
        return
    _alive = gevent.spawn(_write_alive, Path(environment.parsed_options.out) / PROGRESS_JSONL)


@events.test_stop.add_listener
def _run_stops(environment, **_kwargs) -> None:
    if _alive is not None:
        _alive.kill(block=False)


@events.report_to_master.add_listener
def _report(client_id, data, **_kwargs) -> None:
    data[REPORT_KEY] = quiet_s()


@events.worker_report.add_listener
def _receive(client_id, data, **_kwargs) -> None:
    global _last
    quiet = data.get(REPORT_KEY)
    if isinstance(quiet, (int, float)):
        _last = max(_last, time.perf_counter() - quiet)
