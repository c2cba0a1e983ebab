"""The capacity search's options, checked once, and the parsers of the two that are more than a number
(``--start-students``, ``--step``): the command line (``bench_tasks.options``) reads them from here
without importing the search.

How long the search waits, besides its own steps: after a window closes, ``record_wait_s`` for the
records of its last answers to arrive (a worker reports every 3 s: two reports), and an answer not in
by ``read_timeout_s + record_wait_s`` after the close is overdue (a question sent before the close has
failed by its read timeout by then, or is lost with a worker or a job on its way): the window is
judged on what came, and says how many answers were overdue.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench_tasks.stall import READ_TIMEOUT_S

AUTO = "auto"  # --start-students auto: probe the server and start at the model's knee
MAX_STEP_FACTOR = 3  # an unsure window goes on up to this many step_s, unless max_step_s says otherwise
RECORD_WAIT_S = 7.0  # after a window's (or a probe phase's) last answer, how long its records may take to arrive


def parse_start(text) -> int | None:
    """``auto`` (None: probe and predict) or a class size."""
    text = str(text).strip()
    if text == AUTO:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"expected a class size (1 or more) or auto, got {text!r}")
    return int(text)


def parse_step(text: str) -> tuple[str, int]:
    """``x2`` (multiply the class) or ``+4`` (add students): (operator, amount)."""
    text = str(text).strip()
    operator, amount = text[:1], text[1:]
    if operator not in ("x", "+") or not amount.isdigit() or int(amount) < (2 if operator == "x" else 1):
        raise ValueError(f"expected a step like x2 (double the class) or +4 (add four students), got {text!r}")
    return operator, int(amount)


@dataclass(frozen=True)
class SearchOptions:
    start: int | None = None  # None: probe the server, start at the model's knee (--start-students auto)
    step: str = "x2"
    max_students: int = 256
    resolution: int = 1
    settle_s: float = 40.0
    step_s: float = 120.0
    min_requests: int = 20
    max_step_s: float | None = None  # None: MAX_STEP_FACTOR * step_s
    record_wait_s: float = RECORD_WAIT_S
    read_timeout_s: float = READ_TIMEOUT_S  # the run's --read-timeout

    def __post_init__(self) -> None:
        parse_step(self.step)
        start = 1 if self.start is None else self.start
        if not 1 <= start <= self.max_students:
            raise ValueError(f"the first class ({start} students) is not within 1 to the largest ({self.max_students})")
        if self.resolution < 1 or self.min_requests < 1:
            raise ValueError("need resolution >= 1 and min_requests >= 1")
        if self.max_step_s is None:
            object.__setattr__(self, "max_step_s", MAX_STEP_FACTOR * self.step_s)
        if self.max_step_s < self.step_s:
            raise ValueError(f"max_step_s ({self.max_step_s:g} s) is shorter than step_s ({self.step_s:g} s)")

    @property
    def overdue_s(self) -> float:
        """After a window closes, how long until an answer not in yet is overdue."""
        return self.read_timeout_s + self.record_wait_s
