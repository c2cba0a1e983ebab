"""The live view's table: per scenario and phase, figures over the records finished so far.

Fed one record dict at a time (where the run's records come together: the local runner or the
master). Failed requests are counted, never averaged in; a figure with no data is None, never 0.
"""

from __future__ import annotations

from collections import defaultdict, deque

from bench_tasks.stream import quantile

WINDOW_S = 10.0  # "now": tokens of requests that ended in the last 10 s (wall clock, across machines)
COLUMNS = ("scenario", "phase", "requests", "errors", "ttft_p50_s", "ttft_p95_s", "decode_tps_p50",
           "total_tps_now", "total_tps_phase")


class LiveTable:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._phases: dict[tuple[str, str], _Phase] = defaultdict(_Phase)
        self._latest_end = 0.0

    def add(self, row: dict) -> None:
        if row.get("scenario") == "warmup":
            return
        phase = self._phases[(row.get("scenario", ""), row.get("phase", ""))]
        phase.add(row)
        self._latest_end = max(self._latest_end, phase.last_end)

    def rows(self) -> list[dict]:
        return [{"scenario": scenario, "phase": name, **phase.figures(self._latest_end)}
                for (scenario, name), phase in self._phases.items()]


class _Phase:
    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.ttfts: list[float] = []
        self.decodes: list[float] = []
        self.ends: deque[tuple[float, int]] = deque()  # (wall end, tokens) of successful requests
        self.first_start: float | None = None
        self.last_end = 0.0
        self.tokens = 0
        self.rounds: dict = defaultdict(lambda: [0, 0.0])  # burst round -> [tokens, release to last end]

    def add(self, row: dict) -> None:
        self.requests += 1
        if not row.get("ok"):
            self.errors += 1
            return
        if row.get("ttft_s") is not None:
            self.ttfts.append(row["ttft_s"])
        if row.get("decode_tps") is not None:
            self.decodes.append(row["decode_tps"])
        tokens = row.get("completion_tokens") or 0
        start, end = row.get("t_start") or 0.0, (row.get("t_start") or 0.0) + (row.get("e2e_s") or 0.0)
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = max(self.last_end, end)
        self.tokens += tokens
        self.ends.append((end, tokens))
        if row.get("release_offset_s") is not None:  # a burst: its rounds are timed from their release
            totals = self.rounds[row.get("round")]
            totals[0] += tokens
            totals[1] = max(totals[1], row["release_offset_s"] + (row.get("e2e_s") or 0.0))

    def figures(self, now: float) -> dict:
        ttfts, decodes = sorted(self.ttfts), sorted(self.decodes)
        recent = sum(tokens for end, tokens in self.ends if end >= now - WINDOW_S)
        span = self.last_end - self.first_start if self.first_start is not None else 0.0
        if self.rounds:  # a burst: as the report has it
            phase_total = self._round_total_tps()
        else:
            phase_total = self.tokens / span if span > 0 else None
        return {
            "requests": self.requests,
            "errors": self.errors,
            "ttft_p50_s": quantile(ttfts, 0.5) if ttfts else None,
            "ttft_p95_s": quantile(ttfts, 0.95) if ttfts else None,
            "decode_tps_p50": quantile(decodes, 0.5) if decodes else None,
            "total_tps_now": recent / WINDOW_S if self.ends and self.last_end >= now - WINDOW_S else None,
            "total_tps_phase": phase_total,
        }

    def _round_total_tps(self) -> float | None:
        """The median over rounds of each round's tokens / (its release to its last end)."""
        rates = sorted(tokens / span for tokens, span in self.rounds.values() if span > 0)
        return quantile(rates, 0.5) if rates else None
