"""Saturation guard: is this client process keeping up, or measuring itself?

A greenlet wakes every ``interval_s`` and notes two things: how late it woke (event-loop lag: a
greenlet that wants to read a token waits at least that long) and the process's CPU use since the
last sample. When either passes its threshold, the sample is marked saturated; a request that was
in flight during a saturated sample is flagged ``client_saturated``, and the report says its
figures are not to be trusted.
"""

from __future__ import annotations

import os
import time
from collections import deque

import gevent

LAG_LIMIT_S = 0.040  # a reader this late adds this much error to a timestamp (selftest's TTFT limit)
CPU_LIMIT = 0.90  # of one core over CPU_WINDOW_S: a gevent process cannot use more
CPU_WINDOW_S = 0.5  # CPU share over a longer window than one sample: a short spike is not saturation


class Guard:
    def __init__(self, interval_s: float = 0.05, lag_limit_s: float = LAG_LIMIT_S, cpu_limit: float = CPU_LIMIT):
        self.interval_s = interval_s
        self.lag_limit_s = lag_limit_s
        self.cpu_limit = cpu_limit
        self.samples: deque[tuple[float, float, float]] = deque(maxlen=20000)  # (t, lag_s, cpu share)
        self._saturated_until = 0.0  # perf_counter of the end of the last saturated sample
        self._saturated_times: deque[float] = deque(maxlen=20000)
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._started = (time.perf_counter(), _cpu_s())
            self._greenlet = gevent.spawn(self._watch)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
            t0, cpu0 = self._started
            self.run_wall_s, self.run_cpu_s = time.perf_counter() - t0, _cpu_s() - cpu0

    def _watch(self) -> None:
        last_t, last_cpu = time.perf_counter(), _cpu_s()
        window = deque([(last_t, last_cpu)], maxlen=max(2, int(CPU_WINDOW_S / self.interval_s) + 1))
        while True:
            gevent.sleep(self.interval_s)
            now, cpu = time.perf_counter(), _cpu_s()
            lag_s = max(0.0, now - last_t - self.interval_s)
            window.append((now, cpu))
            share = (cpu - window[0][1]) / (now - window[0][0])
            self.samples.append((now, lag_s, share))
            if lag_s > self.lag_limit_s or share > self.cpu_limit:
                # Keyed by the sample's start: CPU spent building a request before it was sent
                # does not make that request's figures suspect.
                self._saturated_times.append(last_t)
            last_t, last_cpu = now, cpu

    def saturated_since(self, t: float) -> bool:
        """Did a saturated sample start after ``t``? (cheap: called once per request)"""
        return bool(self._saturated_times) and self._saturated_times[-1] >= t

    def summary(self) -> dict:
        lags = sorted(s[1] for s in self.samples)
        shares = [s[2] for s in self.samples]
        run = {"run_wall_s": getattr(self, "run_wall_s", None), "run_cpu_s": getattr(self, "run_cpu_s", None)}
        if not lags:
            return {"samples": 0, **run}
        return {
            **run,
            "samples": len(lags),
            "lag_p50_s": lags[len(lags) // 2],
            "lag_max_s": lags[-1],
            "cpu_mean": sum(shares) / len(shares),
            "saturated_samples": len(self._saturated_times),
        }


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


guard = Guard()
