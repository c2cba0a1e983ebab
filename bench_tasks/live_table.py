"""The live view's table: per scenario and phase, bench_tasks.figures' figures over the records finished so far,
and the tokens of the last ``WINDOW_S`` seconds.

Fed one record dict at a time (where the run's records come together: the local runner or the
master). Failed requests are counted, never averaged in; a figure with no data is None, never 0.
"""

from __future__ import annotations

from collections import deque

from bench_tasks import figures

WINDOW_S = 10.0  # "now": tokens of requests that ended in the last 10 s (wall clock, across machines)
COLUMNS = ("scenario", "phase", "requests", "errors", "ttft_p50_s", "ttft_p95_s", "decode_tps_p50", "total_tps_now",
           "total_tps")


class LiveTable:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._phases: dict[tuple[str, str], tuple[figures.Phase, deque]] = {}
        self._latest_end = 0.0

    def add(self, row: dict) -> None:
        if row.get("scenario") == "warmup":
            return
        key = (row.get("scenario", ""), row.get("phase", ""))
        phase, ends = self._phases.setdefault(key, (figures.Phase(), deque()))
        phase.add(row)
        if figures.succeeded(row):
            end = (figures.number(row.get("t_start")) or 0.0) + (figures.number(row.get("e2e_s")) or 0.0)
            ends.append((end, figures.number(row.get("completion_tokens")) or 0.0))
            self._latest_end = max(self._latest_end, end)

    def rows(self) -> list[dict]:
        return [{"scenario": scenario, "phase": name, **phase.figures(), "total_tps_now": self._now(ends)}
                for (scenario, name), (phase, ends) in self._phases.items()]

    def _now(self, ends: deque) -> float | None:
        """Tokens of the requests that ended in the last WINDOW_S before the newest end; None when none did."""
        since = self._latest_end - WINDOW_S
        while ends and ends[0][0] < since:  # the newest end only grows: never counted again
            ends.popleft()
        recent = [tokens for end, tokens in ends if end >= since]
        return sum(recent) / WINDOW_S if recent else None
