"""A queueing model of the classroom: how a server of known timing answers a class of N students.

The server is what the capacity search's probe measured (``Server``): ``slots`` requests served at
once, the rest waiting first come, first served; a request that gets a slot sees its first token
after ``first_token_s`` plus its prompt read at ``prefill_tps`` (when the server keeps prefixes,
``cached_history``, a later turn reads only its question: the conversation so far, answers included, is in
its cache, as llama.cpp's slots and host cache, vLLM's and SGLang's prefix caches keep them; a first turn
reads ``first_read_tokens``, its prompt less the opening every prompt of a run shares: each conversation opens
with its own code, bench_tasks.run_mark, so no other's instructions are in the cache), then decodes the rest
of its answer token by token, each token taking ``token_s + token_s_per_stream * (k - 1)`` seconds
while k requests decode at once (all decoding requests advance together: one step of the engine
makes one token for each). Where reading a prompt pauses the answers streaming beside it
(``prefill_pause_share``, as the probe measured it: llama.cpp's 1, an engine that reads beside the
decoding 0), every decoding request stands still for that share of each prompt's reading, and prompts
are read one after another. Answers are as long as the probe's answers to the classroom's first
questions (drawn from them), and a conversation's prompt grows by the last answer and a question
each turn, as ``bench_tasks.classroom.Student``'s does.

The class is ``bench_tasks.classroom``'s: each student arrives after a delay uniform in 0 to the top
of the think-time range, asks, waits for the whole answer, thinks for a time uniform in the range,
and asks again; a conversation has ``turns`` questions, then a fresh one starts. ``simulate`` runs
that closed loop as a seeded discrete-event simulation and returns the predicted requests (record
dicts: ``t_send`` (when it was asked, on the model's clock), ``ttft_s``, ``ttfb_s`` (taken as the first
token's: no later than it), ``e2e_s``, ``decode_tps``, ``itl_s``, ``prompt_tps``), leaving out those asked
while the class was arriving;
``predict`` judges them with the SLO's goals on their point estimates (the model has no noise of a
window: it is the class's steady state) and finds the largest class that meets the SLO by bisection.
Pure and stdlib-only; deterministic for a seed; a whole prediction takes well under a second.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from statistics import fmean

from bench_tasks import slo as slos
from bench_tasks.classroom import TOPICS, ThinkTime

REQUESTS = 8000  # predicted requests per class: its p95 within about 5% (2000: within 20%)
SEED = 22
QUESTION_TOKENS = 20  # a later question (one sentence) and its chat template, when the probe cannot tell


@dataclass(frozen=True)
class Server:
    slots: int
    token_s: float  # seconds per decoded token for one request decoding alone
    token_s_per_stream: float = 0.0  # added to each token's time per other request decoding at once
    first_token_s: float = 0.0  # from sending to the first token of a short prompt served at once, less its prefill
    prefill_tps: float | None = None  # prompt tokens read per second; None: too fast to matter
    answer_tokens: tuple[int, ...] = (256,)  # answer lengths (completion tokens), drawn from
    first_prompt_tokens: int = 60  # a conversation's first prompt: the instructions and the first question
    question_tokens: int = QUESTION_TOKENS  # what a question adds to the conversation besides the last answer
    cached_history: bool = False  # the server keeps prefixes: a later turn reads only its question
    first_read_tokens: int | None = None  # with cached_history, what a first turn reads (None: its whole prompt)
    prefill_pause_share: float = 0.0  # of a prompt's reading time, what every decoding request stands still

    def __post_init__(self) -> None:
        if self.slots < 1 or self.token_s <= 0 or self.token_s_per_stream < 0 or not self.answer_tokens:
            raise ValueError("a server needs slots >= 1, token_s > 0, token_s_per_stream >= 0 and answer lengths")

    def token_time_s(self, decoding: int) -> float:
        return self.token_s + self.token_s_per_stream * (decoding - 1)

    def prefill_s(self, tokens: int) -> float:
        return 0.0 if not self.prefill_tps else tokens / self.prefill_tps

    def read_tokens(self, prompt: int, turn: int) -> int:
        """The tokens a turn's prompt of ``prompt`` tokens has the server read."""
        if not self.cached_history:
            return prompt
        if turn > 1:
            return self.question_tokens
        return prompt if self.first_read_tokens is None else min(self.first_read_tokens, prompt)


@dataclass(frozen=True)
class ClassFigures:
    students: int
    meets: bool
    figures: dict  # each goal's figure (``Goal.figure``: ttft_p95_s, decode_tps_p5) on the predicted requests
    requests_per_s: float  # how fast the class asks, steady
    response_s: float  # mean time from asking to the whole answer
    values: dict = field(default_factory=dict, repr=False)  # each goal's column: the predicted values, sorted
    series: dict = field(default_factory=dict, repr=False)  # the same values in the order they were asked


@dataclass
class Prediction:
    """The model's classes, run as they are asked for (each is run once), and its capacity."""

    server: Server
    think: ThinkTime
    slo: slos.Slo
    capacity: int = 0  # the largest class predicted to meet the SLO (0: none); set by ``predict``
    requests: int = REQUESTS
    seed: int = SEED
    classes: dict[int, ClassFigures] = field(default_factory=dict)

    def judge(self, students: int) -> ClassFigures:
        if students not in self.classes:
            self.classes[students] = judge_class(self.server, self.think, self.slo, students, self.requests, self.seed)
        return self.classes[students]


def simulate(server: Server, think: ThinkTime, students: int, requests: int = REQUESTS, seed: int = SEED,
             turns: int = len(TOPICS[0])) -> tuple[list[dict], float]:
    """The predicted requests of a class of ``students`` (those asked after it arrived), and the
    seconds of the class's steady run they were asked in."""
    return _Classroom(server, think, students, turns, random.Random(seed * 1000003 + students)).run(requests)


ASK, FIRST_TOKEN = 0, 1


class _Classroom:
    """The closed loop's state: events in time order, the queue for a slot, the requests decoding.

    All decoding requests advance together, so one counter (``made``: tokens each has made since the
    start) says when each is done; between events it grows at the rate of the current number decoding."""

    def __init__(self, server: Server, think: ThinkTime, students: int, turns: int, rng: random.Random) -> None:
        self.server, self.think, self.turns, self.rng = server, think, turns, rng
        self.warm_s = 2 * think.max_s  # the ramp and the first think: a steady class from here on
        self.prompts = [server.first_prompt_tokens] * students
        self.turn = [1] * students
        # (time, sequence, kind, payload): ASK (a student), FIRST_TOKEN (a request)
        self.events = [(think.arrival(rng), student, ASK, student) for student in range(students)]
        heapq.heapify(self.events)
        self.sequence = students
        self.waiting: deque = deque()
        self.busy = 0
        self.decoding: list = []  # (``made`` when this one is done, sequence, request)
        self.made = 0.0
        self.now = 0.0
        self.paused_until = 0.0  # decoding stands still until then: a prompt is being read (pausing servers)
        self.rows: list[dict] = []
        self.asked: list[float] = []  # when the predicted requests were asked

    def run(self, requests: int) -> tuple[list[dict], float]:
        while len(self.rows) < requests:
            k = len(self.decoding)
            paused = self.now < self.paused_until
            rate = 1.0 / self.server.token_time_s(k) if k and not paused else 0.0
            t_done = self.now + (self.decoding[0][0] - self.made) / rate if rate else math.inf
            t_resume = self.paused_until if paused and k else math.inf
            t_event = self.events[0][0] if self.events else math.inf
            t = min(t_done, t_event, t_resume)
            if t == math.inf:
                break
            self.made += (t - self.now) * rate
            self.now = t
            if t_done <= t_event and t_done <= t_resume:
                self._done(heapq.heappop(self.decoding)[2])
                continue
            if t_resume < t_event:
                continue  # the prompt is read: decoding goes on
            _, _, kind, payload = heapq.heappop(self.events)
            if kind == ASK:
                self._ask(payload)
            else:  # the first token: the rest of the answer decodes with the others
                self._push(self.decoding, self.made + max(payload[4] - 1, 0), payload)
        span = self.asked[-1] - self.asked[0] if self.asked else 0.0
        return self.rows, span

    def _push(self, heap: list, key: float, *payload) -> None:
        self.sequence += 1
        heapq.heappush(heap, (key, self.sequence, *payload))

    def _ask(self, student: int) -> None:
        # a request: [student, asked at, prompt tokens, first token at, answer tokens, tokens to read]
        prompt = self.prompts[student]
        request = [student, self.now, prompt, None, self.rng.choice(self.server.answer_tokens),
                   self.server.read_tokens(prompt, self.turn[student])]
        if self.now >= self.warm_s:
            self.asked.append(self.now)
        if self.busy < self.server.slots:
            self._start(request)
        else:
            self.waiting.append(request)

    def _start(self, request: list) -> None:
        server = self.server
        self.busy += 1
        read = request[5]
        start = self.now
        if server.prefill_pause_share:  # read after the prompts before it, every decoding request waiting
            start = max(start, self.paused_until)
            self.paused_until = start + server.prefill_pause_share * server.prefill_s(read)
        request[3] = start + server.first_token_s + server.prefill_s(read)
        self._push(self.events, request[3], FIRST_TOKEN, request)

    def _done(self, request: list) -> None:
        self.busy -= 1
        if self.waiting:
            self._start(self.waiting.popleft())
        student, t_ask, prompt, t_first, answer, _ = request
        if t_ask >= self.warm_s:
            self.rows.append(_predicted(t_ask, t_first, self.now, prompt, answer))
        if self.turn[student] >= self.turns:  # a fresh conversation
            self.turn[student], self.prompts[student] = 1, self.server.first_prompt_tokens
        else:
            self.turn[student] += 1
            self.prompts[student] += answer + self.server.question_tokens
        self._push(self.events, self.now + self.think.draw(self.rng), ASK, student)


def _predicted(t_ask: float, t_first: float, t_end: float, prompt: int, answer: int) -> dict:
    """A predicted request as a record's figures."""
    ttft, decode_s, tokens = t_first - t_ask, t_end - t_first, answer - 1
    return {"ok": True, "t_send": t_ask, "ttft_s": ttft, "ttfb_s": ttft, "e2e_s": t_end - t_ask,
            "decode_tps": tokens / decode_s if tokens > 0 and decode_s > 0 else None,
            "itl_s": decode_s / tokens if tokens > 0 else None,
            "prompt_tps": prompt / ttft if ttft > 0 else None}


def judge_class(server: Server, think: ThinkTime, slo: slos.Slo, students: int,
                requests: int = REQUESTS, seed: int = SEED) -> ClassFigures:
    rows, span = simulate(server, think, students, requests, seed)
    asked = sorted(rows, key=lambda row: row["t_send"])
    series = {goal.column: slos.in_order(asked, goal.column) for goal in slo.goals}
    values = {column: sorted(known) for column, known in series.items()}
    figures = {goal.figure: slos.percentile(rows, goal.column, goal.quantile) for goal in slo.goals}
    meets = bool(rows) and all(goal.holds(figures[goal.figure]) for goal in slo.goals)
    rate = (len(rows) - 1) / span if span > 0 else 0.0
    response = fmean(row["e2e_s"] for row in rows) if rows else 0.0
    return ClassFigures(students, meets, figures, rate, response, values, series)


def saturation_students(server: Server, think: ThinkTime) -> int:
    """The class that keeps every slot busy on average (a fluid bound): the knee lies at or below it."""
    answer = fmean(server.answer_tokens)
    busy_s = server.first_token_s + (answer - 1) * server.token_time_s(server.slots)
    think_mean = (think.min_s + think.max_s) / 2
    return max(1, math.ceil(server.slots * (busy_s + think_mean) / busy_s))


def predict(server: Server, think: ThinkTime, slo: slos.Slo, max_students: int,
            requests: int = REQUESTS, seed: int = SEED) -> Prediction:
    """The largest class (up to ``max_students``) whose predicted requests meet the SLO: from the fluid
    bound, halving or doubling the step until a class on each side is found, then bisecting (the
    model's classes grow worse as they grow)."""
    prediction = Prediction(server, think, slo, requests=requests, seed=seed)
    good, bad = 0, max_students + 1  # the largest class that met, the smallest that missed
    students = min(saturation_students(server, think), max_students)
    while bad - good > 1:
        if prediction.judge(students).meets:
            good = students
            students = min(2 * students, max_students) if bad > max_students else (good + bad) // 2
        else:
            bad = students
            students = students // 2 if good == 0 else (good + bad) // 2
        if students <= good or students >= bad:
            break
    prediction.capacity = good
    return prediction
