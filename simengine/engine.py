"""The engine's shared state: slots and their FIFO queue, the decode rate, cache, truth and metrics.

Model of the hardware: `slots` requests are served at once. Prefills of different slots run
concurrently, each at `prefill_tps` (a simplification: real engines batch prefills and slow each
other). All decoding requests share one per-request rate,
    decode_tps / (1 + decode_slowdown * (decoding - 1)),
recomputed whenever a request starts or stops decoding.
"""

from __future__ import annotations

from collections import deque
from time import perf_counter

from simengine.config import SimConfig
from simengine.metrics import EngineMetrics
from simengine.prefix_cache import PrefixCache
from simengine.scheduler import Scheduler
from simengine.truth_log import TruthLog


class Engine:
    def __init__(self, config: SimConfig, scheduler: Scheduler, truth_log: TruthLog) -> None:
        self.config = config
        self.scheduler = scheduler
        self.truth_log = truth_log
        self.metrics = EngineMetrics(config.model)
        self.cache = PrefixCache(config.cache_block_tokens, config.cache_blocks) if config.prefix_cache else None
        self.queue: deque = deque()
        self.running = 0
        self.decoding = 0

    def submit(self, generation) -> None:
        self.queue.append(generation)
        self._admit_waiting()

    def unqueue(self, generation) -> None:
        self.queue.remove(generation)

    def _admit_waiting(self) -> None:
        while self.running < self.config.slots and self.queue:
            self.running += 1
            self.queue.popleft().admit()

    # -- prefix cache --
    def block_hashes(self, tokens: list[int]) -> list[int]:
        return self.cache.block_hashes(tokens) if self.cache else []

    def cached_tokens(self, block_hashes: list[int], prompt_tokens: int) -> int:
        return self.cache.cached_tokens(block_hashes, prompt_tokens) if self.cache else 0

    def on_prefilled(self, generation) -> None:
        if self.cache:
            self.cache.insert(generation.block_hashes)
        self.metrics.prompt_tokens += generation.prompt_tokens
        self.metrics.prompt_tokens_cached += generation.cached_tokens

    # -- decode rate --
    def decode_rate_tps(self) -> float:
        if self.decoding == 0:
            return 0.0
        return self.config.decode_tps / (1.0 + self.config.decode_slowdown * (self.decoding - 1))

    def join_decode(self, now: float) -> None:
        self.decoding += 1
        self.scheduler.set_rate(self.decode_rate_tps(), now)

    def leave_decode(self, now: float) -> None:
        self.decoding -= 1
        self.scheduler.set_rate(self.decode_rate_tps(), now)

    # -- the end of a request --
    def release(self, generation, was_decoding: bool, status: int) -> None:
        if was_decoding:
            self.leave_decode(perf_counter())
        if generation.t_admitted is not None:
            self.running -= 1
        if status == 200 and generation.finish_reason not in (None, "error"):
            self.metrics.finished(generation, self.config.draft_tokens)
        self.truth_log.write(generation.truth(status))
        self._admit_waiting()

    def log_rejected(self, row: dict) -> None:
        """A request answered at once (error status, non-SSE fault): its truth line has no token times."""
        self.truth_log.write(row)
