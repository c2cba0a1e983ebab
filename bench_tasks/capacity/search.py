"""The capacity search as its users see it: the suite's protocol (``take``, ``done``, ``forget``,
``record``, ``poll``), handed first to the probe, then to the steps.

By default (``--start-students auto``) the probe runs first (``probe``): its phases take the users'
questions and records until it has measured the server; the queueing model (``queue_model``) then
predicts the knee, and the steps (``steps``) start there with ``Gallop`` (``policy``). With a number
for ``start``, or when the probe measured too little, the steps climb with ``Ladder`` instead. The
suite's ``Coordinator`` runs the same protocol, so the same messages carry the search to workers, and
the same shape drives it (``locustfiles/shapes/capacity.py``). ``remaining_s`` says how long it will
still take (``time_left``). Pure: clock injected, no Locust.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench_tasks import slo as slos
from bench_tasks.capacity import lines, queue_model
from bench_tasks.capacity.policy import FALLBACK_START, Gallop, Ladder, conclude
from bench_tasks.capacity.probe import MAX_BURST, Probe
from bench_tasks.capacity.probe import SCENARIO as PROBE
from bench_tasks.capacity.search_options import SearchOptions, parse_step
from bench_tasks.capacity.steps import SCENARIO, Step, Steps
from bench_tasks.capacity.time_left import TimeLeft
from bench_tasks.classroom import ThinkTime
from bench_tasks.suite import Job, Phase


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
    probe: Probe | None = None  # the probe, while it runs and after
    server: queue_model.Server | None = None  # what the probe measured
    prediction: queue_model.Prediction | None = None  # the model's classes and capacity
    steps: Steps | None = None  # once the probe is done (at once with a numbered start)
    time_left: TimeLeft | None = None  # with a model

    def __post_init__(self) -> None:
        o = self.options
        if o.start is None:
            self.probe = Probe(self.max_tokens, self.clock, max_burst=min(o.max_students, MAX_BURST),
                               record_wait_s=o.record_wait_s, overdue_s=o.overdue_s,
                               on_enter=self._enter, on_take=self.on_take)
        else:
            self.steps = self._steps(Ladder(o.start, parse_step(o.step), o.max_students, o.resolution))
            self.steps.start()

    @property
    def probing(self) -> bool:
        return self.steps is None

    @property
    def finished(self) -> bool:
        return self.phase is None

    @property
    def step(self) -> Step | None:
        return self.steps and self.steps.step

    @property
    def judged(self) -> list:
        return self.steps.judged if self.steps is not None else []

    @property
    def policy(self) -> Ladder | Gallop | None:
        return self.steps and self.steps.policy

    def result(self) -> tuple[int, int | None, str]:
        return conclude(self.policy.verdicts if self.steps is not None else {})

    # -- the users' protocol (as suite.Coordinator) --
    def take(self, scenario: str, user: str) -> Job | None:
        if self.probing:
            return self.probe.take(scenario, user)
        if scenario != SCENARIO:
            return None
        job = self.steps.take()
        if job is not None and self.on_take is not None:
            self.on_take(job)
        return job

    def done(self, job: Job) -> None:
        self._route(job, lambda probe: probe.done(job), lambda steps: steps.answered(job))

    def give_back(self, job: Job) -> None:
        """A question handed out that its user will not ask (it stopped first): taken back."""
        self._route(job, lambda probe: probe.give_back(job), lambda steps: steps.give_back(job))

    def _route(self, job: Job, to_probe: Callable, to_steps: Callable) -> None:
        """A probe's job to the probe while it runs (a late one is dropped), a class's to the steps."""
        if job.scenario == PROBE:
            if self.probing:
                to_probe(self.probe)
            self.poll()
        elif self.steps is not None:
            to_steps(self.steps)

    def forget(self, user: str) -> list[Job]:
        # A classroom job is handed to the user that asked for it: nothing waits to be picked up. A probe
        # burst's job may be assigned and not yet picked up.
        return self.probe.forget(user) if self.probing else []

    def record(self, row: dict) -> None:
        """A finished record, where the run's records come together (local runner or master)."""
        if self.probing:
            self.probe.record(row)
            self.poll()
        else:
            self.steps.record(row)

    def waiting_on(self) -> str:
        """What the search is waiting for, in words (the stall watchdog's message)."""
        return lines.waiting(self)

    # -- the clock --
    def poll(self) -> None:
        if not self.probing:
            self.steps.poll()
            return
        self.probe.poll()
        if self.probe.finished:
            self._predict()

    def remaining_s(self) -> float | None:
        """Seconds the search will still take if the model is right; None without a model (a numbered
        start, a probe that measured too little, or while the probe runs)."""
        return None if self.time_left is None else self.time_left.remaining_s(self.steps, self.clock())

    # -- the hand-off from the probe to the steps --
    def _predict(self) -> None:
        """The probe is done: the model's knee is the first class (the ladder as before, if it measured too little)."""
        o = self.options
        self.server = self.probe.server(unlimited_slots=o.max_students)
        if self.server is not None:
            self.prediction = queue_model.predict(self.server, self.think, self.slo, o.max_students)
            self.time_left = TimeLeft(o, self.slo, self.prediction)
            policy = Gallop(min(max(self.prediction.capacity, 1), o.max_students), o.max_students, o.resolution)
        else:
            policy = Ladder(FALLBACK_START, parse_step(o.step), o.max_students, o.resolution)
        self.steps = self._steps(policy)
        if self.on_predict is not None:
            self.on_predict(self)
        self.steps.start()

    def _steps(self, policy: Ladder | Gallop) -> Steps:
        return Steps(self.options, self.slo, policy, self.clock, on_enter=self._enter, on_verdict=self.on_verdict)

    def _enter(self, phase: Phase | None) -> None:
        previous, self.phase = self.phase, phase
        if self.on_enter is not None:
            self.on_enter(previous, phase)
