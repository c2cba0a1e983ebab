"""When an open loop's requests are due: send times drawn once from a process, seeded, or given.

``Arrivals.parse("gamma:2")`` names the process between sends: ``constant`` (every 1/R seconds),
``poisson`` (exponential gaps, a coefficient of variation of 1) or ``gamma:CV`` (gamma gaps of mean 1/R
and coefficient of variation CV: shape 1/CV², scale CV²/R; CV 1 is Poisson, above 1 bursts, below 1 more
even; vLLM's ``--burstiness`` b is CV = 1/sqrt(b)). ``Schedule`` draws the due times (seconds from the
schedule's start, the k-th at the sum of k gaps) lazily, so a long run holds no list of them, from
``random.Random`` seeded with ``seed``: the same seed gives the same times on every machine and Python
(the generator and its seeding from a string are specified, not platform-dependent). It stops at
``duration_s`` or after ``requests`` sends, or never (a sweep's step takes what it needs).

Nothing here rescales the draws to land the last send at N / R (vLLM's ``get_request`` does, which
makes the gaps no longer independent): the offered rate is what the draws give, and the analysis
reports the rate the schedule actually offered beside the one asked for.

A trace's own times (a Mooncake trace, replayed as recorded) enter the same machinery as any iterable
of offsets: ``given(times)`` checks they never go back in time as they are read.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

CONSTANT, POISSON, GAMMA = "constant", "poisson", "gamma"


@dataclass(frozen=True)
class Arrivals:
    kind: str = POISSON
    cv: float = 1.0  # coefficient of variation of the gaps (constant: 0)

    @property
    def text(self) -> str:
        return f"{GAMMA}:{self.cv:g}" if self.kind == GAMMA else self.kind

    def gaps(self, rate_rps: float, rng: random.Random) -> Iterator[float]:
        """Endless gaps between sends, in seconds, of mean 1 / rate_rps."""
        mean_s = 1.0 / rate_rps
        if self.kind == CONSTANT:
            while True:
                yield mean_s
        elif self.kind == POISSON:
            while True:
                yield rng.expovariate(rate_rps)
        else:
            shape = 1.0 / self.cv ** 2
            scale = mean_s / shape
            while True:
                yield rng.gammavariate(shape, scale)


def parse(text: str) -> Arrivals:
    """``constant``, ``poisson`` or ``gamma:CV`` (CV > 0)."""
    text = str(text).strip().lower()
    if text == CONSTANT:
        return Arrivals(CONSTANT, 0.0)
    if text == POISSON:
        return Arrivals(POISSON, 1.0)
    kind, _sep, value = text.partition(":")
    try:
        cv = float(value)
    except ValueError:
        cv = math.nan
    if kind != GAMMA or not 0 < cv < math.inf:
        raise ValueError(f"arrivals {text!r}: expected constant, poisson or gamma:CV with CV > 0 (gamma:2 is burstier "
                         "than Poisson, gamma:0.5 more even)")
    return Arrivals(GAMMA, cv)


@dataclass(frozen=True)
class Schedule:
    """Due times, seconds from the start, of ``rate_rps`` sends per second from ``arrivals``."""

    rate_rps: float
    arrivals: Arrivals = Arrivals()
    seed: int | str = 0
    duration_s: float | None = None  # sends due before this; None: no end
    requests: int | None = None  # at most this many sends; None: no limit

    def __post_init__(self) -> None:
        if not 0 < self.rate_rps < math.inf:
            raise ValueError(f"a rate is a positive number of requests per second, got {self.rate_rps}")
        if self.duration_s is not None and self.duration_s <= 0 or self.requests is not None and self.requests < 1:
            raise ValueError("a schedule's duration is positive and its number of requests at least 1")

    def __iter__(self) -> Iterator[float]:
        rng = random.Random(f"{self.seed}")
        due, sent = 0.0, 0
        for gap in self.arrivals.gaps(self.rate_rps, rng):
            if self.requests is not None and sent >= self.requests:
                return
            # Constant times are k / R exactly, not a sum that gathers rounding over a long run.
            due = (sent + 1) / self.rate_rps if self.arrivals.kind == CONSTANT else due + gap
            if self.duration_s is not None and due >= self.duration_s:
                return
            sent += 1
            yield due


def given(times: Iterable[float]) -> Iterator[float]:
    """A trace's own due times (seconds from its start), checked as they are read: finite, from 0 on,
    never earlier than the one before."""
    last = 0.0
    for number, due in enumerate(times, start=1):
        due = float(due)
        if not math.isfinite(due) or due < last:
            raise ValueError(f"due time {number} ({due}) is {'not a number' if not math.isfinite(due) else 'earlier'}"
                             f" than the one before it ({last}): a trace's times must not go back")
        last = due
        yield due
