"""The quick suite's shape: its phases in their fixed order (bench_tasks.suite), the engine's counters read
between them. A locustfile subclasses it with ``users`` for its scenarios (quick_suite.py: all five)."""

from __future__ import annotations

import time
from pathlib import Path

import gevent

from bench_tasks.progress_log import ProgressLog
from bench_tasks.records_file import PROGRESS_JSONL
from bench_tasks.suite import Coordinator, plan
from locustfiles import engine_counters
from locustfiles.llm_run import LLMRun
from locustfiles.shapes.phased import PhasedShape


class SuiteShape(PhasedShape):
    abstract = True

    def coordinate(self, run: LLMRun, out: Path) -> Coordinator:
        phases = plan(run.options.suite(tuple(self.users)))
        self.progress = ProgressLog(out / PROGRESS_JSONL, phases)
        return Coordinator(phases, clock=time.perf_counter, on_enter=self._between_phases, on_take=self.progress.job)

    def _between_phases(self, previous, phase) -> None:
        """Read the engine's counters after one phase and before the next, then open the next."""
        gevent.spawn(self._read_then_begin, previous, phase)

    def _read_then_begin(self, previous, phase) -> None:
        try:
            for when, which in (("after", previous), ("before", phase)):
                if which is not None:
                    engine_counters.read(self.run, which.name, when)
        finally:
            self.coordinator.begin()
            self.progress.phase(phase)
