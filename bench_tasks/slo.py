"""A latency goal (SLO) and its verdict on a load step: the one verdict the search and the report share.

``parse("ttft_p95=1.0,decode_p5=10")``: the first token's 95th percentile at most 1 s, the 5th
percentile of per-user decode tok/s at least 10. Goals name a record figure and a percentile:
``ttft``, ``ttfb``, ``e2e``, ``itl`` (seconds, at most) and ``decode``, ``prompt`` (tok/s, at
least); ``errors=0.01`` allows that share of failed requests (default 0: any failure misses).

A request meets the SLO when it succeeded and each of its figures the goals name is known and
within its goal; goodput is the share of a step's requests that did. Each goal's percentile over a
step's successful requests comes with its 90% confidence interval, an end the requests cannot place
left open: by default ``statistics.window_quantile_interval`` (batch means on the requests in the
order they were asked: a step's requests are not independent, one busy period of the server delays
several in a row, and the order-statistic interval would claim too much); ``independent=True``
takes the order-statistic interval (``statistics.quantile_interval``) for samples that are. A step **meets** the
SLO when every goal's interval lies within its limit and its failed share is within ``errors``;
it **misses** when a goal's interval lies wholly beyond its limit (or a goal was not measured, or
too many requests failed); otherwise it is **unsure**: the requests cannot tell yet. Asked for a
final verdict, an unsure step is decided on its point estimates (``decided_on``); so is one whose
window, held to its limit, would still not tell (``shrink``: an interval narrows as the square root of
its requests, which grow with the window's time; ``hopeless`` says so). A step with any
request flagged ``client_saturated`` is not judged at all: the client measured itself, so its
figures are withheld.

Pure and stdlib-only, on record dicts (a record's JSON, or a DataFrame row as a dict): the Locust
process judges with it while the search runs, and ``analysis`` with the same code afterwards. A
top-level module, not the capacity search's: any load step can be judged by it (a sweep's rate, for
its goodput). The reasons a step missed (``missed``, ``straddling``) are part of its verdict and written
here; the lines a person reads as the search goes are ``bench_tasks.capacity.lines``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench_tasks.figures import number, succeeded
from bench_tasks.formatting import apart_from, ci
from bench_tasks.record import flag_set
from bench_tasks.statistics import BATCH_MEANS, Interval, quantile, quantile_interval, window_quantile_interval

MEETS, MISSES, UNSURE, SATURATED = "meets", "misses", "unsure", "client_saturated"
BY_INTERVAL, BY_POINT = "interval", "point estimate"  # what a verdict was decided on
LEVEL = 0.90  # each goal's interval: two-sided, so each end is a one-sided 95% bound
METHOD = BATCH_MEANS  # how a step's intervals are made (``independent=True``: ORDER_STATISTICS)
# goal name -> (record column, at_most): durations must stay under their goal, rates above it
GOAL_COLUMNS = {"ttft": ("ttft_s", True), "ttfb": ("ttfb_s", True), "e2e": ("e2e_s", True), "itl": ("itl_s", True),
                "decode": ("decode_tps", False), "prompt": ("prompt_tps", False)}
_GOAL = re.compile(r"(?P<name>[a-z0-9]+)_p(?P<pct>\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Goal:
    name: str  # as written: ttft_p95
    column: str  # the record's figure: ttft_s
    quantile: float  # 0.95
    limit: float
    at_most: bool

    @property
    def figure(self) -> str:
        """The step figure's name, unit last: ttft_p95_s, decode_tps_p5."""
        percentile = self.name.rsplit("_", 1)[1]
        if self.column.endswith("_s"):
            return f"{self.column[:-2]}_{percentile}_s"
        return f"{self.column}_{percentile}"

    @property
    def low(self) -> str:
        """The interval's lower end: ttft_p95_low_s, decode_tps_p5_low."""
        return self._part("low")

    @property
    def high(self) -> str:
        return self._part("high")

    @property
    def level(self) -> str:
        """The coverage the interval achieved (a share): ttft_p95_level."""
        return self._part("level", unit=False)

    def _part(self, part: str, unit: bool = True) -> str:
        if self.column.endswith("_s"):
            return f"{self.figure[:-2]}_{part}" + ("_s" if unit else "")
        return f"{self.figure}_{part}"

    @property
    def unit(self) -> str:
        return "s" if self.column.endswith("_s") else "tok/s"

    @property
    def label(self) -> str:
        """For a line of text: TTFT p95, decode p5."""
        name, percentile = self.name.rsplit("_", 1)
        return f"{name.upper() if self.at_most else name} {percentile}"

    def holds(self, value: float | None) -> bool:
        return value is not None and (value <= self.limit if self.at_most else value >= self.limit)

    def verdict(self, interval: Interval | None) -> str:
        """MEETS when the interval's good end is within the limit, MISSES when its bad end is beyond
        it (or nothing was measured), else UNSURE. An open end decides nothing."""
        if interval is None:
            return MISSES
        good, bad = (interval.high, interval.low) if self.at_most else (interval.low, interval.high)
        if good is not None and self.holds(good):
            return MEETS
        if bad is not None and not self.holds(bad):
            return MISSES
        return UNSURE

    def text(self) -> str:
        return f"{self.name} {'≤' if self.at_most else '≥'} {self.limit:g} {self.unit}"


@dataclass(frozen=True)
class Slo:
    goals: tuple[Goal, ...]
    errors: float = 0.0  # largest share of failed requests a step may have
    source: str = ""  # as given on the command line

    def text(self) -> str:
        failures = f"failed ≤ {self.errors:.1%}" if self.errors else "no failed request"
        return ", ".join([g.text() for g in self.goals] + [failures])


def parse(text: str) -> Slo:
    goals, errors = [], 0.0
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        try:
            limit = float(value)
        except ValueError:
            raise ValueError(f"SLO part {part!r}: expected NAME=NUMBER, e.g. ttft_p95=1.0") from None
        if not sep:
            raise ValueError(f"SLO part {part!r}: expected NAME=NUMBER, e.g. ttft_p95=1.0")
        if key == "errors":
            if not 0 <= limit < 1:
                raise ValueError(f"SLO errors={value}: a share of failed requests, from 0 to below 1")
            errors = limit
            continue
        match = _GOAL.fullmatch(key)
        if match is None or match["name"] not in GOAL_COLUMNS or not 0 < float(match["pct"]) <= 100:
            raise ValueError(f"SLO goal {key!r}: expected NAME_pQ with NAME one of {', '.join(GOAL_COLUMNS)} "
                             "and Q a percentile, e.g. ttft_p95=1.0 or decode_p5=10")
        column, at_most = GOAL_COLUMNS[match["name"]]
        goals.append(Goal(key, column, float(match["pct"]) / 100, limit, at_most))
    if not goals:
        raise ValueError(f"an SLO needs at least one goal, e.g. ttft_p95=1.0; got {text!r}")
    return Slo(tuple(goals), errors, str(text))


def flagged(row: dict, flag: str) -> bool:
    return flag in flag_set(row.get("flags"))


def meets(slo: Slo, row: dict) -> bool:
    """One request: succeeded, and every figure a goal names is known and within it."""
    return succeeded(row) and all(goal.holds(number(row.get(goal.column))) for goal in slo.goals)


def values(rows: list[dict], column: str) -> list[float]:
    return sorted(in_order(rows, column))


def in_order(rows: list[dict], column: str) -> list[float]:
    """The known values of ``column`` in the rows' order."""
    return [v for v in (number(row.get(column)) for row in rows) if v is not None]


def in_time_order(rows: list[dict]) -> list[dict]:
    """The rows in the order they were asked: by ``t_start`` when every row has one (unix seconds: the
    one clock several machines share, good to milliseconds where a batch of a window lasts tens of
    seconds; an order, never a duration), else by ``t_send`` (one process's clock), else as given."""
    for column in ("t_start", "t_send"):
        stamps = [number(row.get(column)) for row in rows]
        if rows and all(stamp is not None and stamp > 0 for stamp in stamps):
            return [row for _stamp, _i, row in sorted(zip(stamps, range(len(rows)), rows))]
    return list(rows)


def interval(values_in_order: list[float], q: float, level: float = LEVEL,
             independent: bool = False) -> Interval | None:
    """A goal's interval: batch means on the values in the order they were asked, or for independent
    values the order statistics; an end the values cannot place is None."""
    if independent:
        return quantile_interval(values_in_order, q, level, open_ends=True)
    return window_quantile_interval(values_in_order, q, level)


def percentile(rows: list[dict], column: str, q: float) -> float | None:
    known = values(rows, column)
    return quantile(known, q) if known else None


def judge(slo: Slo, rows: list[dict], final: bool = False, level: float = LEVEL, independent: bool = False,
          shrink: float | None = None) -> dict:
    """A step's figures and verdict from its requests (warm-ups are left out).

    Keys: requests, ok, failed, client_saturated, ttft_p50_s, ttft_p95_s, per_user_decode_tps
    (median decode_tps), each goal's figure with its interval (``Goal.low``, ``Goal.high``: None
    for an open end; ``Goal.level``: its coverage), goodput_share, outcome (meets, misses, unsure
    or client_saturated), decided_on (``interval``, or ``point estimate`` for a final verdict on
    an unsure step; None when not judged), missed (why it missed, in words) and straddling (the
    goals whose interval holds their limit). ``final``: an unsure step is decided on its point
    estimates. Figures of a saturated step are None: they are not to be reported. ``independent``:
    the requests are independent draws (order statistics, not batch means; see ``interval``).
    ``shrink``: how much narrower each interval would be were the window held to its limit; when no
    unsure goal's interval, so narrowed about its point estimate, would leave its limit, holding on
    would not tell either: the step is decided on its point estimates now (``hopeless``).
    """
    measured = [row for row in in_time_order(rows) if row.get("scenario") != "warmup"]
    ok = [row for row in measured if succeeded(row)]
    counts = {"requests": len(measured), "ok": len(ok), "failed": len(measured) - len(ok),
              "client_saturated": sum(flagged(row, SATURATED) for row in measured)}
    intervals = {goal: interval(in_order(ok, goal.column), goal.quantile, level, independent) for goal in slo.goals}
    figures = {"ttft_p50_s": percentile(ok, "ttft_s", 0.5), "ttft_p95_s": percentile(ok, "ttft_s", 0.95),
               "per_user_decode_tps": percentile(ok, "decode_tps", 0.5)}
    for goal, found in intervals.items():
        figures.update({goal.figure: percentile(ok, goal.column, goal.quantile),
                        goal.low: found and found.low, goal.high: found and found.high,
                        goal.level: found and found.level})
    figures["goodput_share"] = sum(meets(slo, row) for row in measured) / len(measured) if measured else None
    if counts["client_saturated"]:
        return {**counts, **dict.fromkeys(figures), "outcome": SATURATED, "decided_on": None, "hopeless": False,
                "missed": [f"{counts['client_saturated']} of {len(measured)} requests ran while the client "
                           "was saturated"], "straddling": []}
    verdicts = {goal: goal.verdict(found) for goal, found in intervals.items()}
    texts = {goal: _goal_text(goal, figures[goal.figure], found, level) for goal, found in intervals.items()}
    missed = [texts[goal] for goal, verdict in verdicts.items() if verdict == MISSES]
    failed_share = counts["failed"] / len(measured) if measured else None
    if failed_share is None:
        missed.append("no request was sent")
    elif failed_share > slo.errors:
        missed.append(f"{counts['failed']} of {len(measured)} requests failed")
    unsure = [goal for goal, verdict in verdicts.items() if verdict == UNSURE]
    outcome, decided_on = (MISSES if missed else MEETS), BY_INTERVAL
    hopeless = bool(unsure and not missed and not final and shrink is not None and not any(
        _could_tell(goal, figures[goal.figure], intervals[goal], shrink) for goal in unsure))
    if unsure and not missed:  # nothing misses outright: the unsure goals decide
        if final or hopeless:
            missed = [texts[goal] for goal in unsure if not goal.holds(figures[goal.figure])]
            outcome, decided_on = (MISSES if missed else MEETS), BY_POINT
        else:
            outcome, decided_on = UNSURE, None
    return {**counts, **figures, "outcome": outcome, "decided_on": decided_on, "missed": missed,
            "straddling": [texts[goal] for goal in unsure], "hopeless": hopeless}


def _could_tell(goal: Goal, point: float | None, found: Interval | None, shrink: float) -> bool:
    """Whether ``goal``'s interval, ``shrink`` times as wide about its point estimate, would leave the limit
    (the end toward the limit: the upper one of a p95 that holds, the lower one of one that does not). An
    end the requests cannot place yet could go anywhere: it could."""
    if point is None or found is None:
        return True
    end = found.high if goal.holds(point) == goal.at_most else found.low
    return end is None or goal.holds(point + (end - point) * shrink) == goal.holds(point)


def _goal_text(goal: Goal, value: float | None, interval: Interval | None, level: float) -> str:
    """``ttft_p95 4.5 s > 1, 90% CI 2.1–6.3``; or why the goal has no figure."""
    if value is None:
        return f"{goal.name} not measured (no successful request had it)"
    sign = ("≤" if goal.at_most else "≥") if goal.holds(value) else (">" if goal.at_most else "<")
    within = (ci(level, interval.low, interval.high, lambda end: f"{end:.3g}") if interval is not None
              else f"no {level:.0%} CI")
    return f"{goal.name} {apart_from(value, goal.limit, 3, 'g')} {goal.unit} {sign} {goal.limit:g}, {within}"
