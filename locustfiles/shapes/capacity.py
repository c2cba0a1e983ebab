"""The capacity search's shape: the probe's phases, then a class of students per step, each judged against
the SLO as its records come in (where they come together: the local runner or the master).

``capacity.jsonl`` gets the search's options, what the probe measured and the model predicted, each
window's verdict (``extend`` while it cannot tell, ``step`` when it is final) and the result; the
progress line gets each verdict, and how long the search will still take. A locustfile subclasses it
with ``users`` = {"classroom": ..., "probe": ...} (capacity.py). The search hears every record where they
come together (the shape is one of the run's listeners: ``recorded``).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from bench_tasks import slo as slos
from bench_tasks.capacity.lines import probe_line, verdict_line
from bench_tasks.capacity.search import Search
from bench_tasks.progress_log import ProgressLog
from bench_tasks.records_file import CAPACITY_JSONL, PROGRESS_JSONL, JsonlWriter
from locustfiles.llm_run import LLMRun
from locustfiles.shapes.phased import PhasedShape


class CapacityShape(PhasedShape):
    abstract = True

    def coordinate(self, run: LLMRun, out: Path) -> Search:
        given = run.options
        search = given.search()
        self.progress = ProgressLog(out / PROGRESS_JSONL, [], run="search")
        self.log = JsonlWriter(out / CAPACITY_JSONL)
        self.log.write({"event": "search", "t": time.perf_counter(), "slo": given.slo.source,
                        "think_time": given.think_time.text(), "max_tokens": given.max_tokens,
                        "ignore_eos": given.ignore_eos, **asdict(search)})
        self.coordinator = None  # an earlier run's search says nothing about this one's progress
        return Search(search, given.slo, clock=time.perf_counter, on_enter=self._entered, on_take=self.progress.job,
                      on_verdict=self._judged, on_predict=self._predicted, think=given.think_time,
                      max_tokens=given.max_tokens)

    def idle_s(self) -> float:
        return self.run.options.think_time.max_s

    def tick(self):
        if self.coordinator is not None:
            self.coordinator.poll()  # the windows open and close by the clock, not only on a request
        return super().tick()

    def recorded(self, row: dict) -> None:
        if self.coordinator is not None:
            self.coordinator.record(row)

    def _entered(self, previous, phase) -> None:
        self.progress.phase(phase)
        if phase is None and self.coordinator is not None:
            capacity, bound, why = self.coordinator.result()
            self.log.write({"event": "end", "t": time.perf_counter(), "capacity": capacity, "bound": bound,
                            "why": why})
        self._eta()

    def _predicted(self, search: Search) -> None:
        """The probe is done: what it measured and what the model predicts, in capacity.jsonl and as a note."""
        event = {"event": "probe", "t": time.perf_counter(), "why": search.probe.why(),
                 "server": search.server and asdict(search.server), "capacity": None, "classes": []}
        if search.prediction is not None:
            event["capacity"] = search.prediction.capacity
            event["classes"] = [{"students": c.students, "meets": c.meets, "requests_per_s": c.requests_per_s,
                                 "response_s": c.response_s, **c.figures}
                                for _n, c in sorted(search.prediction.classes.items())]
        self.log.write(event)
        self.progress.note(probe_line(search))

    def _judged(self, step, figures: dict) -> None:
        # An unsure window goes on ("extend"); "step" is each window's final verdict.
        event = "extend" if figures["outcome"] == slos.UNSURE else "step"
        self.log.write({"event": event, "t": time.perf_counter(), "phase": step.window, "students": step.students,
                        "step": step.number, "attempt": step.attempt, "window_s": step.held_s, **figures})
        search = self.coordinator
        self.progress.note(verdict_line(search.slo, step.students, figures, again=step.attempt == 1,
                                        up_to_s=search.options.max_step_s))
        self._eta()

    def _eta(self) -> None:
        remaining = self.coordinator.remaining_s() if self.coordinator is not None else None
        if remaining is not None:
            self.progress.eta(remaining)
