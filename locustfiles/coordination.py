"""Phases inside Locust: a LoadTestShape that follows a coordinator, and SuiteUser.

The shape runs where the coordinator lives (the local runner, or the master) and asks, every
tick, for as many users of the current phase's class as the phase needs. Users pull jobs; a
user with nothing to do waits in ``wait_time``, never inside a task, so stopping is clean. When
the coordinator is done the shape ramps to zero, waits past a worker report interval so every
record reaches the master, and ends the run.

Two coordinators drive it: the quick suite's plan (``SuiteShape``, bench_tasks.suite) and the
capacity search (``CapacityShape``, bench_tasks.capacity), whose steps are classes of students
judged against an SLO as their records come in.

An exception in a shape's ``tick``, ``coordinate`` or ``reset_time`` (a subclass's too) fails the
run (failure.py) instead of silently killing Locust's shape greenlet; and every tick the shape
checks that the run still moves (activity.py): still for longer than bench_tasks.stall's limit,
the run fails, saying what it was waiting for.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

import gevent
from locust import LoadTestShape, task
from locust.runners import MasterRunner

from bench_tasks import metrics, stall
from bench_tasks import slo as slos
from bench_tasks.capacity import Search, SearchOptions, parse_start
from bench_tasks.classroom import parse_think_time
from bench_tasks.records_file import (CAPACITY_JSONL, LOST_WORKERS_JSONL, METRICS_JSONL, PROGRESS_JSONL,
                                      JsonlWriter)
from bench_tasks.prompt import parse_size
from bench_tasks.suite import SCENARIOS, Coordinator, Job, SuiteOptions, plan
from locustfiles import activity, failure, messaging
from locustfiles.llm_user import LLMUser, target
from locustfiles.sink import sink

# Locust workers report every 3 s (docs/locust.md#worker-report-interval): wait longer before stopping.
REPORT_WAIT_S = 3.5
GUARDED = ("tick", "coordinate", "reset_time")


class Stalled(Exception):
    """The run has not moved for longer than bench_tasks.stall's limit."""


def suite_options(parsed_options, scenarios: tuple[str, ...]) -> SuiteOptions:
    only = tuple(s for s in parsed_options.only.split(",") if s.strip() in scenarios)
    return SuiteOptions(
        runs=parsed_options.runs,
        sizes=tuple(parse_size(s) for s in parsed_options.sizes.split(",") if s.strip()),
        needle_sizes=tuple(parse_size(s) for s in parsed_options.needle_sizes.split(",") if s.strip()),
        bursts=tuple(int(s) for s in parsed_options.bursts.split(",") if s.strip()),
        only=tuple(s.strip() for s in only),
    )


class PhasedShape(LoadTestShape):
    """The one way phases are driven: a coordinator says which phase runs and how many of which users
    it needs; users pull jobs from it (locally, or over messages from workers). Subclasses set
    ``users`` (scenario -> User class) and build their coordinator in ``coordinate``."""

    abstract = True
    users: dict[str, type] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in GUARDED:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "guarded", False):
                setattr(cls, name, failure.guarded(name)(method))

    @failure.guarded("reset_time")
    def reset_time(self) -> None:
        # Locust calls this twice when a run starts (start_shape, then start): one coordinator per run.
        super().reset_time()
        current = getattr(self, "coordinator", None)
        if current is not None and not current.finished and not getattr(self, "stopped", False):
            return
        environment = self.runner.environment
        self.finished_at: float | None = None
        self.stopped = False
        self._running_class: type | None = None
        self._last_tick: tuple | None = None
        sink().start_new_run()  # before this run's first file is opened (test_start comes later)
        activity.note()
        self.coordinator = self.coordinate(environment, Path(environment.parsed_options.llm_out))
        if self.coordinator is None:
            return  # coordinate failed, and so did the run
        messaging.serve(environment, self.coordinator)
        if current is None:
            environment.events.test_stop.add_listener(self._on_test_stop)

    @failure.guarded("coordinate")
    def coordinate(self, environment, out: Path):
        """This run's coordinator (it sets ``self.progress``, the run's ProgressLog)."""
        raise NotImplementedError

    def idle_s(self) -> float:
        """Seconds the workload is silent by design (a student thinking): added to the stall limit."""
        return 0.0

    def _on_test_stop(self, **_kwargs) -> None:
        self.stopped = True  # a run started again (web UI) begins a new suite

    @failure.guarded("tick")
    def tick(self):
        if failure.failed():
            return self.runner.shape_last_tick or (0, 1)  # the failure is stopping the run: change nothing
        coordinator = getattr(self, "coordinator", None)
        if coordinator is None:
            self.reset_time()
            coordinator = self.coordinator
        self._close_lost_workers()
        phase = coordinator.phase
        if phase is not None:
            self._check_progress(coordinator)
        if phase is not None and not coordinator.accepting:
            # The engine's counters are being read between phases: nobody new may start (a warm-up
            # would land in the wrong phase's window); the last phase's users idle meanwhile.
            return self._last_tick or (0, 100, None)
        if phase is not None:
            user_class = self.users[phase.scenario]
            if user_class is not self._running_class:
                # Locust keeps users of a dropped class while the count stays the same, so a new
                # class starts from zero users.
                if self.get_current_user_count() > 0:
                    return 0, 100, None
                self._running_class = user_class
            # A changed spawn rate makes Locust dispatch again, replacing a dead worker's users.
            self._last_tick = (phase.users, phase.users + 0.001 * len(messaging.ledger.lost_workers), [user_class])
            return self._last_tick
        if self.finished_at is None:
            self.finished_at = time.perf_counter()
            self.progress.end()
        wait_s = REPORT_WAIT_S if isinstance(self.runner, MasterRunner) else 0.0
        if time.perf_counter() - self.finished_at < wait_s:
            return 0, 100, None
        return None

    def _check_progress(self, coordinator) -> None:
        read_timeout_s = self.runner.environment.parsed_options.read_timeout
        limit_s = stall.limit_s(read_timeout_s, self.idle_s())
        quiet_s = activity.quiet_s()
        if quiet_s <= limit_s:
            return
        try:
            raise Stalled(f"no progress for {quiet_s:.0f} s ({stall.explained(read_timeout_s, self.idle_s())}): "
                          f"{coordinator.waiting_on()}")
        except Stalled as exc:
            failure.fail(self.runner.environment, exc, f"the stall watchdog of {type(self).__name__}")

    def _close_lost_workers(self) -> None:
        if not isinstance(self.runner, MasterRunner):
            return
        for worker in self.runner.clients.missing:
            if worker.id in messaging.ledger.lost_workers:
                continue
            event = messaging.ledger.lose(worker.id, self.coordinator)
            logging.warning("llm-bench: worker %s (client host %s) was lost during %s; closed %d in-flight job(s)",
                            worker.id, event["client_host"] or "unknown", event["phase"] or "the end",
                            event["in_flight_jobs"])
            writer = JsonlWriter(Path(self.runner.environment.parsed_options.llm_out) / LOST_WORKERS_JSONL)
            writer.write(event)
            writer.close()


class SuiteShape(PhasedShape):
    """The quick suite's phases in their fixed order; subclasses set ``users`` for their scenarios."""

    abstract = True

    def coordinate(self, environment, out: Path) -> Coordinator:
        phases = plan(suite_options(environment.parsed_options, tuple(self.users)))
        self.progress = ProgressLog(out / PROGRESS_JSONL, phases)
        return Coordinator(phases, clock=time.perf_counter, on_enter=self._between_phases, on_take=self.progress.job)

    def _between_phases(self, previous, phase) -> None:
        """Read the engine's counters after one phase and before the next, then open the next."""
        gevent.spawn(self._scrape_then_begin, previous, phase)

    def _scrape_then_begin(self, previous, phase) -> None:
        environment = self.runner.environment
        try:
            for when, which in (("after", previous), ("before", phase)):
                if which is not None:
                    read_engine_counters(environment, which.name, when)
        finally:
            self.coordinator.begin()
            self.progress.phase(phase)


class CapacityShape(PhasedShape):
    """The capacity search: the probe's phases, then a class of students per step, judged against the SLO as
    its records come in (where they come together: the local runner or the master). Subclasses set
    ``users`` = {"classroom": ..., "probe": ...}."""

    abstract = True

    def coordinate(self, environment, out: Path) -> Search:
        opts = environment.parsed_options
        think = parse_think_time(opts.think_time)
        options = SearchOptions(start=parse_start(opts.start_students), step=opts.step,
                                max_students=opts.max_students, resolution=opts.resolution, step_s=opts.step_s,
                                min_requests=opts.min_requests,
                                settle_s=think.max_s if opts.settle_s is None else opts.settle_s,
                                max_step_s=opts.max_step_s)
        self.progress = ProgressLog(out / PROGRESS_JSONL, [], run="search")
        self.log = JsonlWriter(out / CAPACITY_JSONL)
        self.log.write({"event": "search", "t": time.perf_counter(), "slo": opts.slo, "think_time": opts.think_time,
                        "max_tokens": opts.max_tokens, "ignore_eos": opts.ignore_eos, **asdict(options)})
        if not hasattr(self, "coordinator"):
            sink().listeners.append(self._record)
        self.coordinator = None  # an earlier run's search says nothing about this one's progress
        return Search(options, slos.parse(opts.slo), clock=time.perf_counter, on_enter=self._entered,
                      on_take=self.progress.job, on_verdict=self._judged, on_predict=self._predicted, think=think,
                      max_tokens=opts.max_tokens)

    def idle_s(self) -> float:
        return parse_think_time(self.runner.environment.parsed_options.think_time).max_s

    def _record(self, row: dict) -> None:
        if self.coordinator is not None:
            self.coordinator.record(row)

    def _entered(self, previous, phase) -> None:
        self.progress.phase(phase)
        search = getattr(self, "coordinator", None)
        if phase is None and search is not None:
            capacity, bound, why = search.result()
            self.log.write({"event": "end", "t": time.perf_counter(), "capacity": capacity, "bound": bound,
                            "why": why})
        self._eta()

    def _predicted(self, search) -> None:
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
        self.progress.note(slos.verdict_line(search.slo, step.students, figures, again=step.attempt == 1,
                                             up_to_s=search.options.max_step_s))
        self._eta()

    def _eta(self) -> None:
        search = getattr(self, "coordinator", None)
        remaining = search.remaining_s() if search is not None else None
        if remaining is not None:
            self.progress.eta(remaining)

    def tick(self):
        if getattr(self, "coordinator", None) is not None:
            self.coordinator.poll()  # the windows open and close by the clock, not only on a request
        return super().tick()


def probe_line(search) -> str:
    """``probe: 4 slots, 100 tok/s per request ...; the model predicts 24 students (TTFT p95 0.92 s; 25: 1.2 s)``."""
    server, prediction = search.server, search.prediction
    if server is None:
        return (f"probe: {search.probe.why() or 'too little measured'}; the search climbs from "
                f"{search.ladder.start} students ({search.options.step}) instead")
    slots = f"{server.slots} slots" if search.probe.slots else f"no slot limit seen up to {search.probe.max_burst} at once"
    busy = min(server.slots, 8)
    prefill = f"prefill {server.prefill_tps:.0f} tok/s" if server.prefill_tps else "prefill too fast to see"
    answers = sorted(server.answer_tokens)
    parts = [f"probe: {slots}, decode {1 / server.token_s:.0f} tok/s per request alone "
             f"({1 / server.token_time_s(busy):.0f} with {busy} at once), {prefill}, first token "
             f"{server.first_token_s:.3f} s, answers {answers[0]}-{answers[-1]} tokens "
             f"(median {answers[len(answers) // 2]})"]
    knee = prediction.capacity
    shown = [prediction.classes[n] for n in (knee, knee + 1) if n in prediction.classes]
    figures = "; ".join(f"{c.students}: " + ", ".join(f"{g.label} {c.figures[g.figure]:.3g} {g.unit}"
                                                       for g in search.slo.goals if c.figures[g.figure] is not None)
                        for c in shown)
    parts.append(f"the model predicts {knee} students ({figures}); the search starts at {search.ladder.start}")
    return "; ".join(parts)


def read_engine_counters(environment, phase: str, when: str) -> None:
    """One reading of the engine's Prometheus counters into metrics.jsonl ("before" or "after" a phase).
    Metrics are a bonus: a failure is logged and the run goes on."""
    try:
        server_target = target(environment)
        values = metrics.scrape(environment.host, server_target.profile, server_target.api_key)
        if values is None:
            return
        log = JsonlWriter(Path(environment.parsed_options.llm_out) / METRICS_JSONL)
        # The profile's names say what each series is (and what its counter counts).
        log.write({"phase": phase, "when": when, "t": time.perf_counter(), "metrics": values,
                   "names": server_target.profile.metrics})
        log.close()
    except Exception as exc:  # noqa: BLE001
        logging.warning("llm-bench: could not read the engine's metrics: %s", exc)


class ProgressLog:
    """``progress.jsonl``: the plan, each phase as it opens and each job as it is handed out, for
    the command line's progress line. Once per phase and per job: never per event."""

    def __init__(self, path: Path, phases, run: str = "suite") -> None:
        self.writer = JsonlWriter(path)
        self._write("suite", run=run,
                    phases=[{"phase": p.name, "expected_records": p.expected_records} for p in phases])

    def phase(self, phase) -> None:
        if phase is not None:
            self._write("phase", phase=phase.name)

    def job(self, job: Job) -> None:
        self._write("job", phase=job.phase, round=job.round, index=job.index)

    def note(self, line: str) -> None:
        """A line the progress output prints as it is (the capacity search's verdict on a step)."""
        self._write("note", line=line)

    def eta(self, remaining_s: float) -> None:
        """How long the run will still take, as far as it can tell now (the capacity search's model)."""
        self._write("eta", remaining_s=remaining_s)

    def end(self) -> None:
        self._write("end")

    def _write(self, event: str, **fields) -> None:
        self.writer.write({"event": event, "t": time.perf_counter(), **fields})


class SuiteUser(LLMUser):
    """Pulls jobs of its scenario; subclasses implement ``run_job``."""

    abstract = True
    scenario = ""

    def wait_time(self) -> float:
        return self._wait_s

    def on_start(self) -> None:
        super().on_start()
        self._wait_s = 0.0
        self._pending: Job | None = None
        self.user_id = messaging.user_id(self)

    @task
    def work(self) -> None:
        job = self._pending or messaging.work(self.environment).take(self.scenario, self.user_id)
        self._pending = None
        if job is None:
            self._wait_s = 0.05
            return
        if job.release_at is not None:
            delay = messaging.to_local(self.environment, job.release_at) - time.perf_counter()
            if delay > 0.0005:
                self._pending, self._wait_s = job, delay  # sleep until the release in wait_time
                return
        self._wait_s = 0.0
        try:
            self.run_job(job)
        finally:
            messaging.work(self.environment).done(job, self.user_id)

    def run_job(self, job: Job) -> None:
        raise NotImplementedError

    def job_record(self, job: Job, **labels):
        return self.new_record(job.scenario, job.phase, round=job.round, concurrency=job.concurrency, **labels)


__all__ = ["SCENARIOS", "CapacityShape", "SuiteShape", "SuiteUser"]
