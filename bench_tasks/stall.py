"""How long a run may show no progress before it is stuck, not slow.

Progress is any of: a byte of an answer, a record, a job handed out or finished, a token count
answered. Every wait between two of them is bounded by one read timeout: a request that receives
no byte for ``--read-timeout`` fails by itself (and is recorded), and so does a side request (token
counting). A healthy run therefore moves at least once per read timeout; three of them in a row
without a single byte is far beyond any healthy wait (a saturated event loop reads late, but not
by two whole timeouts), so the run is declared stalled: it fails with what it was waiting for.

``MARGIN_S`` covers the waits that are not requests: reading the engine's counters between two
phases (two readings of at most bench_tasks.metrics.SCRAPE_TIMEOUT_S, 5 s, each) and a worker's report
interval (3 s) before its bytes count on the master. ``idle_s`` is time the workload itself is silent
by design (a student's think time). The command line's own backstop waits ``BACKSTOP_S`` longer, so the run's watchdog,
which knows what it was waiting for, speaks first.
"""

from __future__ import annotations

READ_TIMEOUT_S = 300.0  # --read-timeout's default
FACTOR = 3
MARGIN_S = 10.0
BACKSTOP_S = 30.0


def limit_s(read_timeout_s: float, idle_s: float = 0.0) -> float:
    """Seconds without progress after which the run is stalled."""
    return FACTOR * read_timeout_s + idle_s + MARGIN_S


def backstop_s(read_timeout_s: float, idle_s: float = 0.0) -> float:
    """Seconds without any of the run's files moving after which the command line stops Locust."""
    return limit_s(read_timeout_s, idle_s) + BACKSTOP_S


def explained(read_timeout_s: float, idle_s: float = 0.0) -> str:
    """How ``limit_s`` was reached, in the words of the options."""
    idle = f" + {idle_s:g} s think time" if idle_s else ""
    return f"{FACTOR} x --read-timeout {read_timeout_s:g} s{idle} + {MARGIN_S:g} s"
