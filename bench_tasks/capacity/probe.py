"""The capacity search's probe: what the server is made of, measured in about a minute before the first class.

Its phases (scenario ``probe``: counted in the report's requests table, never judged against the SLO):

- ``probe-burst-K``, K = 1, 2, 4, ...: K short questions released together (a barrier, as the suite's
  bursts), each with a fresh prefix and exactly ``suite.BURST_TOKENS`` tokens of answer (ignore_eos): a
  request served at once sees its first token early, one that waited for a slot only as the first of
  the K answers ends. The ladder stops at the first rung where a request waited (the slots are those
  served at once), a rung where a request failed, or ``max_burst`` (no slot limit seen up to there).
  Each rung's decode tok/s of the requests served at once gives a token's time while K decode at once.
- ``probe-prompt``: one fresh prompt as long as the class's longest conversation (``longest_prompt``),
  with a short answer: its first token, beside the first rung's short prompt, gives the prefill rate
  and what a first token costs besides reading the prompt. Beside it, a short question with a long
  answer (``PAUSE_TOKENS``), sent with it: by how much longer that answer took than the first rung's
  alone, the probe tells whether reading a prompt pauses the answers beside it (llama.cpp reads
  prompts in batches during which every stream waits, a short prompt that came with a long one too;
  an engine that reads prompts beside the decoding does not), as the share of the prompt's reading
  time they lost.
- ``probe-answers``: the classroom's first questions (``ANSWERS`` of them, each from a fresh student,
  asked by the last rung's users: the server answers as many at once as it has slots), answered as the
  class's are (``--max-tokens``, natural length unless ``--ignore-eos``): how long the answers are, and
  how long a conversation's first prompt is.

``Probe`` runs the phases with the suite's ``Coordinator`` (one per phase: the next rung depends on the
last one's records) behind the users' protocol (``take``, ``done``, ``forget``) and ``record``, clock
injected; ``server`` turns its records into ``queue_model.Server``. A phase waits for its answers, and
after the last for ``record_wait_s`` at most for their records; an answer not in by ``overdue_s`` after
the phase's last question was handed out is overdue (see ``search_options``), and the probe goes on
with what came, saying so in its notes. Pure: no Locust.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import StatisticsError, fmean, linear_regression

from bench_tasks.capacity.queue_model import QUESTION_TOKENS, Server
from bench_tasks.capacity.search_options import RECORD_WAIT_S, SearchOptions
from bench_tasks.classroom import SYSTEM, TOPICS
from bench_tasks.figures import number, succeeded
from bench_tasks.statistics import median
from bench_tasks.suite import Coordinator, Job, Phase

SCENARIO = "probe"
BURST, PROMPT, ANSWERS_PHASE = "probe-burst", "probe-prompt", "probe-answers"
ANSWERS = 12  # two first questions per topic: enough to see how long the answers run
MAX_BURST = 64  # a server that seats this many at once has no slot limit a class of students would meet
SEEN_S = 0.005  # a first token later by less than this is the network's and the scheduler's noise, not prefill
PAUSE_TOKENS = 256  # the answer decoded while the long prompt is read: long enough to span its reading
PAUSE_SEEN_S = 0.05  # a prompt read faster than this pauses nothing worth modelling


def kind(phase: str) -> str:
    """Which of the probe's phases a job belongs to: BURST, PROMPT or ANSWERS_PHASE."""
    return BURST if phase.startswith(BURST + "-") else phase


def burst_phase(k: int) -> Phase:
    name = f"{BURST}-{k}"
    return Phase(name, SCENARIO, k, [Job(SCENARIO, name, 1, i, concurrency=k) for i in range(k)], barrier=True)


def prompt_phase(tokens: int, users: int = 1) -> Phase:
    """The long prompt, and first (index 0) the answer that decodes while it is read (no size)."""
    return Phase(PROMPT, SCENARIO, users, [Job(SCENARIO, PROMPT, 1, 0), Job(SCENARIO, PROMPT, 1, 1, size=tokens)])


def answers_phase(users: int) -> Phase:
    return Phase(ANSWERS_PHASE, SCENARIO, users, [Job(SCENARIO, ANSWERS_PHASE, 1, i) for i in range(ANSWERS)])


def longest_prompt(max_tokens: int) -> int:
    """About the longest prompt a class sends: the instructions, a conversation's questions, and all but
    its last answer at their longest (a token is about four characters of English)."""
    turns = len(TOPICS[0])
    return len(SYSTEM) // 4 + turns * QUESTION_TOKENS + (turns - 1) * max_tokens


def _ok(rows: list[dict]) -> list[dict]:
    return [row for row in rows if succeeded(row)]


def served_at_once(rows: list[dict]) -> list[dict]:
    """The burst's requests that got a slot at once: their first token came in the first half of the
    time to the first answer's end (one that waited for a slot gets its first token as that answer
    ends, a little before the client sees its end when prefill is fast). Times are from the common
    release instant, so records of several workers compare."""
    timed = []
    for row in _ok(rows):
        ttft, e2e = number(row.get("ttft_s")), number(row.get("e2e_s"))
        if ttft is not None and e2e is not None:
            offset = number(row.get("release_offset_s")) or 0.0
            timed.append((offset + ttft, offset + e2e, row))
    if not timed:
        return []
    first_token, first_end = min(first for first, _, _ in timed), min(end for _, end, _ in timed)
    halfway = (first_token + first_end) / 2
    return [row for first, _, row in timed if first < halfway]


def fit_token_time(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(seconds per token decoding alone, seconds added per other request decoding): a least-squares
    line through (requests decoding at once, seconds per token), its slope kept at 0 or more."""
    if not points:
        raise ValueError("no decode rate was measured")
    xs, ys = [k - 1 for k, _ in points], [y for _, y in points]
    try:
        slope = max(linear_regression(xs, ys).slope, 0.0)
    except StatisticsError:  # one number decoding at once: no slope to see
        slope = 0.0
    mean_y = fmean(ys)
    alone = mean_y - slope * fmean(xs)
    if alone <= 0:  # a line that would decode alone in no time: a flat rate says more
        return mean_y, 0.0
    return alone, slope


@dataclass
class Probe:
    max_tokens: int
    clock: Callable[[], float]
    max_burst: int = MAX_BURST
    record_wait_s: float = RECORD_WAIT_S
    overdue_s: float = SearchOptions().overdue_s
    on_enter: Callable[[Phase], None] | None = None  # a probe phase opened
    on_take: Callable[[Job], None] | None = None
    phase: Phase | None = None
    finished: bool = False
    rows: dict[str, list[dict]] = field(default_factory=dict)  # phase -> its records
    slots: int | None = None  # None: no slot limit seen up to the largest burst
    notes: list[str] = field(default_factory=list)  # what the probe saw that the figures do not say
    _coordinator: Coordinator | None = None
    _handed: int = 0  # the phase's questions handed out
    _answered: int = 0  # and answered
    _handed_at: float | None = None  # when its last question was handed out
    _answered_at: float | None = None  # when the last answer came, or the phase's answers were all in

    def __post_init__(self) -> None:
        self._open(burst_phase(1))

    # -- the users' protocol --
    def take(self, scenario: str, user: str) -> Job | None:
        if self.finished or self._coordinator is None:
            return None
        job = self._coordinator.take(scenario, user)
        if job is None:
            return None
        self._handed += 1
        if self._handed == len(self.phase.jobs):
            self._handed_at = self.clock()
        if self.on_take is not None:
            self.on_take(job)
        return job

    def done(self, job: Job) -> None:
        if self._coordinator is not None and self.phase is not None and job.phase == self.phase.name:
            self._coordinator.done(job)
            self._answered += 1
            self._answered_at = self.clock()
        self.poll()

    def give_back(self, job: Job) -> None:
        if self._coordinator is not None and self.phase is not None and job.phase == self.phase.name:
            self._coordinator.give_back(job)

    def forget(self, user: str) -> list[Job]:
        return self._coordinator.forget(user) if self._coordinator is not None else []

    def waiting_on(self) -> str:
        if self._coordinator is None:
            return "done" if self.finished else "nothing"
        if self._coordinator.finished:
            return f"the records of {self.phase.name}"
        return self._coordinator.waiting_on()

    def record(self, row: dict) -> None:
        if self.phase is not None and row.get("phase") == self.phase.name and row.get("scenario") == SCENARIO:
            self.rows.setdefault(self.phase.name, []).append(row)
            self.poll()

    def poll(self) -> None:
        if self.finished or self._coordinator is None:
            return
        now = self.clock()
        if not self._coordinator.finished:
            if self._handed_at is not None and now - self._handed_at >= self.overdue_s:
                self.notes.append(f"{len(self.phase.jobs) - self._answered} of the {len(self.phase.jobs)} answers of "
                                  f"{self.phase.name} were overdue ({self.overdue_s:g} s after the last question): "
                                  "the probe went on with what came")
                self._next()
            return
        if self._answered_at is None:  # closed by forget alone: no answer to wait from
            self._answered_at = now
        came = len(self.rows.get(self.phase.name, []))
        if came >= self.phase.expected_records or now - self._answered_at >= self.record_wait_s:
            self._next()

    # -- the phases --
    def _open(self, phase: Phase) -> None:
        self.phase, self._handed, self._answered, self._handed_at, self._answered_at = phase, 0, 0, None, None
        self._coordinator = Coordinator([phase], clock=self.clock)
        if self.on_enter is not None:
            self.on_enter(phase)

    def _next(self) -> None:
        phase = self.phase
        rows = self.rows.get(phase.name, [])
        if kind(phase.name) == BURST:
            self._after_burst(phase.users, rows)
        elif phase.name == PROMPT:
            self._open(answers_phase(phase.users))
        else:
            self.finished, self._coordinator = True, None

    def _after_burst(self, k: int, rows: list[dict]) -> None:
        ok, at_once = _ok(rows), len(served_at_once(rows))
        if len(ok) < k:
            failed = len(rows) - len(ok)
            self.notes.append(f"{max(failed, k - len(ok))} of {k} requests sent at once failed")
            if k == 1:  # nothing measured: the search goes on without the model
                self.finished, self._coordinator = True, None
                return
            self.slots = max(k // 2, 1)  # the largest burst the server took, all at once
        elif at_once < k:
            self.slots = at_once
        elif k < self.max_burst:
            self._open(burst_phase(min(2 * k, self.max_burst)))
            return
        else:
            self.notes.append(f"all {k} requests sent at once were served at once: no slot limit seen")
        # The last rung's users stay: a user stopped while its job is on the way (a worker's) would take the
        # job with it. The server answers as many at once as it has slots, whoever waits.
        self._open(prompt_phase(longest_prompt(self.max_tokens), users=k))

    # -- the figures --
    def server(self, unlimited_slots: int) -> Server | None:
        """The probe's figures as the model's server (``unlimited_slots`` when no slot limit was seen),
        or None when the probe measured too little (``why`` says what)."""
        try:
            return self._server(unlimited_slots)
        except ValueError as exc:
            self.notes.append(str(exc))
            return None

    def why(self) -> str:
        return "; ".join(self.notes)

    def _server(self, unlimited_slots: int) -> Server:
        first = _ok(self.rows.get(burst_phase(1).name, []))
        if not first:
            raise ValueError("the first request of the probe failed")
        points = []
        for name, rows in self.rows.items():
            if kind(name) != BURST:
                continue
            k = int(name.rsplit("-", 1)[1])
            rate = median([number(row.get("decode_tps")) for row in served_at_once(rows)])
            if rate:
                points.append((min(k, self.slots or k), 1.0 / rate))
        token_s, per_stream = fit_token_time(points)
        ttft_1, read_1 = number(first[0].get("ttft_s")), read_tokens(first[0])
        prefill_tps = self._prefill_tps(ttft_1, read_1)
        overhead = ttft_1 - (read_1 / prefill_tps if prefill_tps else 0.0)
        answers = _ok(self.rows.get(ANSWERS_PHASE, []))
        lengths = tuple(int(n) for n in (number(row.get("completion_tokens")) for row in answers) if n)
        if not lengths:
            self.notes.append(f"no answer's length was measured: taken as {self.max_tokens} tokens")
        first_prompt = median([number(row.get("prompt_tokens")) for row in answers])
        # A server that served the instructions the questions share from its cache keeps prefixes: a turn
        # then reads its question alone (what the cache did not hold of a first question: the question).
        cached = [row for row in answers if cached_tokens(row)]
        question = median([read_tokens(row) for row in cached])
        pause = self._pause_share(prefill_tps, first[0], per_stream) if prefill_tps else 0.0
        return Server(slots=self.slots or unlimited_slots, token_s=token_s, token_s_per_stream=per_stream,
                      first_token_s=max(overhead, 0.0), prefill_tps=prefill_tps, prefill_pause_share=pause,
                      answer_tokens=lengths or (self.max_tokens,),
                      first_prompt_tokens=int(first_prompt) if first_prompt else len(SYSTEM) // 4 + QUESTION_TOKENS,
                      question_tokens=int(question) if question else QUESTION_TOKENS, cached_history=bool(cached))

    def _prompt_rows(self) -> tuple[dict | None, dict | None]:
        """The long prompt's record and the record of the answer decoded beside it (None: failed)."""
        rows = _ok(self.rows.get(PROMPT, []))
        long = [row for row in rows if number(row.get("prompt_size"))]
        beside = [row for row in rows if not number(row.get("prompt_size"))]
        return (long[0] if long else None), (beside[0] if beside else None)

    def _prefill_tps(self, ttft_1: float, read_1: float) -> float | None:
        """Prompt tokens read per second, from the long prompt's first token against the first rung's
        (the tokens each had to read: its prompt less what the server's cache held); None when the long
        one came less than ``SEEN_S`` later (reading a prompt is too fast to see, or to matter)."""
        long, _ = self._prompt_rows()
        if long is None:
            self.notes.append("the long prompt failed: reading a prompt taken as free")
            return None
        ttft, tokens = number(long.get("ttft_s")), read_tokens(long)
        if ttft is None or not tokens or ttft - ttft_1 < SEEN_S or tokens <= read_1:
            return None
        return (tokens - read_1) / (ttft - ttft_1)

    def _pause_share(self, prefill_tps: float, first: dict, per_stream: float) -> float:
        """The share of the long prompt's reading time that the answer sent beside it lost: how much longer
        it took than the first rung's answer alone (``first``: its first token, then each token at its
        rate; beside the long prompt's own short answer for as many steps), over the reading time. It may
        lose it before its first token (llama.cpp reads prompts that came together in one batch) or while
        decoding. 0 (with a note) when that answer ended before the reading did, or failed."""
        long, beside = self._prompt_rows()
        if long is None:
            return 0.0
        reading_s = read_tokens(long) / prefill_tps
        if reading_s < PAUSE_SEEN_S:
            return 0.0
        read_span, beside_span = _span(long), beside and _span(beside)
        if not read_span or not beside_span or read_span[0] > beside_span[1]:  # the answer ended before the read
            self.notes.append("no answer was streaming when the long prompt's reading ended: whether reading a "
                              "prompt pauses the others is not known, taken as not")
            return 0.0
        tokens, ttft_1, rate_1 = (number(row.get(c)) for row, c in
                                  ((beside, "completion_tokens"), (first, "ttft_s"), (first, "decode_tps")))
        e2e = number(beside.get("e2e_s"))
        if not tokens or not rate_1 or ttft_1 is None or e2e is None:
            return 0.0
        together = min((number(long.get("completion_tokens")) or 1.0) - 1, tokens - 1)  # steps shared
        alone_s = ttft_1 + (tokens - 1) / rate_1 + together * per_stream
        return min(max((e2e - alone_s) / reading_s, 0.0), 1.0)


def _span(row: dict) -> tuple[float, float] | None:
    """When a request's first token came and when it ended, on the run's common clock (the master's
    when the records came from workers): for the long prompt, when its reading ended."""
    sent, ttft, e2e = (number(row.get(c)) for c in ("t_send", "ttft_s", "e2e_s"))
    if None in (sent, ttft, e2e):
        return None
    sent += number(row.get("clock_offset_s")) or 0.0
    return sent + ttft, sent + e2e


def cached_tokens(row: dict) -> float:
    """Prompt tokens the server says its cache held (usage's cached_tokens, or llama.cpp's own cache_n)."""
    return number(row.get("cached_tokens")) or number(row.get("engine_cache_n")) or 0.0


def read_tokens(row: dict) -> float:
    """Prompt tokens the server had to read: the prompt less what its cache held."""
    return max((number(row.get("prompt_tokens")) or 0.0) - cached_tokens(row), 0.0)
