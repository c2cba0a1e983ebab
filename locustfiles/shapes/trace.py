"""A trace replayed on its own times: the open loop (bench_tasks.open_loop) with the trace's one step
(bench_tasks.traffic.replay), users added as its requests fall due. A locustfile subclasses it with
``users`` = {"rate": TraceUser} (trace.py).

The trace is checked whole (Trace.open) when the run begins, unless llm-bench's check did it (--trace-summary);
its requests become jobs a lead before they are due, the first one ``START_DELAY_S`` after the run begins (the
first users spawn, warm up and measure the server's tokenizer meanwhile). A job not sent within the open
loop's drain limit is recorded as ``not_sent``.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from bench_tasks.open_loop import SCENARIO, OpenLoop, unsent_fields
from bench_tasks.progress_log import ProgressLog
from bench_tasks.record import Record
from bench_tasks.records_file import PROGRESS_JSONL
from bench_tasks.traffic.replay import PHASE, TracePlan, opened
from locustfiles.llm_run import LLMRun
from locustfiles.shapes.phased import PhasedShape
from locustfiles.users.traffic import OwnTraffic

START_DELAY_S = 3.0


class TraceShape(PhasedShape):
    abstract = True
    plan: TracePlan | None = None

    def coordinate(self, run: LLMRun, out: Path) -> OpenLoop:
        given = run.options
        if not given.trace:
            raise ValueError("no trace to replay: give --trace FILE (llm-bench run trace FILE hands it)")
        trace = opened(given.trace, given.block_tokens, given.trace_summary)
        run.state(OwnTraffic).trace = trace  # this process's users replay the same, unread again
        self.plan = TracePlan(trace, given.speed, given.requests)
        self.progress = ProgressLog(out / PROGRESS_JSONL, [SimpleNamespace(name=PHASE,
                                                                           expected_records=self.plan.requests)])
        return OpenLoop(self.plan, clock=time.perf_counter, on_enter=self._entered, on_take=self.progress.job,
                         on_unsent=self._unsent, start_delay_s=START_DELAY_S)

    def _entered(self, _previous, phase) -> None:
        self.progress.phase(phase)

    def idle_s(self) -> float:
        """The longest the trace may leave the server idle by design: at most its span."""
        return self.plan.trace.summary.span_s / self.plan.speed if self.plan is not None else 0.0

    def target(self):
        if self.coordinator is not None:
            self.coordinator.poll()  # jobs fall due by the clock, not only when a user asks
        return super().target()

    def _unsent(self, job) -> None:
        given = self.run.options
        record = Record(scenario=SCENARIO, setup=given.setup, run_mark=given.mark,
                        client_host=self.run.sink.client_host)
        self.run.sink.add({**record.to_dict(), **unsent_fields(job, job.release_at)})
