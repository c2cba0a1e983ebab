"""The open loop: requests handed to users as they fall due, whatever the server does.

A step offers one schedule (``bench_tasks.arrivals``: seconds from the step's start). Its jobs become
known ``lead_s`` before they are due (the coordinator's clock: the master's in a distributed run); a
user asks for one (``take``), is handed the earliest job not taken yet with its due time in
``release_at``, sleeps until then (as a burst's users wait for their release) and sends. A job
due while every user is busy waits for one and goes late; the pool grows (``users``: the jobs in
flight, those known and not taken, and enough idle users to catch the next jobs within the lead) up to
``max_in_flight``. Jobs are never paced per user, so no two users share a rhythm (Locust's
``constant_throughput`` users fire together and fall behind without a word); every record keeps when
its request was due, and the figures timed from then (``stamp_due``).

A step's jobs are labelled by when they are due: ``settle-NAME`` (before ``settle_s``), ``NAME`` (the
measured window: from ``settle_s`` until ``window_s`` have passed and ``min_requests`` are due, or the
whole schedule when ``window_s`` is None) and, with ``keep_load``, ``drain-NAME``: the schedule goes on
after the window so that the window's last requests are answered under the same load, until every one
of them has been answered. A window job not taken ``drain_limit_s`` after the window's end is never sent:
``on_unsent`` gets it (the run records it with the error class ``not_sent``); drain jobs left then are
dropped unrecorded (they measure nothing). The step is over when every window job was answered or
dropped.

A ``Flood`` step keeps ``in_flight`` requests going, each sent as the last was answered (a closed loop,
``flood-N``): after a first round it times ``min_requests`` answers over at least ``window_s`` and
gives their rate (times the share of its records that succeeded, from ``record``: the run's records as
they come together), the most the server answers with that many requests in hand.

``OpenLoop`` runs a plan's steps (``bench_tasks.sweep``) behind the suite's users' protocol (``take``,
``done``, ``forget``, ``waiting_on``, ``phase``), clock injected, so the same messages carry it to
workers; ``start_delay_s`` holds the first schedule back while the pool it asks for spawns and warms up
(a run at one rate has no settle to absorb it). Pure: no Locust.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from bench_tasks.errors import NOT_SENT
from bench_tasks.record import Record
from bench_tasks.suite import RELEASE_LEAD_S, Job, Phase

SCENARIO = "rate"
LEAD_S = RELEASE_LEAD_S  # a job is known this long before it is due: time for an idle user to ask and hear
POLL_S = 0.05  # how often an idle user asks for a job (locustfiles/users/job_user.py's IDLE_S)
LATE_S = 0.005  # a request sent later than this after it was due went late
DRAIN_LIMIT_S = 30.0  # a window job not sent this long after the window's end never will be
MAX_IN_FLIGHT = 256
SETTLE, WINDOW, DRAIN = "settle", "window", "drain"


def rate_label(rate_rps: float) -> str:
    """``4``, ``0.5``, ``12.5``: as the phase names and tables write a rate."""
    return f"{rate_rps:g}"


def window_name(rate_rps: float) -> str:
    return f"rate-{rate_label(rate_rps)}"


def part_name(window: str, part: str) -> str:
    """The records' phase of a step's part: ``settle-rate-4``, ``rate-4``, ``drain-rate-4``."""
    return window if part == WINDOW else f"{part}-{window}"


def flood_name(in_flight: int) -> str:
    return f"flood-{in_flight}"


class Step:
    """One schedule offered: its jobs, labelled settle, window or drain by when they are due."""

    def __init__(self, name: str, times: Iterable[float], offered_rps: float | None = None, *, settle_s: float = 0.0,
                 window_s: float | None = None, min_requests: int = 1, keep_load: bool = False,
                 drain_limit_s: float = DRAIN_LIMIT_S, lead_s: float = LEAD_S) -> None:
        self.name = name
        self.offered_rps = offered_rps
        self.settle_s, self.window_s, self.min_requests = settle_s, window_s, min_requests
        self.keep_load, self.drain_limit_s, self.lead_s = keep_load, drain_limit_s, lead_s
        self._times: Iterator[float] = iter(times)
        self._next: float | None = None  # the next offset, read and not yet made a job
        self._last_offset = 0.0
        self.started: float | None = None
        self.number = 0  # the plan's step number (1-based), the records' ``round``
        self.pending: deque[Job] = deque()  # known (due within the lead, or late) and not taken yet
        self.issued = 0  # jobs made known so far
        self.window_jobs = 0
        self.window_end: float | None = None  # the due time that closed the window (or the last one's)
        self.exhausted = False  # no job will be made known any more
        self.outstanding: dict[str, int] = {SETTLE: 0, WINDOW: 0, DRAIN: 0}  # taken, not answered yet
        self.unsent: list[Job] = []  # window jobs dropped at the drain limit
        self.dropped = 0  # settle and drain jobs dropped unrecorded
        self.answered_s: list[float] = []  # due to answer (the coordinator's clock), to size the pool

    # -- time --
    def begin(self, now: float, number: int) -> None:
        self.started, self.number = now + self.lead_s, number  # the first job can be heard of before it is due

    @property
    def window_start(self) -> float:
        return self.started + self.settle_s

    def part(self, now: float) -> str:
        if now < self.window_start:
            return SETTLE
        return WINDOW if self.window_end is None or now < self.window_end else DRAIN

    def advance(self, now: float) -> None:
        """Make known every job due by ``now + lead_s``."""
        while not self.exhausted:
            if self._next is None:
                self._next = next(self._times, None)
                if self._next is None:
                    self._close(self.started + self._last_offset)
                    self.exhausted = True
                    return
            due = self.started + self._next
            if due > now + self.lead_s:
                return
            self._last_offset, self._next = self._next, None
            part = self._label(due)
            if part is None:
                self.exhausted = True
                return
            self.issued += 1
            self.pending.append(Job(SCENARIO, part_name(self.name, part), self.number, self.issued, release_at=due,
                                    offered_rps=self.offered_rps))

    def _label(self, due: float) -> str | None:
        if due < self.window_start:
            return SETTLE
        if self.window_end is None:
            if self.window_s is None or due < self.window_start + self.window_s or self.window_jobs < self.min_requests:
                self.window_jobs += 1
                return WINDOW
            self._close(due)
        return DRAIN if self.keep_load and not self.over else None

    def _close(self, due: float) -> None:
        if self.window_end is None:
            self.window_end = due

    # -- the users --
    def take(self, now: float) -> Job | None:
        self.advance(now)
        if not self.pending:
            return None
        job = self.pending.popleft()
        self.outstanding[_part_of(job)] += 1
        return job

    def done(self, job: Job, now: float) -> None:
        part = _part_of(job)
        if self.outstanding[part] > 0:
            self.outstanding[part] -= 1
            if job.release_at is not None:
                self.answered_s.append(now - job.release_at)

    def drop(self, now: float) -> list[Job]:
        """At the drain limit: the window's jobs not taken yet will never be sent."""
        if self.window_end is None or now < self.window_end + self.drain_limit_s:
            return []
        lost = [job for job in self.pending if _part_of(job) == WINDOW]
        self.dropped += len(self.pending) - len(lost)
        self.pending.clear()
        self.unsent += lost
        return lost

    @property
    def over(self) -> bool:
        """Every window job answered or dropped."""
        return (self.window_end is not None and self.outstanding[WINDOW] == 0
                and not any(_part_of(job) == WINDOW for job in self.pending))

    def users(self, max_in_flight: int, poll_s: float = POLL_S) -> int:
        """The pool this step needs now: its jobs in flight and those known, and enough idle users to
        catch the jobs that fall due within a lead and a poll."""
        rate = self.offered_rps or 0.0
        spare = math.ceil(rate * (self.lead_s + poll_s)) + 1
        return min(max_in_flight, sum(self.outstanding.values()) + len(self.pending) + spare)

    def expected_users(self, rate_rps: float, answer_s: float | None) -> int:
        """The pool a rate needs by Little's law, had its answers taken ``answer_s`` from due to end."""
        in_flight = rate_rps * ((answer_s or 0.0) + self.lead_s + POLL_S)
        return math.ceil(1.5 * in_flight) + 1

    def summary(self) -> dict:
        """What the step did, for the run's log (sweep.jsonl's ``step`` event)."""
        return {"phase": self.name, "step": self.number, "offered_rps": self.offered_rps, "due": self.issued,
                "window": self.window_jobs, "window_start": self.window_start, "window_end": self.window_end,
                "not_sent": len(self.unsent), "dropped": self.dropped}

    def waiting_on(self, now: float) -> str:
        late = sum(1 for job in self.pending if job.release_at < now)
        return (f"{sum(self.outstanding.values())} request(s) in flight, {late} due and not sent yet"
                + ("" if self.window_end is None else f", {self.outstanding[WINDOW]} of the window's unanswered"))


def _part_of(job: Job) -> str:
    for part in (SETTLE, DRAIN):
        if job.phase.startswith(part + "-"):
            return part
    return WINDOW


class Flood:
    """``in_flight`` requests kept going, each sent as the last was answered; the answers' rate after a
    first round, by Little's law: with N requests always in flight, N over the mean time each took from
    being handed out to its answer. Not counted over a window, whose ends would cut the answers where
    they come in lumps: requests that started together end together, round after round."""

    def __init__(self, in_flight: int, min_requests: int, window_s: float) -> None:
        self.in_flight, self.min_requests, self.window_s = in_flight, min_requests, window_s
        self.name = flood_name(in_flight)
        self.number = 0
        self.handed_at: dict[int, float] = {}  # job index -> when it was handed out, while in flight
        self.answers = 0
        self.first_timed: float | None = None
        self.took_s: list[float] = []  # after the first round: each answer's time from hand-out
        self.outcomes = {True: 0, False: 0}  # its records, as they arrive (``record``): succeeded or not
        self.closed = False

    @property
    def outstanding(self) -> int:
        return len(self.handed_at)

    def begin(self, now: float, number: int) -> None:
        self.number = number

    def part(self, now: float) -> str:
        return WINDOW

    def take(self, now: float) -> Job | None:
        if self.closed or self.outstanding >= self.in_flight:
            return None
        index = self.answers + self.outstanding + 1
        self.handed_at[index] = now
        return Job(SCENARIO, self.name, self.number, index)

    def done(self, job: Job, now: float) -> None:
        handed = self.handed_at.pop(job.index, None)
        if handed is None:
            return
        self.answers += 1
        if self.answers <= self.in_flight:  # the first round started together: not steady yet
            return
        self.first_timed = now if self.first_timed is None else self.first_timed
        self.took_s.append(now - handed)
        if len(self.took_s) >= self.min_requests and now - self.first_timed >= self.window_s:
            self.closed = True

    def drop(self, now: float) -> list[Job]:
        return []

    @property
    def over(self) -> bool:
        return self.closed and self.outstanding == 0

    def record(self, row: dict) -> None:
        if row.get("phase") == self.name:
            self.outcomes[bool(row.get("ok"))] += 1

    def answers_rps(self) -> float | None:
        """N over the timed answers' mean time, times the share of its records (those arrived) that
        succeeded: a request that failed at once is no answer (None before any answer)."""
        if not self.took_s:
            return None
        mean_s = sum(self.took_s) / len(self.took_s)
        recorded = sum(self.outcomes.values())
        ok_share = self.outcomes[True] / recorded if recorded else 1.0
        return self.in_flight / mean_s * ok_share if mean_s > 0 else None

    def users(self, max_in_flight: int, poll_s: float = POLL_S) -> int:
        return self.in_flight

    def summary(self) -> dict:
        """What the flood measured, for the run's log (sweep.jsonl's ``step`` event)."""
        return {"phase": self.name, "step": self.number, "in_flight": self.in_flight, "answers": self.answers,
                "timed": len(self.took_s), "answers_rps": self.answers_rps()}

    def waiting_on(self, now: float) -> str:
        return f"{self.outstanding} request(s) in flight, {len(self.took_s)} of {self.min_requests} answers timed"


@dataclass
class OpenLoop:
    """A plan's steps, one after the other, behind the suite's users' protocol."""

    plan: object  # first() -> step, next(step) -> step | None (bench_tasks.sweep)
    clock: Callable[[], float]
    max_in_flight: int = MAX_IN_FLIGHT
    on_enter: Callable[[Phase | None, Phase | None], None] | None = None
    on_take: Callable[[Job], None] | None = None
    on_unsent: Callable[[Job], None] | None = None  # a window job that was never sent
    on_step: Callable[[object], None] | None = None  # a step is over (a flood's rate is known)
    start_delay_s: float = 0.0  # the first step's schedule starts this much later: the pool spawns and warms up
    accepting: bool = True  # the suite's protocol: nothing holds the users back
    phase: Phase | None = None
    step: Step | Flood | None = None
    steps: list = field(default_factory=list)  # every step run, in order
    _users: int = 0

    def __post_init__(self) -> None:
        self._start(self.plan.first())

    @property
    def finished(self) -> bool:
        return self.step is None

    # -- the users' protocol --
    def take(self, scenario: str, user: str) -> Job | None:
        if scenario != SCENARIO or self.step is None:
            return None
        job = self.step.take(self.clock())
        if job is not None and self.on_take is not None:
            self.on_take(job)
        self.poll()
        return job

    def done(self, job: Job) -> None:
        if self.step is not None and job.round == self.step.number:
            self.step.done(job, self.clock())
        self.poll()

    def forget(self, user: str) -> list[Job]:
        return []  # a job is handed to the user that asked: nothing waits to be picked up

    def record(self, row: dict) -> None:
        """A finished record, where the run's records come together (local runner or master): a flood
        counts its failures."""
        if isinstance(self.step, Flood):
            self.step.record(row)

    def waiting_on(self) -> str:
        if self.step is None:
            return "the run has ended"
        return f"phase {self.phase.name}: {self.step.waiting_on(self.clock())}"

    # -- the clock --
    def poll(self) -> None:
        step = self.step
        if step is None:
            return
        now = self.clock()
        if isinstance(step, Step):
            step.advance(now)
            for job in step.drop(now):
                if self.on_unsent is not None:
                    self.on_unsent(job)
        if step.over:
            if self.on_step is not None:
                self.on_step(step)
            self._start(self.plan.next(step))
            return
        self._users = max(self._users, step.users(self.max_in_flight))
        name = step.name if isinstance(step, Flood) else part_name(step.name, step.part(now))
        if self.phase is None or name != self.phase.name:
            self._enter(Phase(name, SCENARIO, self._users, []))
        self.phase.users = self._users

    def _start(self, step) -> None:
        self.step = step
        if step is None:
            self._enter(None)
            return
        self.steps.append(step)
        step.begin(self.clock() + (self.start_delay_s if len(self.steps) == 1 else 0.0), len(self.steps))
        if isinstance(step, Flood):
            self._users = step.in_flight  # a closed loop: exactly its requests' users
        elif step.offered_rps:
            before = self.steps[-2] if len(self.steps) > 1 else None
            answer_s = _median(before.answered_s) if isinstance(before, Step) else None
            self._users = min(self.max_in_flight, max(self._users, step.expected_users(step.offered_rps, answer_s)))
        self.phase = None
        self.poll()

    def _enter(self, phase: Phase | None) -> None:
        previous, self.phase = self.phase, phase
        if self.on_enter is not None:
            self.on_enter(previous, phase)


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


# -- the records --
def stamp_due(record: Record, t_due: float) -> None:
    """A sent request's due time (``t_due``, on the clock of its ``t_send``) and the figures timed from it:
    how late it left, its first token and its whole answer as the user who asked at ``t_due`` waited."""
    record.t_due = t_due
    if record.t_send is None:
        return
    record.send_lag_s = record.t_send - t_due
    if record.ttft_s is not None:
        record.ttft_due_s = record.send_lag_s + record.ttft_s
    if record.e2e_s is not None:
        record.e2e_due_s = record.send_lag_s + record.e2e_s


def unsent_fields(job: Job, t_due: float) -> dict:
    """A never-sent job's record fields (beside the user's labels): due, not sent, failed as ``not_sent``."""
    return {"scenario": job.scenario, "phase": job.phase, "round": job.round, "offered_rps": job.offered_rps,
            "t_due": t_due, "ok": False, "error": NOT_SENT,
            "error_detail": "due while every user was busy (--max-in-flight reached); not sent before the drain limit"}
