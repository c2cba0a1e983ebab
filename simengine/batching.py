"""Batched prefill (prefill_mode batched): one compute loop, as llama.cpp's server runs it.

llama.cpp's server loop (tools/server/server-context.cpp, update_slots) builds one batch per
iteration: a token for every decoding slot first, then prompt tokens of the slots still reading
their prompt, slot after slot, while the batch holds fewer than n_batch tokens; one llama_decode
runs it, so every decoding slot waits for the prompt chunk. vLLM's chunked prefill fills its token
budget the same way. Here one iteration is:

- a prompt chunk of c tokens (n_batch less one per decoding stream, taken from the reading requests
  in admission order): c / prefill_tps seconds with the decode clock frozen; a request whose last
  prompt token is in it writes its first token when the chunk ends;
- then one decode step: the decode clock runs for one token's time, so every decoding stream
  advances by one token; then the next chunk.

With no prompt to read, decoding runs freely (as in concurrent mode); with nobody decoding, chunks
follow each other. Every chunk is kept (the last CHUNKS_KEPT), so that a stream can say which
chunks lengthened the gap between two of its events and whose prompt they were reading.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

IDLE, CHUNK, STEP = "idle", "chunk", "step"
# A stream due exactly at a step's end writes before the next chunk: the step ends this many
# tokens later (a drift of a millionth of a token per chunk).
STEP_SLACK_TOKENS = 1e-6
CHUNKS_KEPT = 4096  # a gap spans at most one chunk per token of its event: far fewer than this


@dataclass(slots=True)
class Chunk:
    index: int  # 1, 2, ... since the engine started
    t_start: float
    t_end: float
    shares: list[tuple[str, int]]  # (request_id, prompt tokens read in it)


class ComputeLoop:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.scheduler = engine.scheduler
        self.n_batch = engine.config.n_batch
        self.prefill_tps = engine.config.prefill_tps
        self.reading: list = []  # generations with prompt tokens left, in admission order
        self.state = IDLE
        self.chunk: Chunk | None = None
        self.chunk_readers: list = []  # (generation, tokens) of the chunk being read
        self.step_end_v = 0.0
        self.chunks: deque[Chunk] = deque(maxlen=CHUNKS_KEPT)

    def add(self, generation, now: float) -> None:
        """A request whose prompt is ready to be read (its slot taken, base latency spent)."""
        if generation.state != "prefill":
            return  # abandoned meanwhile
        self.reading.append(generation)
        if self.state == IDLE:
            self._start_chunk(self.scheduler.v_at(now), now)

    def drop(self, generation) -> None:
        if generation in self.reading:
            self.reading.remove(generation)

    def on_decode_empty(self, now: float) -> None:
        """The last decoding stream left during a step (its end entry went with it): read on."""
        if self.state == STEP:
            if self.reading:
                self._start_chunk(self.scheduler.v_at(now), now)
            else:
                self.state = IDLE

    # -- the loop --
    def _start_chunk(self, v: float, t: float) -> None:
        budget = max(1, self.n_batch - self.engine.decoding)
        readers = []
        for generation in self.reading:
            take = min(generation.prompt_left, budget)
            readers.append((generation, take))
            budget -= take
            if budget == 0:
                break
        tokens = sum(take for _, take in readers)
        index = self.engine.chunks_done + 1
        self.chunk = Chunk(index, t, t + tokens / self.prefill_tps, [(g.request_id, n) for g, n in readers])
        self.chunk_readers = readers
        self.state = CHUNK
        self.scheduler.freeze(v, t)
        self.scheduler.call_at(self.chunk.t_end, ComputeLoop._on_chunk_end, self)

    def _on_chunk_end(self, due: float) -> None:
        chunk = self.chunk
        self.chunks.append(chunk)
        self.engine.chunks_done = chunk.index
        for generation, take in self.chunk_readers:
            generation.prompt_left -= take
            generation.prompt_chunks += 1
            if generation.prompt_left == 0 and generation in self.reading:
                self.reading.remove(generation)
                generation.on_prefilled(due)  # its first token, the clock still frozen
        self.chunk_readers = []
        if not self.reading:
            self.state = IDLE
            self.scheduler.thaw(due)
        elif self.engine.decoding:
            self.state = STEP
            self.step_end_v = self.scheduler.v_anchor + 1.0 + STEP_SLACK_TOKENS
            self.scheduler.thaw(due)
            self.scheduler.decode_at(self.step_end_v, ComputeLoop._on_step_end, self)
        else:
            self._start_chunk(self.scheduler.v_anchor, due)

    def _on_step_end(self, v: float) -> None:
        if self.state != STEP or v != self.step_end_v:
            return  # a step that ended early (nobody left decoding)
        if self.reading:
            self._start_chunk(v, self.scheduler.t_at(v))
        else:
            self.state = IDLE

    # -- what a stream asks --
    def frozen_between(self, after_index: int, t_start: float, t_end: float) -> tuple[float, str | None]:
        """Seconds the clock stood still between t_start and t_end in chunks after `after_index`, and
        the request whose prompt took most of them."""
        frozen = 0.0
        by_request: dict[str, float] = {}
        for chunk in reversed(self.chunks):
            if chunk.index <= after_index:
                break
            overlap = min(t_end, chunk.t_end) - max(t_start, chunk.t_start)
            if overlap <= 0.0:
                continue
            frozen += overlap
            tokens = sum(n for _, n in chunk.shares)
            for request_id, n in chunk.shares:
                by_request[request_id] = by_request.get(request_id, 0.0) + overlap * n / tokens
        cause = max(by_request, key=by_request.get) if by_request else None
        return frozen, cause
