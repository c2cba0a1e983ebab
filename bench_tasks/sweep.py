"""Which rates an open loop offers, one after the other: a run at one rate, a sweep, a sweep to saturation.

``RateOptions`` (``run rate``): one schedule at ``--rate`` for ``--duration`` or ``--requests`` (a
locustfile run given neither: until it is stopped), all of it the window (phase ``rate-R``), no settle, no load kept after it. ``SweepOptions`` (``sweep``): each
rate a step of ``bench_tasks.open_loop`` (a settle, a window of at least ``window_s`` and
``min_requests``, the load kept until the window's requests are answered); with ``rates`` None
(``--rates auto``) the sweep first finds the saturation rate.

**The saturation rate** is the most answers per second the server gives when it never lacks work: the
rate at which an open loop's achieved rate stops following the offered one (offered more, the server
still answers this many per second, and the requests waiting for it grow without bound). A sweep to
saturation measures it as a closed loop ``Ladder``: ``flood-N`` steps keep N = 1, 2, 4, ... requests
in flight, each sent as the last was answered, and time their answers (``open_loop.Flood``); the
ladder stops where doubling N raised the answers' rate by less than ``PLATEAU_GAIN`` (or at
``--max-in-flight``: then the server may answer more than the client let it, which the sweep says).
The saturation rate is the highest rate the rungs measured. Why not step an open loop's rate up until
it falls behind: above saturation its queue grows for as long as the step lasts, so what it measures
depends on how long it waited, and draining that queue before the next step costs as long again;
a closed loop holds N requests, settles at once and drains in one answer's time (kubernetes-sigs/
inference-perf's probe reasons the same way). Then the measured rates are spread below it
(``AUTO_FRACTIONS`` of it, three significant digits), the last at it; each rate's window then says
whether the open loop followed (``analysis.rates``).

Each rate's schedule is drawn from its own seed (``SEED/rate-R``): a rate run again, alone or in
another sweep, offers the same times. Pure: no Locust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench_tasks.arrivals import Arrivals, Schedule
from bench_tasks.open_loop import DRAIN_LIMIT_S, MAX_IN_FLIGHT, Flood, Step, window_name

AUTO = "auto"
PLATEAU_GAIN = 0.05  # doubling the requests in flight raised the answers' rate by less than this: a plateau
AUTO_FRACTIONS = (0.25, 0.5, 0.75, 0.9, 1.0)  # the measured rates, as shares of the saturation rate
SIGNIFICANT = 3  # digits an automatic rate is rounded to (its phase's name)


def parse_rates(text) -> tuple[float, ...] | None:
    """``1,2,4,8`` (ascending, each positive) or ``auto`` (None)."""
    text = str(text).strip()
    if text == AUTO:
        return None
    try:
        rates = tuple(float(part) for part in text.split(","))
    except ValueError:
        rates = ()
    if not rates or any(not 0 < r < math.inf for r in rates) or len(set(rates)) != len(rates):
        raise ValueError(f"--rates {text!r}: expected auto or distinct positive requests per second, e.g. 1,2,4,8")
    return tuple(sorted(rates))


def rounded(rate_rps: float, digits: int = SIGNIFICANT) -> float:
    return float(f"{rate_rps:.{digits}g}")


@dataclass(frozen=True)
class RateOptions:
    rate_rps: float
    arrivals: Arrivals = Arrivals()
    seed: int = 0
    duration_s: float | None = None
    requests: int | None = None
    max_in_flight: int = MAX_IN_FLIGHT
    drain_limit_s: float = DRAIN_LIMIT_S

    def __post_init__(self) -> None:
        if self.duration_s is not None and self.requests is not None:
            raise ValueError("a run at one rate lasts --duration S or --requests N (one of them; neither: until "
                             "stopped)")
        if self.max_in_flight < 1:
            raise ValueError("--max-in-flight is at least 1")

    def schedule(self) -> Schedule:
        return Schedule(self.rate_rps, self.arrivals, f"{self.seed}/{window_name(self.rate_rps)}", self.duration_s,
                        self.requests)


class OneRate:
    """A plan of one step: the whole schedule is the window."""

    def __init__(self, options: RateOptions) -> None:
        self.options = options

    def first(self) -> Step:
        o = self.options
        return Step(window_name(o.rate_rps), o.schedule(), o.rate_rps, drain_limit_s=o.drain_limit_s)

    def next(self, step) -> None:
        return None


@dataclass(frozen=True)
class SweepOptions:
    rates: tuple[float, ...] | None = None  # None: auto
    arrivals: Arrivals = Arrivals()
    seed: int = 0
    settle_s: float = 10.0
    window_s: float = 30.0
    min_requests: int = 20
    max_in_flight: int = MAX_IN_FLIGHT
    drain_limit_s: float = DRAIN_LIMIT_S
    probe_s: float = 10.0  # each flood's timed answers span at least this long

    def __post_init__(self) -> None:
        if self.max_in_flight < 1 or self.min_requests < 1 or self.window_s <= 0 or self.settle_s < 0:
            raise ValueError("need --max-in-flight >= 1, --min-requests >= 1, --window-s > 0 and --settle-s >= 0")

    def step(self, rate_rps: float) -> Step:
        name = window_name(rate_rps)
        schedule = Schedule(rate_rps, self.arrivals, f"{self.seed}/{name}")
        return Step(name, schedule, rate_rps, settle_s=self.settle_s, window_s=self.window_s,
                    min_requests=self.min_requests, keep_load=True, drain_limit_s=self.drain_limit_s)


PLATEAU, LIMIT = "plateau", "max_in_flight"  # why the ladder stopped


@dataclass
class Ladder:
    """Closed-loop rungs of 1, 2, 4, ... requests in flight until the answers' rate stops growing."""

    max_in_flight: int
    gain: float = PLATEAU_GAIN
    measured: dict = field(default_factory=dict)  # in flight -> answers per second (None: too few answers)
    stopped: str | None = None  # PLATEAU, or LIMIT: the server may answer more than the client let it

    def next(self, in_flight: int, answers_rps: float | None) -> int | None:
        self.measured[in_flight] = answers_rps
        before = [rate for n, rate in self.measured.items() if n < in_flight and rate is not None]
        if answers_rps is not None and before and answers_rps < max(before) * (1 + self.gain):
            self.stopped = PLATEAU  # twice the requests in flight bought less than the gain
            return None
        if in_flight >= self.max_in_flight:
            self.stopped = LIMIT
            return None
        return min(2 * in_flight, self.max_in_flight)

    @property
    def saturation_rps(self) -> float | None:
        rates = [rate for rate in self.measured.values() if rate is not None]
        return max(rates) if rates else None


class Sweep:
    """The rates of ``options``, in order; with ``rates`` None, the ladder first and then the rates below
    its saturation rate."""

    def __init__(self, options: SweepOptions) -> None:
        self.options = options
        self.ladder = Ladder(options.max_in_flight) if options.rates is None else None
        self.rates: list[float] = list(options.rates or ())

    def first(self):
        if self.ladder is not None:
            return self._flood(1)
        return self.options.step(self.rates[0])

    def next(self, step):
        if isinstance(step, Flood):
            following = self.ladder.next(step.in_flight, step.answers_rps())
            if following is not None:
                return self._flood(following)
            saturation = self.ladder.saturation_rps
            if not saturation:
                return None  # no rung was answered: nothing to spread
            self.rates = sorted({rounded(saturation * share) for share in AUTO_FRACTIONS})
            return self.options.step(self.rates[0])
        done = [r for r in self.rates if window_name(r) == step.name]
        later = [r for r in self.rates if done and r > done[0]]
        return self.options.step(later[0]) if later else None

    def result(self) -> dict:
        """The plan's outcome, for the run's log (sweep.jsonl's ``end`` event): the rates it offered and,
        for a sweep to saturation, the floods' rates, the saturation rate and why the ladder stopped."""
        ladder = self.ladder
        return {"rates": self.rates, "floods": dict(ladder.measured) if ladder else None,
                "saturation_rps": ladder.saturation_rps if ladder else None,
                "stopped": ladder.stopped if ladder else None}

    def _flood(self, in_flight: int) -> Flood:
        o = self.options
        return Flood(in_flight, max(o.min_requests, 2 * in_flight), o.probe_s)
