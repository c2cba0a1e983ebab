"""The machine, shared by tests that run side by side (pytest-xdist's workers, or two pytest sessions).

Most tests wait: on a simulated engine's answers, on a subprocess, on a pip install. They share the
machine. A test marked ``alone`` holds the client's figures to an engine's truth at bounds another
process's load would break (llama.cpp's own clock at 0.1%, vLLM's histograms at 0.5%, a client and
engine pinned a core each): it has the machine to itself.

One lock per machine: shared by the first kind, exclusive for the second. A turnstile stands before
it: a test that waits to be alone holds the turnstile, so tests that keep overlapping cannot starve it,
and a test only waits for those already running. Consecutive ``alone`` tests of one process keep the
lock between them: releasing it would let a long shared test start in the gap, and the next would wait
for it. Files in the temporary directory, so every pytest on the machine takes part.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

from bench_tasks.steal import Steal

LOCK_DIR = Path(tempfile.gettempdir())


class Machine:
    def __init__(self, lock_dir: Path = LOCK_DIR) -> None:
        stem = lock_dir / f"llm-bench-tests-{os.getuid()}"
        self.turnstile_path, self.lock_path = stem.with_suffix(".turnstile"), stem.with_suffix(".lock")
        self._held: IO | None = None
        self.alone = False  # how the lock is held, when it is

    def take(self, alone: bool) -> None:
        """Hold the machine shared, or alone; a process holding it alone already keeps it."""
        if self._held is not None and self.alone and alone:
            return
        self.release()
        with open(self.turnstile_path, "a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # released as the file closes, once the lock is ours
            held = open(self.lock_path, "a")
            fcntl.flock(held, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        self._held, self.alone = held, alone

    def release(self) -> None:
        if self._held is not None:
            self._held.close()  # closing the file releases its lock
            self._held = None


def stolen_s() -> float:
    """CPU time the hypervisor gave to others since boot, summed over this machine's CPUs (bench_tasks.steal,
    the client's own reading); 0 where it is not reported.

    On a virtual machine whose host is busy, a CPU is taken away for 10-30 ms at a time (measured here: a
    process pinned to a core of its own stopped for 19-26 ms, 2-3 ticks of steal each time). No client or
    engine times anything across such a pause to a fraction of a millisecond: a test that holds figures to
    an engine's truth at such bounds sets aside the requests during which time was stolen."""
    counters = Steal()
    try:
        return sum(counters.read() or ())
    finally:
        counters.close()
