"""The open loop's shape: one schedule at ``--rate``, or a sweep of ``--rates`` (``auto``: floods to saturation
first), each request handed to a user when it falls due, on this process's clock (the master's, in a
distributed run; bench_tasks.open_loop).

``sweep.jsonl`` gets the plan's options and SLO (``sweep``), each step as it ends (``step``: a flood's
rate, a window's requests and the ones never sent) and the result (``end``: the rates offered, the
floods' rates and the saturation rate); the progress line gets each step as a note. A window request
never sent (every user busy until the drain limit) is recorded here, where the records come together,
with the error class ``not_sent`` and its due time. The shape hears every record (a flood counts its
failures). A locustfile subclasses it with ``users`` = {"rate": ...} (rate.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path

from bench_tasks.open_loop import OpenLoop, unsent_fields
from bench_tasks.progress_log import ProgressLog
from bench_tasks.record import Record
from bench_tasks.records_file import PROGRESS_JSONL, SWEEP_JSONL, JsonlWriter
from bench_tasks.sweep import OneRate, RateOptions, Sweep
from locustfiles.llm_run import LLMRun
from locustfiles.shapes.phased import PolledShape

START_DELAY_S = 2.0  # the first schedule starts this much later: the pool spawns and warms up


class RateShape(PolledShape):
    abstract = True

    def coordinate(self, run: LLMRun, out: Path) -> OpenLoop:
        given = run.options
        options = given.open_loop()
        self.plan = OneRate(options) if isinstance(options, RateOptions) else Sweep(options)
        self.progress = ProgressLog(out / PROGRESS_JSONL, [], run="sweep")
        self.log = JsonlWriter(out / SWEEP_JSONL)
        self.log.write({"event": "sweep", "t": time.perf_counter(), "slo": given.slo and given.slo.source,
                        "max_tokens": given.max_tokens, "ignore_eos": given.ignore_eos,
                        **asdict(options), "arrivals": options.arrivals.text})
        self.coordinator = None
        return OpenLoop(self.plan, clock=time.perf_counter, max_in_flight=options.max_in_flight,
                        on_enter=self._entered, on_unsent=self._unsent, on_step=self._stepped,
                        start_delay_s=START_DELAY_S)

    def _entered(self, previous, phase) -> None:
        self.progress.phase(phase)
        if phase is None and self.coordinator is not None:
            result = self.plan.result() if isinstance(self.plan, Sweep) else {}
            if result.get("floods"):  # JSON's keys are text
                result["floods"] = {str(in_flight): rate for in_flight, rate in result["floods"].items()}
            self.log.write({"event": "end", "t": time.perf_counter(), **result})

    def _stepped(self, step) -> None:
        summary = step.summary()
        self.log.write({"event": "step", "t": time.perf_counter(), **summary})
        if "answers_rps" in summary:
            rate = summary["answers_rps"]
            self.progress.note(f"{summary['phase']}: {'no answer' if rate is None else f'{rate:.3g} answers/s'}")
        else:
            unsent = f", {summary['not_sent']} never sent" if summary["not_sent"] else ""
            self.progress.note(f"{summary['phase']}: {summary['window']} requests in its window{unsent}")

    def _unsent(self, job) -> None:
        """A window request never sent: its record, where the records come together (due on this clock)."""
        run = self.run
        record = Record(user=type(self).__name__, client_host=run.sink.client_host, client_pid=os.getpid(),
                        setup=run.options.setup, run_mark=run.options.mark,
                        mark_repeated=run.options.repeat_mark is not None, **unsent_fields(job, job.release_at))
        run.sink.add(record.to_dict())
