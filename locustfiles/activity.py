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

from bench_tasks.records_file import PROGRESS_JSONL, JsonlWriter

REPORT_KEY = "llm_quiet_s"
ALIVE_S = 5.0


class Activity:
    """A run's last move (``last``, on perf_counter); the run's ``environment.llm.activity``."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self._alive: gevent.Greenlet | None = None

    def note(self) -> None:
        self.last = time.perf_counter()

    def quiet_s(self) -> float:
        """Seconds since the run last moved."""
        return time.perf_counter() - self.last

    def watched(self, chunks: Iterable) -> Iterator:
        """A stream's chunks as they come, each one noted (the chunks carry their own arrival stamps:
        noting after them touches no measurement)."""
        for chunk in chunks:
            self.last = time.perf_counter()
            yield chunk

    def noted(self, call: Callable) -> Callable:
        """``call`` (a side request, e.g. counting tokens), noting when it has answered."""
        def noting(*args, **kwargs):
            try:
                return call(*args, **kwargs)
            finally:
                self.note()
        return noting

    def heard(self, quiet_s) -> None:
        """A worker's report: it last moved ``quiet_s`` ago."""
        if isinstance(quiet_s, (int, float)):
            self.last = max(self.last, time.perf_counter() - quiet_s)

    def start_alive(self, out: Path) -> None:
        """Where the records come together: an ``alive`` line in progress.jsonl while the run moves."""
        if self._alive is None or self._alive.dead:
            self._alive = gevent.spawn(self._write_alive, out / PROGRESS_JSONL)

    def stop_alive(self) -> None:
        if self._alive is not None:
            self._alive.kill(block=False)

    def _write_alive(self, path: Path) -> None:
        written = self.last
        while True:
            gevent.sleep(ALIVE_S)
            if self.last > written:
                written = self.last
                writer = JsonlWriter(path)
                writer.write({"event": "alive", "t": time.perf_counter()})
                writer.close()
