"""A latency goal (SLO) and its verdict on a load step: the one verdict the search and the report share.

``parse("ttft_p95=1.0,decode_p5=10")``: the first token's 95th percentile at most 1 s, the 5th
percentile of per-user decode tok/s at least 10. Goals name a record figure and a percentile:
``ttft``, ``ttfb``, ``e2e``, ``itl`` (seconds, at most) and ``decode``, ``prompt`` (tok/s, at
least); ``errors=0.01`` allows that share of failed requests (default 0: any failure misses).

A request meets the SLO when it succeeded and each of its figures the goals name is known and
within its goal; goodput is the share of a step's requests that did. A step meets the SLO when
each goal's percentile over its successful requests is within the goal and its failed share is
within ``errors``. A step with any request flagged ``client_saturated`` is not judged at all:
the client measured itself, so its figures are withheld.

Pure and stdlib-only, on record dicts (a record's JSON, or a DataFrame row as a dict): the Locust
process judges with it while the search runs, and ``analysis`` with the same code afterwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench_tasks.stream import quantile

MEETS, MISSES, SATURATED = "meets", "misses", "client_saturated"
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
    def unit(self) -> str:
        return "s" if self.column.endswith("_s") else "tok/s"

    def holds(self, value: float | None) -> bool:
        return value is not None and (value <= self.limit if self.at_most else value >= self.limit)

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


def number(value) -> float | None:
    """A record's figure as a float, or None when it is missing (None, NaN, pandas' NA)."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if result != result else result


def succeeded(row: dict) -> bool:
    try:
        return bool(row.get("ok"))
    except TypeError:  # pandas' NA: not known to have succeeded
        return False


def flagged(row: dict, flag: str) -> bool:
    flags = row.get("flags")
    return isinstance(flags, str) and flag in flags.split(";")


def meets(slo: Slo, row: dict) -> bool:
    """One request: succeeded, and every figure a goal names is known and within it."""
    return succeeded(row) and all(goal.holds(number(row.get(goal.column))) for goal in slo.goals)


def percentile(rows: list[dict], column: str, q: float) -> float | None:
    values = sorted(v for v in (number(row.get(column)) for row in rows) if v is not None)
    return quantile(values, q) if values else None


def judge(slo: Slo, rows: list[dict]) -> dict:
    """A step's figures and verdict from its requests (warm-ups are left out).

    Keys: requests, ok, failed, client_saturated, ttft_p50_s, ttft_p95_s, per_user_decode_tps
    (median decode_tps), each goal's figure, goodput_share, outcome (meets, misses or
    client_saturated) and missed (the goals it broke, in words). Figures of a saturated step are
    None: they are not to be reported.
    """
    measured = [row for row in rows if row.get("scenario") != "warmup"]
    ok = [row for row in measured if succeeded(row)]
    counts = {"requests": len(measured), "ok": len(ok), "failed": len(measured) - len(ok),
              "client_saturated": sum(flagged(row, SATURATED) for row in measured)}
    figures = {"ttft_p50_s": percentile(ok, "ttft_s", 0.5), "ttft_p95_s": percentile(ok, "ttft_s", 0.95),
               "per_user_decode_tps": percentile(ok, "decode_tps", 0.5),
               **{goal.figure: percentile(ok, goal.column, goal.quantile) for goal in slo.goals},
               "goodput_share": sum(meets(slo, row) for row in measured) / len(measured) if measured else None}
    if counts["client_saturated"]:
        return {**counts, **dict.fromkeys(figures), "outcome": SATURATED,
                "missed": [f"{counts['client_saturated']} of {len(measured)} requests ran while the client "
                           "was saturated"]}
    missed = [f"{goal.name} {_value_text(figures[goal.figure], goal)}" for goal in slo.goals
              if not goal.holds(figures[goal.figure])]
    failed_share = counts["failed"] / len(measured) if measured else None
    if failed_share is None:
        missed.append("no request was sent")
    elif failed_share > slo.errors:
        missed.append(f"{counts['failed']} of {len(measured)} requests failed")
    return {**counts, **figures, "outcome": MISSES if missed else MEETS, "missed": missed}


def _value_text(value: float | None, goal: Goal) -> str:
    if value is None:
        return "not measured (no successful request had it)"
    return f"{value:.3g} {goal.unit} {'>' if goal.at_most else '<'} {goal.limit:g}"


def verdict_line(students: int, figures: dict, again: bool = False) -> str:
    """One line for the progress output: how the step went (``again``: a refused step will be run once more)."""
    head = f"{students} students: {figures['requests']} requests"
    if figures["outcome"] == SATURATED:
        then = "running the class once more" if again else "add workers (--processes or worker machines)"
        return f"{head}, not judged: {figures['missed'][0]}; {then}"
    if figures["outcome"] == MEETS:
        return f"{head}, TTFT p95 {figures['ttft_p95_s']:.3f} s: meets the SLO"
    return f"{head}: misses the SLO ({'; '.join(figures['missed'])})"
