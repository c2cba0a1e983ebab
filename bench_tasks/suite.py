"""The quick suite as data, and the coordinator that hands its jobs to users.

``plan()`` turns the options into phases in a fixed order (chat, prompt, agent, bursts, needle),
each a list of jobs. ``Coordinator`` is a pure state machine over that plan (clock injected): a
user asks ``take(scenario, user)`` and gets its next job, or None to wait; it reports ``done``.
A burst phase is a barrier: a round's jobs are handed out only when all its users are waiting,
all with the same release instant, so the requests leave together without spawning anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from bench_tasks import agent, chat
from bench_tasks.prompt import size_label

SCENARIOS = ("chat", "prompt", "agent", "burst", "needle")
DEPTHS = (0.1, 0.5, 0.9)
BURST_TOKENS = 128
RELEASE_LEAD_S = 0.25  # time for every waiting user to hear of the release before it comes


@dataclass(frozen=True)
class SuiteOptions:
    runs: int = 3
    sizes: tuple[int, ...] = (4096, 16384, 32768)
    needle_sizes: tuple[int, ...] = (32768, 131072)
    bursts: tuple[int, ...] = (1, 4, 12)
    only: tuple[str, ...] = SCENARIOS
    depths: tuple[float, ...] = DEPTHS
    burst_tokens: int = BURST_TOKENS


@dataclass(frozen=True)
class Job:
    scenario: str
    phase: str  # the records' phase, e.g. prompt-16k
    round: int  # 1-based run (burst: round)
    index: int  # position in its phase, for a distinct prompt per job
    size: int | None = None  # prompt tokens (prompt, needle)
    depth: float | None = None  # needle depth
    concurrency: int = 1
    release_at: float | None = None  # barrier phases: when to send, in the coordinator's clock
    students: int | None = None  # classroom: the class seated when the job was handed out
    offered_rps: float | None = None  # open loop: the rate its step offers (release_at is when it is due)


@dataclass
class Phase:
    name: str  # the records' phase: chat, prompt-16k, agent, burst-4, needle-32k
    scenario: str
    users: int
    jobs: list[Job]
    barrier: bool = False

    @property
    def expected_records(self) -> int:
        return sum(records_per_job(job) for job in self.jobs)


def records_per_job(job: Job) -> int:
    """An agent job is a whole session (one record per turn); every other job is one request."""
    return agent.TURNS if job.scenario == "agent" else 1


def plan(options: SuiteOptions) -> list[Phase]:
    phases: list[Phase] = []
    if "chat" in options.only:
        jobs = [Job("chat", "chat", run, i) for run in range(1, options.runs + 1)
                for i in range(len(chat.QUESTIONS))]
        phases.append(Phase("chat", "chat", 1, jobs))
    if "prompt" in options.only:
        for k, size in enumerate(options.sizes):
            name = f"prompt-{size_label(size)}"
            jobs = [Job("prompt", name, run, k * options.runs + run, size=size) for run in range(1, options.runs + 1)]
            phases.append(Phase(name, "prompt", 1, jobs))
    if "agent" in options.only:
        phases.append(Phase("agent", "agent", 1, [Job("agent", "agent", run, run) for run in range(1, options.runs + 1)]))
    if "burst" in options.only:
        for n in sorted(options.bursts):  # ascending: users are only ever added between bursts
            jobs = [Job("burst", f"burst-{n}", rnd, i, concurrency=n) for rnd in range(1, options.runs + 1)
                    for i in range(n)]
            phases.append(Phase(f"burst-{n}", "burst", n, jobs, barrier=True))
    if "needle" in options.only:
        for k, size in enumerate(options.needle_sizes):
            name = f"needle-{size_label(size)}"
            jobs = [Job("needle", name, 1, k * len(options.depths) + i, size=size, depth=depth)
                    for i, depth in enumerate(options.depths)]
            phases.append(Phase(name, "needle", 1, jobs))
    return phases


@dataclass
class Coordinator:
    phases: list[Phase]
    clock: Callable[[], float]
    release_lead_s: float = RELEASE_LEAD_S
    current: int = 0
    _queue: deque = field(default_factory=deque)
    _outstanding: int = 0
    _waiting: dict = field(default_factory=dict)  # barrier: user -> None until released
    _assigned: dict = field(default_factory=dict)  # user -> job, handed out on its next take
    on_enter: Callable[[Phase | None, Phase | None], None] | None = None
    on_take: Callable[[Job], None] | None = None  # a job was handed out (progress, not measurement)
    accepting: bool = True

    def __post_init__(self) -> None:
        self._enter(0, previous=None)

    @property
    def phase(self) -> Phase | None:
        return self.phases[self.current] if self.current < len(self.phases) else None

    @property
    def finished(self) -> bool:
        return self.phase is None

    def _enter(self, index: int, previous: Phase | None) -> None:
        """Move to phase ``index``. With an ``on_enter`` hook (e.g. scraping the engine's metrics
        between phases) no job is handed out until the hook calls ``begin()``."""
        self.current = index
        self._waiting.clear()
        self._assigned.clear()
        phase = self.phase
        self._queue = deque(phase.jobs) if phase else deque()
        self._outstanding = len(self._queue)
        if phase is not None and self._outstanding == 0:
            self._enter(index + 1, previous)
            return
        if self.on_enter is not None:
            self.accepting = False
            self.on_enter(previous, phase)

    def begin(self) -> None:
        self.accepting = True

    def take(self, scenario: str, user: str) -> Job | None:
        job = self._next_job(scenario, user)
        if job is not None and self.on_take is not None:
            self.on_take(job)
        return job

    def _next_job(self, scenario: str, user: str) -> Job | None:
        phase = self.phase
        if phase is None or phase.scenario != scenario or not self.accepting:
            return None
        if user in self._assigned:
            return self._assigned.pop(user)
        if not phase.barrier:
            return self._queue.popleft() if self._queue else None
        self._waiting[user] = None
        if len(self._waiting) >= phase.users and self._queue and not self._assigned:
            self._release(phase)
            return self._assigned.pop(user, None)
        return None

    def _release(self, phase: Phase) -> None:
        release_at = self.clock() + self.release_lead_s
        users = list(self._waiting)[: phase.users]
        for user in users:
            job = self._queue.popleft()
            self._assigned[user] = Job(**{**job.__dict__, "release_at": release_at})
            del self._waiting[user]

    def waiting_on(self) -> str:
        """What the suite is waiting for, in words (the stall watchdog's message)."""
        phase = self.phase
        if phase is None:
            return "the suite has ended"
        held = self._outstanding - len(self._queue) - len(self._assigned)
        parts = [f"phase {phase.name}"]
        if not self.accepting:
            parts.append("reading the engine's counters before it opens")
        if held > 0:
            parts.append(f"{held} job(s) in flight")
        if phase.barrier and self._queue:
            parts.append(f"waiting for {phase.users} users ({len(self._waiting)} ready)")
        elif self._queue:
            parts.append(f"{len(self._queue)} job(s) not taken yet")
        return ", ".join(parts)

    def forget(self, user: str) -> list[Job]:
        """A user is gone (it stopped, or its worker died): it no longer counts at a barrier, and a job
        released to it but not yet picked up is lost. Returns the lost jobs (already closed)."""
        self._waiting.pop(user, None)
        job = self._assigned.pop(user, None)
        if job is None:
            return []
        self.done(job)
        return [job]

    def give_back(self, job: Job) -> None:
        """A job handed out that its user will not run (it stopped first): handed out again. A barrier's
        job was released with its round, which cannot be sent again: closed, its record missing."""
        if self.phase is None or job.phase != self.phase.name:
            return
        if job.release_at is not None:
            self.done(job)
        else:
            self._queue.appendleft(job)

    def done(self, job: Job) -> None:
        if self.phase is None or job.phase != self.phase.name:
            return  # a late report from a phase already closed
        self._outstanding -= 1
        if self._outstanding <= 0:
            self._enter(self.current + 1, self.phase)
