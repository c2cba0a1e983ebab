"""A Mooncake trace replayed on its own times through the open loop (``llm-bench run trace FILE``).

- ``TracePlan``: the open loop's plan (bench_tasks.open_loop) of one step, ``trace``: its due times are
  the trace's (``arrivals.given``: seconds after the first request, divided by ``--speed``), all of them
  its measured window. A job's index is its request's place in the trace, from 1; its record keeps when
  it was due and how late it left (``send_lag_s``), as a rate's does.
- ``opened``: the trace, checked whole, or trusted to the check the command line made (``summary_text``).
- ``TraceCursor``: the request of a job, read forward once through the trace (a user's job names its
  request by index; the jobs of a process come in order, give or take the users' wake-ups).
- ``ready``: the checks a replay makes of the server before anything is sent: the vocabulary measured on
  its tokenizer, no prompt shorter than its chat template, a sample of prompts counted exactly
  (TrafficError or TokenizerError, naming file and line).
- ``shareable_tokens``: what a request may be served from a prefix cache: its blocks an earlier request of
  the trace held, or (at least) the template and the opener every synthesized prompt opens with.

Pure: no Locust, no network but the count given.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterator
from itertools import islice

from bench_tasks.arrivals import given
from bench_tasks.open_loop import LEAD_S, POLL_S, WINDOW, Step
from bench_tasks.prompt import CountTokens
from bench_tasks.traffic.trace import Trace, TracePrompts, TraceRequest, TraceSummary
from bench_tasks.traffic.vocabulary import Vocabulary, measure

PHASE = "trace"
SAMPLE = 3  # prompts counted on the server before the replay: the first ones, the shortest and the longest
KEEP_AHEAD = 4096  # requests a cursor keeps that it read past (another user's, or another worker's)
TICK_S = 1.0  # how often Locust asks a shape for its users
CHANCE_WORDS = 2  # words of an unrelated block that may match by chance (a word in 64: 1 in 4096 for two)


def summary_text(trace: Trace) -> str:
    """What the check of a trace found, as the command line hands it to Locust (``--trace-summary``)."""
    return json.dumps(trace.summary.__dict__, separators=(",", ":"))


def opened(path: str, block_tokens: int, summary: str | None = None) -> Trace:
    """The trace at ``path``: checked whole in one pass (Trace.open), or, given the summary of the check the
    command line made, at once (a million lines take seconds to read; every line is checked again as the
    replay reads it, and a file changed since stops the replay, saying so)."""
    if not summary:
        return Trace.open(path, block_tokens)
    found = json.loads(summary)
    found["shortest"], found["longest"] = tuple(found["shortest"]), tuple(found["longest"])
    return Trace(path, block_tokens, TraceSummary(**found))


class TraceStep(Step):
    """The trace's one step: its pool of users sized by the trace's mean rate (it offers no rate of its own)."""

    def __init__(self, times, mean_rps: float, **kwargs) -> None:
        super().__init__(PHASE, times, None, **kwargs)
        self.mean_rps = mean_rps

    def part(self, now: float) -> str:
        return WINDOW  # every request of the trace is measured: none settles, none only keeps the load

    def users(self, max_in_flight: int, poll_s: float = POLL_S) -> int:
        # Users are added when the shape ticks (every second): idle ones enough for twice the mean rate until the
        # next tick and its spawn, as a trace comes in bursts.
        spare = math.ceil(2 * self.mean_rps * (TICK_S + self.lead_s + poll_s)) + 1
        return min(max_in_flight, sum(self.outstanding.values()) + len(self.pending) + spare)


class TracePlan:
    """``first()``: the trace's step; ``next()``: None (bench_tasks.sweep's plan protocol)."""

    def __init__(self, trace: Trace, speed: float = 1.0, requests: int | None = None, lead_s: float = LEAD_S) -> None:
        self.trace, self.speed, self.lead_s = trace, speed, lead_s
        self.requests = trace.summary.requests if requests is None else min(requests, trace.summary.requests)

    @property
    def span_s(self) -> float:
        """From the first request replayed to the last, as recorded (the first N of a trace: read up to N)."""
        summary = self.trace.summary
        if self.requests == summary.requests:
            return summary.span_s
        last = next(islice(self.trace.requests(), self.requests - 1, None))
        return (last.timestamp_ms - summary.first_timestamp_ms) / 1000

    @property
    def mean_rps(self) -> float:
        """The requests replayed per second, on average (all of them at once: as many as there are)."""
        span_s = self.span_s / self.speed
        return (self.requests - 1) / span_s if span_s > 0 and self.requests > 1 else float(self.requests)

    def due_times(self) -> Iterator[float]:
        return given(request.due_s for request in islice(self.trace.requests(self.speed), self.requests))

    def first(self) -> TraceStep:
        return TraceStep(self.due_times(), self.mean_rps, lead_s=self.lead_s)  # sized by the requests it replays

    def next(self, step) -> None:
        return None


class TraceCursor:
    """The trace's requests by their place (from 1), read forward once. A request read past on the way to a
    later one is kept for the user that will ask for it (up to ``keep`` of them, the oldest forgotten first:
    in a distributed run the others go to other workers)."""

    def __init__(self, requests: Iterator[TraceRequest], keep: int = KEEP_AHEAD) -> None:
        self._requests = enumerate(requests, 1)
        self._read = 0
        self._ahead: OrderedDict[int, TraceRequest] = OrderedDict()
        self.keep = keep

    def at(self, place: int) -> TraceRequest:
        if place in self._ahead:
            return self._ahead.pop(place)
        if place <= self._read:
            raise LookupError(f"request {place} of the trace was read past {self.keep} requests ago and forgotten")
        for number, request in self._requests:
            self._read = number
            if number == place:
                return request
            self._ahead[number] = request
            if len(self._ahead) > self.keep:
                self._ahead.popitem(last=False)
        raise LookupError(f"the trace has no request {place}")


def ready(trace: Trace, count_tokens: CountTokens, mark: str) -> TracePrompts:
    """The prompts of a replay on the server ``count_tokens`` asks, once the trace is checked against it:
    TokenizerError when its tokenizer cannot count exact texts; TrafficError (every line too short listed,
    in one more pass) when a prompt is shorter than the chat template; TokenizerError when a sample of
    prompts does not count exactly its input_length."""
    vocabulary = measure(count_tokens)
    least = vocabulary.overhead_tokens + 1
    if trace.summary.shortest[0] < least:
        Trace.open(trace.path, trace.block_tokens, min_input_tokens=least)  # raises, listing them all
    prompts = TracePrompts(vocabulary, mark, trace.block_tokens)
    prompts.check(count_tokens, _sample(trace))
    return prompts


def _sample(trace: Trace) -> list[TraceRequest]:
    """The first requests, and prompts of the shortest and the longest length with their lines (their words
    are not theirs, which need not be: every drawn word is one token, and no two merge)."""
    found = list(islice(trace.requests(), SAMPLE))
    for length, line in (trace.summary.shortest, trace.summary.longest):
        blocks = tuple(range(-(-length // trace.block_tokens)))
        found.append(TraceRequest(f"{trace.path}:{line}", 0.0, length, 1, blocks, 0.0, 0, 0))
    return found


def shareable_tokens(request: TraceRequest, vocabulary: Vocabulary) -> int:
    """The tokens a prefix cache may serve this request: the blocks an earlier request held (counted from the
    prompt's start, the template's own tokens among them), and at least what every prompt opens with; a few
    words more for an unrelated block's that match by chance."""
    return max(request.shared_tokens, vocabulary.overhead_tokens) + CHANCE_WORDS
