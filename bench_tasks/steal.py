"""Steal: the CPU time a virtual machine's host took from it, per CPU (Linux's /proc/stat).

A client on a virtual machine stops entirely while its host runs something else on its CPU: nothing in
the machine runs, its kernel included, so bytes that arrive meanwhile are stamped when it runs again, and
neither the kernel's receive stamps nor the event loop's lag can tell (the clock jumps for both alike).
Measured on this project's test machine (2026-12-07): a busy loop pinned to a core of its own stopped for
19.5-25.8 ms five times in 60 s, each time with 2-3 ticks of steal on that core. The kernel counts this
steal per CPU, and it is the only trace of such a pause the client can read.

``Steal.read()`` is each CPU's steal since boot in seconds; ``most_stolen_s(before, after)`` the most any
one CPU lost between two readings: an upper bound on how much later than its arrival any byte read
meanwhile can have been stamped. The counter moves in clock ticks (10 ms at USER_HZ 100), so a difference
says the truth to a tick: 0.01 s is "more than 0 and less than 0.02 s". Missing (None) where there is no
such counter (macOS, Windows, a kernel or container without /proc/stat): never 0.
"""

from __future__ import annotations

import os

# LLM_BENCH_STEAL_STAT reads another file of /proc/stat's form: a host's steal, played to the client in tests.
STAT_PATH = os.environ.get("LLM_BENCH_STEAL_STAT", "/proc/stat")
READ_BYTES = 1 << 16  # the CPUs' lines come first: ~80 bytes each, 800 CPUs
STEAL_FIELD = 8  # cpuN user nice system idle iowait irq softirq steal ...: the 8th number after the name


def per_cpu_steal_ticks(stat: bytes) -> tuple[int, ...] | None:
    """Each CPU's steal in ticks, from /proc/stat's text (its ``cpuN`` lines, in order); None when it
    has no per-CPU line, a line without a steal field (kernels before 2.6.11), or the text ends before
    the lines after the CPUs' (a read cut short)."""
    ticks = []
    for line in stat.split(b"\n")[1:]:  # the first line is every CPU's sum
        if not line.startswith(b"cpu"):
            return tuple(ticks) or None
        fields = line.split()
        if len(fields) <= STEAL_FIELD:
            return None
        ticks.append(int(fields[STEAL_FIELD]))
    return None


def most_stolen_s(before: tuple[float, ...] | None, after: tuple[float, ...] | None) -> float | None:
    """The most steal any one CPU had between two readings, in seconds; None when either is missing or
    the CPUs changed between them (one brought online: no like-for-like reading)."""
    if before is None or after is None or len(before) != len(after):
        return None
    return round(max(b - a for a, b in zip(before, after)), 6)  # whole ticks: 0.07 - 0.03 is 0.04, not above it


class Steal:
    """This machine's steal counters, kept open: one read is a ``pread`` of the file's head (15 us here)."""

    def __init__(self, path: str = STAT_PATH) -> None:
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01

    def read(self) -> tuple[float, ...] | None:
        """Each CPU's steal since boot, in seconds; None where the machine has no such counter."""
        if self._fd is None:
            return None
        try:
            ticks = per_cpu_steal_ticks(os.pread(self._fd, READ_BYTES, 0))
        except (OSError, ValueError):
            return None
        return None if ticks is None else tuple(t * self._tick_s for t in ticks)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
