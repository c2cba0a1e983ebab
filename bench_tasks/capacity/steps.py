"""The capacity search's state machine: one class at a time, seated, settled, its window held and judged,
then the class the policy picks next.

Each step seats its class and lets it settle (phase ``settle-N``: new students arrive, the server's
queue adapts) for ``settle_s``, then opens its judged window (``class-N``) for at least ``step_s`` and
``min_requests`` questions (a class that cannot ask that many is judged after ``MAX_HOLD_FACTOR``
times ``step_s`` anyway), then closes it (``settle-N`` again meanwhile) and waits for the window's
answers and their records, which it judges with ``slo.judge``. A window its requests cannot judge yet
(``unsure``: a goal's interval straddles its limit) opens again and goes on, the same phase, until it
has been held twice as long, and so on up to ``max_step_s``; there it is decided on its point
estimates (sooner when holding on to the limit would not tell either: ``shrink_at_limit``). A step in
which the client was saturated is run once more (``settle-N-2``, ``class-N-2``): a machine that stalled
for a moment does not end the search, a client that cannot keep up does.

No window waits forever: an answer not in by ``read_timeout_s + record_wait_s`` after the window
closed is overdue (a question sent before the close has failed by its read timeout by then, or was
lost with a worker, or on its way), and the window is judged on what came. Its verdict's figures say
how many answers were overdue (``overdue``, 0 when none was); an overdue answer that comes later is
not counted. ``missing`` counts every question of the window whose record had not come when it was
judged: the overdue ones, and those lost with a worker (closed when the master noticed the loss). Pure: clock injected, no Locust.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from bench_tasks import slo as slos
from bench_tasks.capacity.policy import Gallop, Ladder
from bench_tasks.capacity.search_options import SearchOptions
from bench_tasks.suite import Job, Phase

SCENARIO = "classroom"
MAX_HOLD_FACTOR = 10  # a window that cannot gather min_requests is judged after this many step_s anyway
SETTLING, WINDOW, CLOSING = "settling", "window", "closing"


@dataclass
class Step:
    students: int
    number: int  # 1-based, in the order the search ran them
    started: float
    attempt: int = 1  # 2: the class again, its first window refused (the client was saturated)
    state: str = SETTLING
    window_started: float | None = None
    closed_at: float | None = None  # when the window last closed
    target_s: float = 0.0  # how long the window is held before it is judged (doubled when it cannot tell)
    held_s: float = 0.0  # how long it had been held when it last closed
    handed: int = 0  # questions sent in the window
    in_flight: set[int] = field(default_factory=set)  # the window's questions not answered yet (job indexes)
    overdue: int = 0  # questions whose answers were overdue when the window was judged
    last_answer: float | None = None
    rows: list = field(default_factory=list)  # the window's records

    @property
    def open(self) -> int:
        return len(self.in_flight)

    @property
    def window(self) -> str:
        return f"class-{self.students}{self._again}"

    @property
    def settle(self) -> str:
        return f"settle-{self.students}{self._again}"

    @property
    def _again(self) -> str:
        return f"-{self.attempt}" if self.attempt > 1 else ""


def shrink_at_limit(held_s: float, max_step_s: float) -> float | None:
    """How much narrower a window's intervals would be held to ``max_step_s``: it would gather max_step_s /
    held_s times the requests, and an interval narrows as the square root of that (None: at the limit)."""
    return None if held_s >= max_step_s else math.sqrt(held_s / max_step_s)


@dataclass
class Steps:
    """The steps from the policy's first class (``start``) to its last; ``on_enter`` hears of each phase (None:
    done)."""

    options: SearchOptions
    slo: slos.Slo
    policy: Ladder | Gallop
    clock: Callable[[], float]
    on_enter: Callable[[Phase | None], None]
    on_verdict: Callable[[Step, dict], None] | None = None  # a window was judged (outcome unsure: it goes on)
    step: Step | None = None
    judged: list = field(default_factory=list)  # (Step, figures) in search order: each window's final verdict
    _jobs: int = 0

    def start(self) -> None:
        self._seat(self.policy.start, number=1)

    # -- what the search's users do --
    def take(self) -> Job | None:
        """The next question of the current step, labelled with its phase; counted when in the window."""
        self.poll()
        step = self.step
        if step is None:
            return None
        self._jobs += 1
        in_window = step.state == WINDOW
        job = Job(SCENARIO, step.window if in_window else step.settle, step.number, self._jobs, students=step.students)
        if in_window:
            step.handed += 1
            step.in_flight.add(job.index)
        return job

    def answered(self, job: Job) -> None:
        step = self.step
        if step is not None and job.phase == step.window and job.index in step.in_flight:
            step.in_flight.discard(job.index)
            step.last_answer = self.clock()
        self.poll()

    def give_back(self, job: Job) -> None:
        """A question handed out that its student will not ask (it stopped first: the class shrank): as if
        never handed out, so the window waits for no answer to it, nor counts it among its requests."""
        step = self.step
        if step is not None and job.phase == step.window and job.index in step.in_flight:
            step.in_flight.discard(job.index)
            step.handed -= 1
        self.poll()

    def record(self, row: dict) -> None:
        step = self.step
        if step is not None and row.get("phase") == step.window and row.get("scenario") == SCENARIO:
            step.rows.append(row)
            self.poll()

    # -- the clock --
    def poll(self) -> None:
        step, now, o = self.step, self.clock(), self.options
        if step is None:
            return
        if step.state == SETTLING and now - step.started >= o.settle_s:
            step.state, step.window_started, step.target_s = WINDOW, now, o.step_s
            self.on_enter(Phase(step.window, SCENARIO, step.students, []))
        elif step.state == WINDOW and self._window_full(step, now):
            step.state, step.held_s, step.closed_at = CLOSING, now - step.window_started, now
            self.on_enter(Phase(step.settle, SCENARIO, step.students, []))
        if step.state != CLOSING:
            return
        due = now - step.closed_at >= o.overdue_s
        if due and step.open:  # judged on what came
            step.overdue += step.open
            step.in_flight.clear()
        records_since = max(step.closed_at, step.last_answer or step.closed_at)
        if step.open == 0 and (len(step.rows) >= step.handed or now - records_since >= o.record_wait_s or due):
            self._judge(step)

    def _window_full(self, step: Step, now: float) -> bool:
        held = now - step.window_started
        enough = step.handed >= self.options.min_requests or held >= MAX_HOLD_FACTOR * self.options.step_s
        return held >= step.target_s and enough

    def _judge(self, step: Step) -> None:
        o = self.options
        final = step.held_s >= o.max_step_s
        shrink = shrink_at_limit(step.held_s, o.max_step_s)  # decided now if even that would not tell
        # Its questions whose records never came: overdue, or lost with a worker (closed when the master noticed).
        missing = max(step.handed - len(step.rows), 0)
        figures = {**slos.judge(self.slo, step.rows, final=final, shrink=shrink), "overdue": step.overdue,
                   "missing": missing}
        if figures["outcome"] == slos.UNSURE:
            # Hold on to the window: twice as long gathers about twice the requests, narrowing each interval.
            step.state, step.target_s = WINDOW, min(2 * step.held_s, o.max_step_s)
            if self.on_verdict is not None:
                self.on_verdict(step, figures)
            self.on_enter(Phase(step.window, SCENARIO, step.students, []))
            return
        self.judged.append((step, figures))
        if self.on_verdict is not None:
            self.on_verdict(step, figures)
        if figures["outcome"] == slos.SATURATED and step.attempt == 1:
            self._seat(step.students, step.number + 1, attempt=2)
            return
        following = self.policy.next(step.students, figures["outcome"])
        if following is None:
            self.step = None
            self.on_enter(None)
        else:
            self._seat(following, step.number + 1)

    def _seat(self, students: int, number: int, attempt: int = 1) -> None:
        self.step = Step(students, number, self.clock(), attempt)
        self.on_enter(Phase(self.step.settle, SCENARIO, students, []))
