"""Phases inside Locust: a LoadTestShape that follows a coordinator.

The shape runs where the coordinator lives (the local runner, or the master) and asks, every tick,
for as many users of the current phase's class as the phase needs. Users pull jobs (users/job_user.py).
When the coordinator is done and the engine's counters read for the last time, the shape ramps to
zero, waits past a worker report interval so every record reaches the master, and ends the run. Two
coordinators drive it: the quick suite's plan (shapes/suite.py) and the capacity search (shapes/capacity.py).

An exception in a shape's ``tick``, ``coordinate`` or ``reset_time`` (a subclass's too) fails the
run (failure.py) instead of silently killing Locust's shape greenlet; and every tick the shape
checks that the run still moves (activity.py): still for longer than bench_tasks.stall's limit,
the run fails, saying what it was waiting for. A worker that is lost has its jobs closed
(messaging.Ledger) and is named in ``lost-workers.jsonl``, by the name it gave as it joined.

A shape serves its coordinator through the run (``run.serve``, llm_run.py) when each run begins, and
is one of the run's listeners (llm_run.RunListener): it hears when the run stops, and each record.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import gevent
from locust import LoadTestShape
from locust.runners import MasterRunner

from bench_tasks import stall
from bench_tasks.progress_log import ProgressLog
from bench_tasks.records_file import LOST_WORKERS_JSONL, JsonlWriter
from locustfiles import failure
from locustfiles.llm_run import LLMRun, RunListener

# Locust workers report every 3 s (docs/locust.md#worker-report-interval): wait longer before stopping.
REPORT_WAIT_S = 3.5
# Locust asks a shape every second. A tick that would change nothing looks again this often until the
# second is nearly up, so a phase's end is acted on within 50 ms, not up to a second later (at 20 ms the
# quick suite's process, which also reads the streams, used about 1.1 s more CPU in 68 s).
LOOK_AGAIN_S = 0.05
TICK_S = 1.0
GUARDED = ("tick", "coordinate", "reset_time")


class Stalled(Exception):
    """The run has not moved for longer than bench_tasks.stall's limit."""


class PhasedShape(LoadTestShape, RunListener):
    """Subclasses set ``users`` (scenario -> User class) and build their coordinator in ``coordinate``."""

    abstract = True
    users: dict[str, type] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in GUARDED:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "guarded", False):
                setattr(cls, name, failure.guarded(name)(method))

    def __init__(self) -> None:
        super().__init__()
        self.coordinator = None  # this run's (None until the run starts, or when coordinate failed)
        self.progress: ProgressLog | None = None  # this run's progress.jsonl, set by coordinate
        self.stopped = False  # the run stopped: a start again (web UI) begins a new one
        self.finished_at: float | None = None
        self._running_class: type | None = None
        self._last_tick: tuple | None = None

    @failure.guarded("reset_time")
    def reset_time(self) -> None:
        # Locust calls this twice when a run starts (start_shape, then start): one coordinator per run.
        super().reset_time()
        if self.coordinator is not None and not self.coordinator.finished and not self.stopped:
            return
        run = self.run
        self.finished_at, self.stopped, self._running_class, self._last_tick = None, False, None, None
        run.begin()  # before this run's first file is opened (Locust's test_start comes later)
        self.coordinator = self.coordinate(run, Path(run.environment.parsed_options.out))
        if self.coordinator is not None:  # else coordinate failed, and so did the run
            run.serve(self.coordinator)

    @property
    def run(self) -> LLMRun:
        return self.runner.environment.llm

    def coordinate(self, run: LLMRun, out: Path):
        """This run's coordinator (it sets ``self.progress``, the run's ProgressLog)."""
        raise NotImplementedError

    def idle_s(self) -> float:
        """Seconds the workload is silent by design (a student thinking): added to the stall limit."""
        return 0.0

    def run_stops(self, run: LLMRun) -> None:
        self.stopped = True

    @failure.guarded("tick")
    def tick(self):
        """What Locust should run now: as soon as it differs from what runs, else after most of a second
        (Locust then sleeps the rest). A class switch is two ticks (the old class to zero users, then the
        new one), so a phase that changes the class starts within a second of the last one's end."""
        started = time.perf_counter()
        while True:
            target = self.target()
            if target is None or target != self.runner.shape_last_tick \
                    or time.perf_counter() - started >= TICK_S - 2 * LOOK_AGAIN_S:
                return target
            gevent.sleep(LOOK_AGAIN_S)

    def target(self):
        """The users Locust should run, as a tick's value (None: the run is over)."""
        if self.run.failure.failed:
            return self.runner.shape_last_tick or (0, 1)  # the failure is stopping the run: change nothing
        if self.coordinator is None:
            self.reset_time()
        coordinator = self.coordinator
        self._close_lost_workers()
        phase = coordinator.phase
        if phase is not None:
            self._check_progress(coordinator)
        if not coordinator.accepting:
            # The engine's counters are being read between phases: nobody new may start (a warm-up
            # would land in the wrong phase's window); the last phase's users idle meanwhile. After the
            # last phase the run waits for its "after" reading too (a run that ended first lost it).
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
            lost = len(self.run.desk.ledger.lost_workers) if self.run.desk is not None else 0
            self._last_tick = (phase.users, phase.users + 0.001 * lost, [user_class])
            return self._last_tick
        if self.finished_at is None:
            self.finished_at = time.perf_counter()
            self.progress.end()
        wait_s = REPORT_WAIT_S if isinstance(self.runner, MasterRunner) else 0.0
        if time.perf_counter() - self.finished_at < wait_s:
            return 0, 100, None
        return None

    def _check_progress(self, coordinator) -> None:
        read_timeout_s = self.run.options.read_timeout
        limit_s = stall.limit_s(read_timeout_s, self.idle_s())
        quiet_s = self.run.activity.quiet_s()
        if quiet_s <= limit_s:
            return
        try:
            raise Stalled(f"no progress for {quiet_s:.0f} s ({stall.explained(read_timeout_s, self.idle_s())}): "
                          f"{coordinator.waiting_on()}")
        except Stalled as exc:
            self.run.failure.fail(exc, f"the stall watchdog of {type(self).__name__}")

    def _close_lost_workers(self) -> None:
        desk = self.run.desk
        if desk is None:
            return
        for worker in self.runner.clients.missing:
            if worker.id in desk.ledger.lost_workers:
                continue
            event = desk.ledger.lose(worker.id, self.coordinator)
            logging.warning("llm-bench: worker %s (client host %s) was lost during %s; closed %d in-flight job(s)",
                            worker.id, event["client_host"] or "unknown", event["phase"] or "the end",
                            event["in_flight_jobs"])
            writer = JsonlWriter(Path(self.runner.environment.parsed_options.out) / LOST_WORKERS_JSONL)
            writer.write(event)
            writer.close()


class PolledShape(PhasedShape):
    """A coordinator that moves by the clock (its windows open and close on time, not only when a user asks)
    and hears every record where they come together: the capacity search's, the open loop's."""

    abstract = True

    def target(self):
        if self.coordinator is not None:
            self.coordinator.poll()
        return super().target()

    def recorded(self, row: dict) -> None:
        if self.coordinator is not None:
            self.coordinator.record(row)
