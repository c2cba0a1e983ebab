"""One timer for the whole engine: every due event of every stream is written in a single pass.

A per-stream `asyncio.sleep` costs a timer handle, a future and a task switch per token; at
20,000 events/s that alone saturates a core. Here there are two heaps and one loop timer armed at
the earliest due time of either:

- the wall heap: (perf_counter time, callback) for prefill ends, stall ends, split fragments;
- the decode heap: streams keyed by a *decode clock* V, the tokens one request has decoded since
  the engine started. All decoding requests share one rate (decode_tps slowed by how many decode
  at once), so dV/dt is that rate, and a stream's next event is due when V reaches its threshold.
  When the number of decoding requests changes only the clock's anchor and rate change: no heap
  entry is touched, and every in-flight token interval stretches or shrinks from that moment on.
  While a batched prefill reads a prompt chunk the clock is frozen (`freeze`, `thaw`): V stands
  still, so every decoding stream's next event moves later by the chunk's time.

Times are perf_counter seconds (CLOCK_MONOTONIC on Linux, same as the loop's clock and the client's).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import sys
import traceback
from time import perf_counter

from simengine.metrics import LATENESS_BUCKETS_S, Histogram

# Events due within this much of now are written in the same pass: the loop's epoll wait has
# millisecond granularity anyway, so waking again for them would only add lateness.
BATCH_S = 0.0002


class Scheduler:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._wall: list = []
        self._decode: list = []
        self._seq = 0
        self.v_anchor = 0.0
        self.t_anchor = perf_counter()
        self.rate_tps = 0.0
        self.frozen = False
        self._speed = 0.0  # dV/dt: rate_tps, or 0 while frozen
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._running = False
        self.lateness = Histogram(LATENESS_BUCKETS_S)  # write time - due time, per fired entry

    # -- the decode clock --
    def v_at(self, t: float) -> float:
        return self.v_anchor + self._speed * (t - self.t_anchor)

    def t_at(self, v: float) -> float:
        """When the running clock reaches v."""
        return self.t_anchor + (v - self.v_anchor) / self._speed

    def set_rate(self, rate_tps: float, now: float) -> None:
        self.v_anchor = self.v_at(now)
        self.t_anchor = now
        self.rate_tps = rate_tps
        if not self.frozen:
            self._speed = rate_tps
        if rate_tps == 0.0:
            self._decode.clear()  # nobody decodes: whatever is left belongs to abandoned streams
        self._arm()

    def freeze(self, v: float, t: float) -> None:
        """Stop the clock at v, which it reached at t (the ideal time, not a late wakeup)."""
        self.v_anchor = v
        self.t_anchor = t
        self.frozen = True
        self._speed = 0.0
        self._arm()

    def thaw(self, t: float) -> None:
        self.t_anchor = t
        self.frozen = False
        self._speed = self.rate_tps
        self._arm()

    # -- scheduling --
    def call_at(self, t: float, callback, arg) -> None:
        self._seq += 1
        heapq.heappush(self._wall, (t, self._seq, callback, arg))
        if t < self._timer_at:
            self._arm()

    def decode_at(self, v: float, callback, arg) -> None:
        self._seq += 1
        heapq.heappush(self._decode, (v, self._seq, callback, arg))
        self._arm()

    def _next_due(self) -> float:
        due = self._wall[0][0] if self._wall else math.inf
        if self._decode:
            if self._speed > 0.0:
                due = min(due, self.t_at(self._decode[0][0]))
            elif self._decode[0][0] <= self.v_anchor:  # due before the clock froze
                due = min(due, self.t_anchor)
        return due

    def _arm(self) -> None:
        if self._running:
            return  # _run re-arms once when its pass ends
        due = self._next_due()
        if due == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = due
        if due < math.inf:
            # perf_counter and loop.time() are both CLOCK_MONOTONIC here; convert anyway, it is cheap.
            self._timer = self.loop.call_at(self.loop.time() + (due - perf_counter()), self._run)

    def _run(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        self._running = True
        try:
            while self._pass():
                pass
        finally:
            self._running = False
            self._arm()

    def _pass(self) -> bool:
        """Fire everything due by now + BATCH_S; True if anything fired."""
        horizon = perf_counter() + BATCH_S
        fired = False
        wall = self._wall
        while wall and wall[0][0] <= horizon:
            due, _seq, callback, arg = heapq.heappop(wall)
            self._fire(callback, arg, due, due)
            fired = True
        decode = self._decode
        # Frozen, v_at is the frozen V: what fell due before the freeze still fires, nothing after.
        while decode and decode[0][0] <= self.v_at(horizon):
            v, _seq, callback, arg = heapq.heappop(decode)
            self._fire(callback, arg, v, self.t_at(v) if self._speed > 0.0 else self.t_anchor)
            fired = True
        return fired

    def _fire(self, callback, arg, due: float, due_t: float) -> None:
        self.lateness.observe(max(0.0, perf_counter() - due_t))
        try:
            callback(arg, due)
        except Exception:  # one broken stream must not stop every other stream's clock
            traceback.print_exc(file=sys.stderr)
