"""The engine's shared state: slots and their FIFO queue, the decode rate, cache, truth and metrics.

Model of the hardware: `slots` requests are served at once. In prefill mode concurrent, prefills
of different slots run concurrently, each at `prefill_tps`, and decoding never waits for them (a
simplification: real engines batch prefills and slow each other); in batched mode one compute loop
reads prompts in chunks between decode steps, and decoding waits for each chunk (simengine.batching).
All decoding requests share one per-request rate,
    decode_tps / (1 + decode_slowdown * (decoding - 1)),
recomputed whenever a request starts or stops decoding.

The KV cache in use (vllm:kv_cache_usage_perc) is the tokens held by admitted requests: their
cached prompt tokens, the prompt tokens read so far (all of them once a slot takes the request, in
concurrent mode) and the tokens generated, over `kv_tokens`.
"""

from __future__ import annotations

from collections import deque
from time import perf_counter

from simengine.batching import ComputeLoop
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
        self.admitted: set = set()  # generations holding a slot (and KV cache)
        self.chunks_done = 0  # prompt chunks read so far (batched mode): a stream compares it per event
        self.compute = ComputeLoop(self) if config.prefill_mode == "batched" else None

    def submit(self, generation) -> None:
        self.queue.append(generation)
        self._admit_waiting()

    def unqueue(self, generation) -> None:
        self.queue.remove(generation)

    def _admit_waiting(self) -> None:
        while self.running < self.config.slots and self.queue:
            self.running += 1
            generation = self.queue.popleft()
            self.admitted.add(generation)
            generation.admit()

    # -- prefill --
    def start_prefill(self, generation) -> None:
        """Read the prompt of a request that just took its slot; its first token follows."""
        config = self.config
        to_read = generation.prompt_tokens - generation.cached_tokens
        ready_at = generation.t_admitted + config.base_latency_s
        if self.compute is None:
            self.scheduler.call_at(ready_at + to_read / config.prefill_tps, type(generation).on_prefilled, generation)
            return
        generation.prompt_left = max(1, to_read)  # llama.cpp computes at least the last prompt token
        if config.base_latency_s > 0.0:
            self.scheduler.call_at(ready_at, self.compute.add, generation)
        else:
            self.compute.add(generation, generation.t_admitted)

    def kv_cache_usage(self) -> float:
        held = sum(g.prompt_tokens - g.prompt_left + g.completion_tokens for g in self.admitted)
        return held / self.config.kv_tokens

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
        if self.decoding == 0 and self.compute is not None:
            self.compute.on_decode_empty(now)

    # -- the end of a request --
    def release(self, generation, was_decoding: bool, status: int) -> None:
        if was_decoding:
            self.leave_decode(perf_counter())
        if generation.t_admitted is not None:
            self.running -= 1
            self.admitted.discard(generation)
            if self.compute is not None:
                self.compute.drop(generation)
        if status == 200 and generation.finish_reason not in (None, "error"):
            self.metrics.finished(generation, self.config.draft_tokens)
        self.truth_log.write(generation.truth(status))
        self._admit_waiting()

    def log_rejected(self, row: dict) -> None:
        """A request answered at once (error status, non-SSE fault): its truth line has no token times."""
        self.truth_log.write(row)
