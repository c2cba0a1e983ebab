"""Saturation guard: is this client process keeping up, or measuring itself?

What makes a figure wrong is a stamp that dates bytes later than they came. With kernel receive
stamps a read is dated by the arrival of its newest bytes, so a busy client that reads late still
dates an event exactly, unless later events came in the same read: then the event carries their
stamp. The record says how coarse its first token's stamp may be (``ttft_uncertainty_s``, see
bench_tasks.stream); past ``TRUST_LIMIT_S`` the request is flagged ``client_saturated`` and the
report says its figures are not to be trusted. A busy process whose stamps stay exact is not.

Where reads carry no kernel stamp (macOS, TLS, an old kernel), a read is dated when it returns, and
the event loop's lag is what delays it: a greenlet wakes every ``interval_s`` and notes how late it
woke; a request in flight while the lag passed ``TRUST_LIMIT_S`` is flagged, and so is a request one
of whose reads may have been dated more than ``TRUST_LIMIT_S`` late by the loop's own turns (the probe
alone misses a burst of reads served one after the other in one turn of the loop: transport.LoopTurns).
The process's CPU share is kept too, for the summary (client-HOST-PID.json): it says how busy the
client was, not how wrong.

Neither the stamps nor the loop see a virtual machine's host taking its CPUs away: the whole machine
stops, kernel and clock alike, and every stamp of what arrived meanwhile is late (bench_tasks.steal). So
each request also keeps the most any CPU lost to the host while it ran (``cpu_stolen_s``, read before it
is sent and after its end) and the most it lost at once (``cpu_pause_s``: between two of the guard's readings,
``interval_s`` apart); past ``TRUST_LIMIT_S`` the latter is flagged ``cpu_stolen``. The kernel counts a stopped
CPU's steal when it runs again, so one pause lands whole between two readings, while a long request's sum adds
up many short pauses none of which made a stamp that late (measured on the test machine while it was busy:
about two pauses a second, of 10-40 ms each).
Every process that sends requests watches itself while a run goes (the master sends none): the run's
``environment.llm.guard``, started and stopped with each run (llm_run.py).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from itertools import takewhile
from pathlib import Path

import gevent

from bench_tasks.statistics import median
from bench_tasks.steal import Steal, most_stolen_s

TRUST_LIMIT_S = 0.040  # a first-token stamp this coarse, or a loop this late: selftest's TTFT error limit
CPU_WINDOW_S = 0.5  # CPU share over a longer window than one sample: a short spike is not a trend


class Guard:
    def __init__(self, steal: Steal, interval_s: float = 0.05, lag_limit_s: float = TRUST_LIMIT_S):
        self.interval_s = interval_s
        self.lag_limit_s = lag_limit_s
        self.samples: deque[tuple[float, float, float]] = deque(maxlen=20000)  # (t, lag_s, cpu share)
        self._saturated_until = 0.0  # perf_counter of the end of the last saturated sample
        self._saturated_times: deque[float] = deque(maxlen=20000)
        self._greenlet: gevent.Greenlet | None = None
        self.steal = steal  # the process's (llm_run.LLMRun): read before and after each request
        self.steal_steps: deque[tuple[float, float]] = deque(maxlen=20000)  # (t, most one CPU lost since the last)
        self._steal_last: tuple[float, ...] | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._started = (time.perf_counter(), _cpu_s(), self.steal.read())
            self._greenlet = gevent.spawn(self._watch)

    def stop(self) -> bool:
        """Stop watching; False when it was not watching."""
        if self._greenlet is None:
            return False
        self._greenlet.kill(block=False)
        self._greenlet = None
        t0, cpu0, steal0 = self._started
        self.run_wall_s, self.run_cpu_s = time.perf_counter() - t0, _cpu_s() - cpu0
        self.run_cpu_stolen_s = most_stolen_s(steal0, self.steal.read())
        return True

    def _watch(self) -> None:
        last_t, last_cpu = time.perf_counter(), _cpu_s()
        self._steal_last = self.steal.read()
        window = deque([(last_t, last_cpu)], maxlen=max(2, int(CPU_WINDOW_S / self.interval_s) + 1))
        while True:
            gevent.sleep(self.interval_s)
            now, cpu = time.perf_counter(), _cpu_s()
            lag_s = max(0.0, now - last_t - self.interval_s)
            window.append((now, cpu))
            share = (cpu - window[0][1]) / (now - window[0][0])
            self.samples.append((now, lag_s, share))
            self.note_steal(now)
            if lag_s > self.lag_limit_s:
                # Keyed by the sample's start: a lag before a request was sent does not delay its reads.
                self._saturated_times.append(last_t)
            last_t, last_cpu = now, cpu

    def note_steal(self, now: float) -> None:
        """Keep the most any CPU lost to the host since the guard's last reading (one step a sample)."""
        reading = self.steal.read()
        step = most_stolen_s(self._steal_last, reading)
        if step is not None:
            self.steal_steps.append((now, step))
        self._steal_last = reading

    def stolen_at_once_s(self, t_before: float, total: float | None, after: tuple[float, ...] | None) -> float | None:
        """The most one CPU lost at once between a reading at ``t_before`` and ``after`` (read now), which lost
        ``total`` in all (``most_stolen_s`` of the two): the largest of the guard's steps since, and of what came
        after its last one; never more than ``total``. None where there is no counter."""
        steps = [step for _, step in takewhile(lambda s: s[0] > t_before, reversed(self.steal_steps))]
        if total is None or not steps:
            return total
        tail = most_stolen_s(self._steal_last, after)
        return total if tail is None else min(total, max(*steps, tail))

    def saturated_since(self, t: float) -> bool:
        """Did a saturated sample start after ``t``? (cheap: called once per request)"""
        return bool(self._saturated_times) and self._saturated_times[-1] >= t

    def untrustworthy(self, ttft_uncertainty_s: float | None, t_send: float,
                      late_bound_s: float | None = None) -> bool:
        """Are this request's stamps too coarse to trust? By its own stamps where the kernel dated its
        reads; where it did not, by how late its own reads may have been dated (``late_bound_s``) and by
        the event loop's lag while it ran."""
        if ttft_uncertainty_s is not None:
            return ttft_uncertainty_s > self.lag_limit_s
        return (late_bound_s or 0.0) > self.lag_limit_s or self.saturated_since(t_send)

    def stolen_too_long(self, cpu_pause_s: float | None) -> bool:
        """Did the host take one of the machine's CPUs at once for longer than a stamp may be late?"""
        return cpu_pause_s is not None and cpu_pause_s > self.lag_limit_s

    def summary(self) -> dict:
        lags = sorted(s[1] for s in self.samples)
        shares = [s[2] for s in self.samples]
        run = {"run_wall_s": getattr(self, "run_wall_s", None), "run_cpu_s": getattr(self, "run_cpu_s", None),
               "run_cpu_stolen_s": getattr(self, "run_cpu_stolen_s", None),
               "run_cpu_pause_s": max((step for _, step in self.steal_steps), default=None)}
        if not lags:
            return {"samples": 0, **run}
        return {
            **run,
            "samples": len(lags),
            "lag_p50_s": median(lags),
            "lag_max_s": lags[-1],
            "cpu_mean": sum(shares) / len(shares),
            "lagging_samples": len(self._saturated_times),
        }


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def write_summary(guard: Guard, out: Path, client_host: str) -> None:
    """This process's own cost beside its records: ``client-HOST-PID.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"client-{client_host}-{os.getpid()}.json").write_text(json.dumps(guard.summary()))
