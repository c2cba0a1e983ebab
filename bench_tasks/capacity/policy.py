"""Which class the capacity search seats next, from the verdicts so far; and what they conclude.

``Gallop`` (after the probe: from the model's predicted class) moves one student (``resolution``)
toward the boundary (up after a class that met the SLO, down after one that missed), the stride
doubling while the verdicts keep the direction (the prediction was off), then bisects between the
largest class that met and the smallest that missed until they are ``resolution`` apart. ``Ladder``
(a numbered ``--start-students``, or a probe that measured too little) grows the class by ``--step``
(``x2``: double, ``+4``: add four) until a class misses, then bisects. Both stop at once on a class in
which the client was saturated (it says nothing about the server) and at ``max_students``, and both
assume that a class that misses the SLO is not met by a larger one. ``walk`` plays a copy forward
against a supposed capacity: the classes the search still expects. Pure.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from bench_tasks import slo as slos

FALLBACK_START = 2  # the probe measured too little: the ladder from here, as before the probe


def conclude(verdicts: dict[int, str]) -> tuple[int, int | None, str]:
    """(capacity, the class that bounds it, why): the largest class that met the SLO below the
    smallest that did not. Why: ``misses``, ``client_saturated``, ``unsure`` (a class its requests
    could not tell bounds the capacity as a miss does: it was not shown to meet), or ``untested``
    (no step above the capacity was judged: the search stopped at its largest class)."""
    stops = [n for n, outcome in verdicts.items() if outcome != slos.MEETS]
    bound = min(stops) if stops else None
    met = [n for n, outcome in verdicts.items() if outcome == slos.MEETS and (bound is None or n < bound)]
    return (max(met) if met else 0), bound, (verdicts[bound] if bound is not None else "untested")


def grow(students: int, step: tuple[str, int]) -> int:
    operator, amount = step
    return students * amount if operator == "x" else students + amount


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


def walk(policy: Ladder | Gallop, students: int | None, capacity: int) -> list[int]:
    """The classes a copy of ``policy`` would still try after ``students`` (not judged yet) against a
    server that seats ``capacity``: what the search still expects if that is the truth."""
    policy, tried = copy.deepcopy(policy), []
    while students is not None and len(tried) < 64:
        students = policy.next(students, slos.MEETS if students <= capacity else slos.MISSES)
        if students is not None:
            tried.append(students)
    return tried
