"""The capacity search: how many students can the server seat before the SLO breaks?

By default (``start`` None, ``--start-students auto``) the search first probes the server
(``bench_tasks.probe``: its slots, decode and prefill rates, how long its answers are), predicts
the knee with the queueing model of the class (``bench_tasks.classroom_queue``) and starts there;
``Gallop`` then picks the class sizes: from the predicted class one student (``resolution``) toward
the boundary (up after a class that met the SLO, down after one that missed), the stride doubling
while the verdicts keep the direction (the prediction was off), then bisecting between the largest
class that met and the smallest that missed until they are ``resolution`` apart. With a number for
``start`` (or when the probe measured too little) ``Ladder`` picks them as before the probe existed:
it grows the class (``x2``: double, ``+4``: add four) from ``start`` until a step misses the SLO,
then bisects. Both stop at once on a step in which the client was saturated (that step says
nothing about the server) and at ``max_students``, and both assume that a class that misses the
SLO is not met by a larger one.

``Search`` runs the ladder against the clock, as the suite's ``Coordinator`` runs the plan, with
the same protocol for users (``take``, ``done``, ``forget``), so the same messages carry it to
workers. Each step seats its class, lets it settle (``settle-N``: new students arrive, the
server's queue adapts), then opens its judged window (``class-N``) for at least ``step_s`` and
``min_requests`` questions, then waits for the window's answers and records (labelled
``settle-N`` again meanwhile) and judges them with ``slo.judge``. A window its requests cannot
judge yet (``unsure``: a goal's interval straddles its limit) opens again and goes on, the same
phase, until it has been held twice as long, and so on up to ``max_step_s`` (default three
times ``step_s``); there it is decided on its point estimates. A step in which the client was
saturated is run once more (``settle-N-2``, ``class-N-2``): a machine that stalled for a moment
does not end the search, a client that cannot keep up does. ``remaining_s`` says how long the
search will still take: the steps the ladder still expects if the model is right (its capacity,
kept within what the verdicts so far allow), each timed from the model's figures for its class (or
the nearest class it ran: settle, the window held until the model's requests would decide it, the
last answer). Pure:
clock injected, no Locust.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from bench_tasks import classroom_queue
from bench_tasks import slo as slos
from bench_tasks.classroom import ThinkTime
from bench_tasks.probe import MAX_BURST, Probe
from bench_tasks.probe import SCENARIO as PROBE
from bench_tasks.statistics import median
from bench_tasks.suite import Job, Phase

SCENARIO = "classroom"
MAX_HOLD_FACTOR = 10  # a window that cannot gather min_requests is judged after this many step_s anyway
MAX_STEP_FACTOR = 3  # an unsure window goes on up to this many step_s, unless max_step_s says otherwise
RECORD_WAIT_S = 7.0  # after the window's last answer, how long its records may take to arrive (2 reports)
AUTO = "auto"  # --start-students auto: probe the server and start at the model's knee
FALLBACK_START = 2  # the probe measured too little: the ladder from here, as before the probe
MODEL_WINDOWS = 16  # windows of the model's requests judged to say what a step's window would likely conclude


def parse_start(text) -> int | None:
    """``auto`` (None: probe and predict) or a class size."""
    text = str(text).strip()
    if text == AUTO:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"expected a class size (1 or more) or auto, got {text!r}")
    return int(text)


def parse_step(text: str) -> tuple[str, int]:
    """``x2`` (multiply the class) or ``+4`` (add students): (operator, amount)."""
    text = str(text).strip()
    operator, amount = text[:1], text[1:]
    if operator not in ("x", "+") or not amount.isdigit() or int(amount) < (2 if operator == "x" else 1):
        raise ValueError(f"expected a step like x2 (double the class) or +4 (add four students), got {text!r}")
    return operator, int(amount)


def grow(students: int, step: tuple[str, int]) -> int:
    operator, amount = step
    return students * amount if operator == "x" else students + amount


@dataclass(frozen=True)
class SearchOptions:
    start: int | None = None  # None: probe the server, start at the model's knee (--start-students auto)
    step: str = "x2"
    max_students: int = 256
    resolution: int = 1
    settle_s: float = 40.0
    step_s: float = 120.0
    min_requests: int = 20
    max_step_s: float | None = None  # None: MAX_STEP_FACTOR * step_s
    record_wait_s: float = RECORD_WAIT_S

    def __post_init__(self) -> None:
        parse_step(self.step)
        start = 1 if self.start is None else self.start
        if not 1 <= start <= self.max_students:
            raise ValueError(f"the first class ({start} students) is not within 1 to the largest ({self.max_students})")
        if self.resolution < 1 or self.min_requests < 1:
            raise ValueError("need resolution >= 1 and min_requests >= 1")
        if self.max_step_s is None:
            object.__setattr__(self, "max_step_s", MAX_STEP_FACTOR * self.step_s)
        if self.max_step_s < self.step_s:
            raise ValueError(f"max_step_s ({self.max_step_s:g} s) is shorter than step_s ({self.step_s:g} s)")


def conclude(verdicts: dict[int, str]) -> tuple[int, int | None, str]:
    """(capacity, the class that bounds it, why): the largest class that met the SLO below the
    smallest that did not. Why: ``misses``, ``client_saturated``, ``unsure`` (a class its requests
    could not tell bounds the capacity as a miss does: it was not shown to meet), or ``untested``
    (no step above the capacity was judged: the search stopped at its largest class)."""
    stops = [n for n, outcome in verdicts.items() if outcome != slos.MEETS]
    bound = min(stops) if stops else None
    met = [n for n, outcome in verdicts.items() if outcome == slos.MEETS and (bound is None or n < bound)]
    return (max(met) if met else 0), bound, (verdicts[bound] if bound is not None else "untested")


@dataclass
class Ladder:
    start: int
    step: tuple[str, int]
    max_students: int
    resolution: int = 1
    verdicts: dict[int, str] = field(default_factory=dict)

    def next(self, students: int, outcome: str) -> int | None:
        """The next class size after ``students`` was judged ``outcome``; None when the search is done."""
        self.verdicts[students] = outcome
        good, bound, why = conclude(self.verdicts)
        if why == slos.SATURATED:
            return None
        if bound is None:
            return None if students >= self.max_students else min(grow(students, self.step), self.max_students)
        return None if bound - good <= self.resolution else (good + bound) // 2


@dataclass
class Gallop:
    """From a predicted class toward the boundary: one ``resolution`` up after a class that met the SLO,
    down after one that missed, twice as far each further step the same way, then bisection."""

    start: int
    max_students: int
    resolution: int = 1
    verdicts: dict[int, str] = field(default_factory=dict)
    stride: int = 0  # the last move's size, signed (+ up, - down)

    def next(self, students: int, outcome: str) -> int | None:
        self.verdicts[students] = outcome
        good, bound, why = conclude(self.verdicts)
        if why == slos.SATURATED:
            return None
        if bound is None:  # every class so far met it: up
            if good >= self.max_students:
                return None
            self.stride = 2 * self.stride if self.stride > 0 else self.resolution
            return min(good + self.stride, self.max_students)
        if good == 0 and bound > self.resolution:  # none met below the bound yet: down
            self.stride = 2 * self.stride if self.stride < 0 else -self.resolution
            return max(bound + self.stride, 1)
        return None if bound - good <= self.resolution else (good + bound) // 2


def walk(ladder, students: int | None, capacity: int) -> list[int]:
    """The classes a copy of ``ladder`` would still try after ``students`` (not judged yet) against a
    server that seats ``capacity``: what the search still expects if that is the truth."""
    ladder, tried = copy.deepcopy(ladder), []
    while students is not None and len(tried) < 64:
        students = ladder.next(students, slos.MEETS if students <= capacity else slos.MISSES)
        if students is not None:
            tried.append(students)
    return tried


def shrink_at_limit(held_s: float, max_step_s: float) -> float | None:
    """How much narrower a window's intervals would be held to ``max_step_s``: it would gather max_step_s /
    held_s times the requests, and an interval narrows as the square root of that (None: at the limit)."""
    return None if held_s >= max_step_s else math.sqrt(held_s / max_step_s)


SETTLING, WINDOW, CLOSING = "settling", "window", "closing"


@dataclass
class Step:
    students: int
    number: int  # 1-based, in the order the search ran them
    started: float
    attempt: int = 1  # 2: the class again, its first window refused (the client was saturated)
    state: str = SETTLING
    window_started: float | None = None
    target_s: float = 0.0  # how long the window is held before it is judged (doubled when it cannot tell)
    held_s: float = 0.0  # how long it had been held when it last closed
    handed: int = 0  # questions sent in the window
    open: int = 0  # of those, not answered yet
    last_answer: float | None = None
    rows: list = field(default_factory=list)  # the window's records

    @property
    def window(self) -> str:
        return f"class-{self.students}{self._again}"

    @property
    def settle(self) -> str:
        return f"settle-{self.students}{self._again}"

    @property
    def _again(self) -> str:
        return f"-{self.attempt}" if self.attempt > 1 else ""


@dataclass
class Search:
    options: SearchOptions
    slo: slos.Slo
    clock: Callable[[], float]
    on_enter: Callable[[Phase | None, Phase | None], None] | None = None
    on_take: Callable[[Job], None] | None = None
    on_verdict: Callable[[Step, dict], None] | None = None  # a window was judged (outcome unsure: it goes on)
    on_predict: Callable[["Search"], None] | None = None  # the probe ended: ``server``, ``prediction``, ``probe``
    think: ThinkTime = field(default_factory=ThinkTime)  # the class's (the model's) think time
    max_tokens: int = 256  # the class's answers (the probe asks its questions so)
    accepting: bool = True  # the suite's protocol: a search never holds its users back
    phase: Phase | None = None
    step: Step | None = None
    judged: list = field(default_factory=list)  # (Step, figures) in search order: each window's final verdict
    probe: Probe | None = None  # the probe, while it runs and after
    server: classroom_queue.Server | None = None  # what the probe measured
    prediction: classroom_queue.Prediction | None = None  # the model's classes and capacity
    ladder: Ladder | Gallop | None = None
    _jobs: int = 0
    _windows: dict = field(default_factory=dict, repr=False)  # expected_window_s by class: the model does not change

    def __post_init__(self) -> None:
        o = self.options
        if o.start is None:
            self.probe = Probe(self.max_tokens, self.clock, max_burst=min(o.max_students, MAX_BURST),
                               record_wait_s=o.record_wait_s, on_enter=lambda phase: self._enter(phase),
                               on_take=self.on_take)
        else:
            self._climb(o.start)

    @property
    def probing(self) -> bool:
        return self.probe is not None and not self.probe.finished

    @property
    def finished(self) -> bool:
        return self.phase is None

    def result(self) -> tuple[int, int | None, str]:
        return conclude(self.ladder.verdicts if self.ladder is not None else {})

    # -- the users' protocol (as suite.Coordinator) --
    def take(self, scenario: str, user: str) -> Job | None:
        if self.probing:
            return self.probe.take(scenario, user)
        if scenario != SCENARIO:
            return None
        self.poll()
        step = self.step
        if step is None:
            return None
        self._jobs += 1
        job = Job(SCENARIO, self.phase.name, step.number, self._jobs, students=step.students)
        if step.state == WINDOW:
            step.handed += 1
            step.open += 1
        if self.on_take is not None:
            self.on_take(job)
        return job

    def done(self, job: Job) -> None:
        if job.scenario == PROBE:
            if self.probing:
                self.probe.done(job)
            self.poll()
            return
        step = self.step
        if step is not None and job.phase == step.window and step.open > 0:
            step.open -= 1
            step.last_answer = self.clock()
        self.poll()

    def waiting_on(self) -> str:
        """What the search is waiting for, in words (the stall watchdog's message)."""
        step = self.step
        if step is None:
            return "the search has ended"
        return (f"step {step.number} ({step.students} students, {step.state}), "
                f"{step.open} question(s) of its window in flight")

    def forget(self, user: str) -> list[Job]:
        # A classroom job is handed to the user that asked for it: nothing waits to be picked up. A probe
        # burst's job may be assigned and not yet picked up.
        return self.probe.forget(user) if self.probing else []

    def record(self, row: dict) -> None:
        """A finished record, where the run's records come together (local runner or master)."""
        if self.probing:
            self.probe.record(row)
            self.poll()
            return
        step = self.step
        if step is not None and row.get("phase") == step.window and row.get("scenario") == SCENARIO:
            step.rows.append(row)
            self.poll()

    # -- the clock --
    def poll(self) -> None:
        if self.probe is not None and self.ladder is None:
            self.probe.poll()
            if self.probe.finished:
                self._predict()
            return
        step, now = self.step, self.clock()
        if step is None:
            return
        if step.state == SETTLING and now - step.started >= self.options.settle_s:
            step.state, step.window_started, step.target_s = WINDOW, now, self.options.step_s
            self._enter(Phase(step.window, SCENARIO, step.students, []))
        elif step.state == WINDOW and self._window_full(step, now):
            step.state, step.held_s = CLOSING, now - step.window_started
            self._enter(Phase(step.settle, SCENARIO, step.students, []))
        if step.state == CLOSING and step.open == 0 and (
                len(step.rows) >= step.handed or now - (step.last_answer or now) >= self.options.record_wait_s):
            self._judge(step)

    def _predict(self) -> None:
        """The probe is done: the model's knee is the first class (the ladder as before, if it measured too little)."""
        o = self.options
        self.server = self.probe.server(unlimited_slots=o.max_students)
        if self.server is not None:
            self.prediction = classroom_queue.predict(self.server, self.think, self.slo, o.max_students)
            start = min(max(self.prediction.capacity, 1), o.max_students)
            self.ladder = Gallop(start, o.max_students, o.resolution)
        else:
            self.ladder = Ladder(FALLBACK_START, parse_step(o.step), o.max_students, o.resolution)
        if self.on_predict is not None:
            self.on_predict(self)
        self._seat(self.ladder.start, number=1)

    def _climb(self, start: int) -> None:
        o = self.options
        self.ladder = Ladder(start, parse_step(o.step), o.max_students, o.resolution)
        self._seat(start, number=1)

    def _window_full(self, step: Step, now: float) -> bool:
        held = now - step.window_started
        enough = step.handed >= self.options.min_requests or held >= MAX_HOLD_FACTOR * self.options.step_s
        return held >= step.target_s and enough

    def _judge(self, step: Step) -> None:
        final = step.held_s >= self.options.max_step_s
        shrink = shrink_at_limit(step.held_s, self.options.max_step_s)  # decided now if even that would not tell
        figures = slos.judge(self.slo, step.rows, final=final, shrink=shrink)
        if figures["outcome"] == slos.UNSURE:
            # Hold on to the window: twice as long gathers about twice the requests, narrowing each interval.
            step.state, step.target_s = WINDOW, min(2 * step.held_s, self.options.max_step_s)
            if self.on_verdict is not None:
                self.on_verdict(step, figures)
            self._enter(Phase(step.window, SCENARIO, step.students, []))
            return
        self.judged.append((step, figures))
        if self.on_verdict is not None:
            self.on_verdict(step, figures)
        if figures["outcome"] == slos.SATURATED and step.attempt == 1:
            self._seat(step.students, step.number + 1, attempt=2)
            return
        following = self.ladder.next(step.students, figures["outcome"])
        if following is None:
            self.step = None
            self._enter(None)
        else:
            self._seat(following, step.number + 1)

    def _seat(self, students: int, number: int, attempt: int = 1) -> None:
        self.step = Step(students, number, self.clock(), attempt)
        self._enter(Phase(self.step.settle, SCENARIO, students, []))

    def _enter(self, phase: Phase | None) -> None:
        previous, self.phase = self.phase, phase
        if self.on_enter is not None:
            self.on_enter(previous, phase)

    # -- how long it will still take --
    def remaining_s(self) -> float | None:
        """Seconds the search will still take if the model is right; None without a model (a numbered
        start, a probe that measured too little, or while the probe runs)."""
        if self.prediction is None or self.step is None:
            return None if self.prediction is None else 0.0
        good, bound, _why = conclude(self.ladder.verdicts)
        capacity = max(self.prediction.capacity, good)
        capacity = capacity if bound is None else min(capacity, bound - 1)
        step = self.step
        current = self.expected_step_s(step.students)
        elapsed = self.clock() - step.started
        if step.window_started is not None:  # a window held longer than expected: at least its target
            current = max(current, step.window_started - step.started + step.target_s + self._answer_s(step.students))
        later = walk(self.ladder, step.students, capacity)
        return max(current - elapsed, 0.0) + sum(self.expected_step_s(n) for n in later)

    def expected_step_s(self, students: int) -> float:
        """Settle, the window as long as the model says its requests take to decide it, the last answer."""
        return self.options.settle_s + self.expected_window_s(students) + self._answer_s(students)

    def expected_window_s(self, students: int) -> float:
        if students not in self._windows:
            o = self.options
            figures = self._figures(students)
            held = o.step_s
            while held < o.max_step_s:
                requests = int(figures.requests_per_s * held)
                if requests >= o.min_requests and expected_outcome(self.slo, figures, requests) != slos.UNSURE:
                    break
                held = min(2 * held, o.max_step_s)
            self._windows[students] = held
        return self._windows[students]

    def _answer_s(self, students: int) -> float:
        return self._figures(students).response_s

    def _figures(self, students: int) -> classroom_queue.ClassFigures:
        """The model's class, or the nearest class it ran, asking as often per student: running the model
        again while a class asks would hold the loop that stamps its answers."""
        classes = self.prediction.classes
        if students in classes:
            return classes[students]
        near = min(classes.values(), key=lambda c: (abs(c.students - students), c.students))
        return dataclasses.replace(near, students=students,
                                   requests_per_s=near.requests_per_s * students / near.students)


def probe_line(search: Search) -> str:
    """What the probe measured and what the model predicts, in one line: ``probe: 4 slots, 100 tok/s per request
    ...; the model predicts 24 students (TTFT p95 0.92 s; 25: 1.2 s)``."""
    server, prediction = search.server, search.prediction
    if server is None:
        return (f"probe: {search.probe.why() or 'too little measured'}; the search climbs from "
                f"{search.ladder.start} students ({search.options.step}) instead")
    slots = (f"{server.slots} slots" if search.probe.slots
             else f"no slot limit seen up to {search.probe.max_burst} at once")
    busy = min(server.slots, 8)
    prefill = f"prefill {server.prefill_tps:.0f} tok/s" if server.prefill_tps else "prefill too fast to see"
    if server.prefill_pause_share:
        prefill += f" (the answers beside a prompt stand still for {server.prefill_pause_share:.0%} of its reading)"
    answers = sorted(server.answer_tokens)
    parts = [f"probe: {slots}, decode {1 / server.token_s:.0f} tok/s per request alone "
             f"({1 / server.token_time_s(busy):.0f} with {busy} at once), {prefill}, first token "
             f"{server.first_token_s:.3f} s, answers {answers[0]}-{answers[-1]} tokens "
             f"(median {median(answers):.0f})"]
    knee = prediction.capacity
    shown = [prediction.classes[n] for n in (knee, knee + 1) if n in prediction.classes]
    figures = "; ".join(f"{c.students}: " + ", ".join(f"{g.label} {c.figures[g.figure]:.3g} {g.unit}"
                                                       for g in search.slo.goals if c.figures[g.figure] is not None)
                        for c in shown)
    parts.append(f"the model predicts {knee} students ({figures}); the search starts at {search.ladder.start}")
    return "; ".join(parts)


def expected_outcome(slo: slos.Slo, figures: classroom_queue.ClassFigures, requests: int) -> str:
    """The verdict a window of ``requests`` would likely reach if the model's requests are the class's: the
    model's requests, in the order they were asked, cut into windows of that many, each judged as a step is
    (``slo.interval``); the verdict most of them reach, or UNSURE when none has a majority."""
    outcomes = []
    for goal in slo.goals:
        series = figures.series.get(goal.column) or []
        if requests < 1 or len(series) < requests:
            return slos.UNSURE
        windows = [series[start:start + requests] for start in range(0, len(series) - requests + 1, requests)]
        step = max(1, len(windows) // MODEL_WINDOWS)  # a few spread over the model's run are enough
        verdicts = Counter(goal.verdict(slos.interval(window, goal.quantile)) for window in windows[::step])
        outcome, count = verdicts.most_common(1)[0]
        outcomes.append(outcome if 2 * count > sum(verdicts.values()) else slos.UNSURE)
    if slos.MISSES in outcomes:
        return slos.MISSES
    return slos.MEETS if all(o == slos.MEETS for o in outcomes) else slos.UNSURE
