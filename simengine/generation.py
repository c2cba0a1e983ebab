"""One completion being served: queued -> admitted (role chunk) -> prefill -> decode steps -> finish.

Every time in the truth log is stamped as the `transport.write` of the bytes it names begins
(connection.py: on loopback the client's kernel stamps their arrival inside that write), so the
client's clock (the same CLOCK_MONOTONIC) can be held against it. A non-streamed request follows the
same schedule but writes nothing until its body; its token times are when the events would have gone.

Decoding runs in steps (see `plan_steps`): one content event per step, costing its tokens' time;
with llama.cpp-style drafting, a step sends its accepted draft tokens and its own token as separate
events written back to back, at the cost of one token. An answer that ends by itself, or by a stop
string the client never sees, ends with a step that has no event: its tokens are counted and the
finish chunk is written when they are generated (`t_last_token`).

A thinking answer (`reasoning_tokens`) sends its reasoning first (`delta.reasoning_content`), then
the answer; `t_first_answer_token` is the first answer event's write.

Pauses: in batched prefill mode, when a prompt chunk froze the decode clock between two events of a
decoding stream, the gap is kept (`pauses`): its two events' writes, the seconds frozen inside it
and the request whose prompt the chunks read most. One integer comparison per event finds them.
"""

from __future__ import annotations

import random
import time
from time import perf_counter

from simengine.answer import Answer
from simengine.connection import Connection
from simengine.sse import ChunkEncoder, MessagesEncoder, ResponsesEncoder

FAULT_AFTER_EVENTS = 3  # mid-stream faults strike after this many content events (or the last one)
PAUSES_KEPT = 1000  # per request; n_pauses counts them all
QUEUED, PREFILL, DECODING, STALLED, DONE = "queued", "prefill", "decoding", "stalled", "done"


class Generation:
    def __init__(self, engine, connection: Connection, request_id: str, answer: Answer,
                 encoder: ChunkEncoder | ResponsesEncoder | MessagesEncoder, *,
                 stream: bool, include_usage: bool, continuous_usage: bool, fault: str | None,
                 prompt_tokens: int, block_hashes: list[int], t_arrival: float, stall_s: float) -> None:
        self.engine = engine
        self.connection = connection
        self.request_id = request_id
        self.answer = answer
        self.encoder = encoder
        self.stream = stream
        self.include_usage = include_usage and fault != "no_usage"
        self.continuous_usage = continuous_usage and fault != "no_usage"
        self.fault = fault
        self.prompt_tokens = prompt_tokens
        self.block_hashes = block_hashes
        self.stall_s = stall_s
        self.fault_at = min(FAULT_AFTER_EVENTS, len(answer.events)) - 1
        self.reasoning_events = answer.reasoning_events  # the first events are reasoning
        config = engine.config
        self.steps, self.draft_n, self.draft_accepted = plan_steps(
            answer, config.draft_tokens, config.draft_acceptance, random.Random(request_id))
        self.state = QUEUED
        self.t_arrival = t_arrival
        self.t_admitted = self.t_first_byte = self.t_first_token = self.t_last_token = None
        self.t_last_content = self.t_first_answer_token = None
        self.cached_tokens = 0
        self.prompt_left = 0  # prompt tokens not yet read (batched mode)
        self.prompt_chunks = 0  # chunks its prompt was read in (batched mode)
        self.chunks_seen = 0  # the engine's chunks_done at this stream's last event
        self.pauses: list[dict] = []
        self.n_pauses = 0
        self.next_step = 0
        self.n_events = 0
        self.completion_tokens = 0
        self.first_event_tokens = 0
        self.v_due = 0.0
        self.finish_reason: str | None = None
        connection.on_lost = self.abandon

    # -- lifecycle --
    def admit(self) -> None:
        engine = self.engine
        self.state = PREFILL
        self.t_admitted = perf_counter()
        self.cached_tokens = engine.cached_tokens(self.block_hashes, self.prompt_tokens)
        if self.stream:
            headers = {"x-request-id": self.request_id, "cache-control": "no-cache"}
            # Messages' message_start carries the prompt's usage; a chat role chunk only with continuous usage.
            usage = self.usage() if self.continuous_usage or (self.include_usage and self.encoder.start_usage) else None
            self.t_first_byte = self.connection.start_stream(200, "text/event-stream", headers,
                                                             self.encoder.role(usage))
            self._ping()
        engine.start_prefill(self)

    def on_prefilled(self, _due: float) -> None:
        if self.state != PREFILL:
            return
        self.engine.on_prefilled(self)
        self.state = DECODING
        self.engine.join_decode(perf_counter())
        self.v_due = self.engine.scheduler.v_anchor
        self._emit()

    def _on_decode_due(self, v_due: float) -> None:
        if self.state != DECODING:
            return
        self.v_due = v_due  # the ideal time, not the late wakeup: lateness does not accumulate
        self._emit()

    def _emit(self) -> None:
        """Write this step's events (none for the closing step), then schedule the next step."""
        events, _cost = self.steps[self.next_step]
        engine = self.engine
        for index in events:
            text, tokens = self.answer.events[index]
            self.completion_tokens += tokens
            t = self._write_event(index, text)
            if engine.chunks_done != self.chunks_seen:
                self._note_chunks(t)
            if index <= self.reasoning_events:
                if index == 0:
                    self.t_first_token = t
                    self.first_event_tokens = tokens
                    engine.metrics.ttft.observe(t - self.t_arrival)
                if index == self.reasoning_events:
                    self.t_first_answer_token = t
            self.t_last_token = self.t_last_content = t
            self.n_events += 1
            engine.metrics.generation_tokens += tokens
            if index == self.fault_at and self._strike_fault():
                return
        self.next_step += 1
        if self.next_step < len(self.steps):
            self.engine.scheduler.decode_at(self.v_due + self.steps[self.next_step][1], Generation._on_decode_due, self)
        else:
            self._finish()

    def _write_event(self, index: int, text: str) -> float:
        if not self.stream:
            return perf_counter()
        usage = self.usage() if self.continuous_usage else None
        if self.answer.tool_name is None and index >= self.reasoning_events:
            payload = self.encoder.content(text, usage)
        elif index < self.reasoning_events:
            payload = self.encoder.reasoning(text, usage)
        elif index == self.reasoning_events:
            payload = self.encoder.tool_header(self.answer.tool_call_id, self.answer.tool_name, usage)
        else:
            payload = self.encoder.tool_arguments(text, usage)
        t = self.connection.send_chunk(payload)
        self._ping()
        return t

    def _note_chunks(self, t: float) -> None:
        """Prompt chunks were read since this stream's last event: the gap up to t is a pause (not
        before the first token: those chunks are its own prompt's, or its wait)."""
        engine = self.engine
        if self.t_last_token is not None:
            frozen_s, cause = engine.compute.frozen_between(self.chunks_seen, self.t_last_token, t)
            if frozen_s > 0.0:
                self.n_pauses += 1
                if len(self.pauses) < PAUSES_KEPT:
                    self.pauses.append({"t_start": self.t_last_token, "t_end": t, "frozen_s": frozen_s,
                                        "cause_request_id": cause})
        self.chunks_seen = engine.chunks_done

    def _ping(self) -> None:
        if self.fault == "keepalive":
            self.connection.send_chunk(self.encoder.ping())

    # -- faults that strike mid-stream; True when the stream takes another course --
    def _strike_fault(self) -> bool:
        fault = self.fault
        if fault == "drop":
            self._end(None)
            self.connection.close()  # no chunked terminator: the client sees the body cut short
        elif fault == "stall":
            self.engine.leave_decode(perf_counter())
            self.state = STALLED
            self.engine.scheduler.call_at(perf_counter() + self.stall_s, Generation._on_stall_end, self)
        elif fault == "error_event" and self.stream:
            for payload in self.encoder.failure("simulated engine error (fault error_event)"):
                self.connection.send_chunk(payload)
            self._end("error")
            self.connection.end_stream()
        elif fault == "malformed" and self.stream:
            self.connection.send_chunk(self.encoder.malformed())
            return False
        else:
            return False
        return True

    def _on_stall_end(self, _due: float) -> None:
        if self.state == STALLED:
            self._end(None)
            self.connection.close()

    # -- the end --
    def _finish(self) -> None:
        reason = self.answer.finish_reason
        closing = self.answer.closing_tokens
        if closing:  # generated now, without text: the finish chunk is their only trace
            self.completion_tokens += closing
            self.engine.metrics.generation_tokens += closing
            t = perf_counter()
            if self.engine.chunks_done != self.chunks_seen:
                self._note_chunks(t)
            self.t_last_token = t
        if not self.stream:
            body = self._body(reason)
            self.t_first_byte = perf_counter()  # just before the write: the log line must precede it
            self._end(reason)
            self.connection.send_json(200, body, {"x-request-id": self.request_id})
            return
        usage = self.usage() if self.include_usage else None
        timings = None if self.fault == "no_usage" else self.timings()
        finish_usage = self.usage() if self.continuous_usage else None
        for payload in self.encoder.closing(reason, finish_usage, usage, timings, self.fault != "no_done"):
            self.connection.send_chunk(payload)
        self._end(reason)
        self.connection.end_stream()

    def _body(self, reason: str) -> dict:
        usage = None if self.fault == "no_usage" else self.usage()
        return self.encoder.body(self.answer, reason, usage, None if usage is None else self.timings())

    def _end(self, finish_reason: str | None, status: int = 200) -> None:
        """Log the truth; called before the response's last bytes, so a client that has seen the
        end of its response finds its line in the truth log."""
        if self.state == DONE:
            return
        self.connection.on_lost = None
        was_decoding = self.state == DECODING
        self.state = DONE
        self.finish_reason = finish_reason
        self.engine.release(self, was_decoding, status)

    def abandon(self) -> None:
        """The client went away before the end."""
        if self.state == QUEUED:
            self.engine.unqueue(self)
        self._end(None, status=499)

    # -- figures --
    def usage(self) -> dict:
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                 "total_tokens": self.prompt_tokens + self.completion_tokens,
                 "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}
        if self.answer.reasoning_tokens:  # a thinking answer, as vLLM and OpenAI count it
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens()}
        return usage

    def reasoning_tokens(self) -> int:
        return min(self.completion_tokens, self.answer.reasoning_tokens)  # the reasoning comes first

    def timings(self) -> dict:
        """llama.cpp's `timings`, with its definitions (tools/server/server-context.cpp, measured on
        the real server: docs/engines.md#llamacpp-timings): prompt_ms runs from the slot taking the
        request to the first sampled token, predicted_ms from the first sampled token to the last (an
        end-of-sequence token included), predicted_n counts every token, predicted_per_second is the
        tokens after the first over predicted_ms; draft_n and draft_n_accepted only when the engine
        speculated."""
        prompt_n = self.prompt_tokens - self.cached_tokens
        last = self.t_last_token if self.t_last_token is not None else perf_counter()
        first = self.t_first_token if self.t_first_token is not None else last  # no text at all
        prompt_ms = (first - self.t_admitted) * 1000.0
        predicted_ms = (last - first) * 1000.0
        after_first = self.completion_tokens - self.first_event_tokens
        timings = {"cache_n": self.cached_tokens, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                   "prompt_per_second": prompt_n / prompt_ms * 1000.0 if prompt_ms > 0 else None,
                   "predicted_n": self.completion_tokens, "predicted_ms": predicted_ms,
                   "predicted_per_second": after_first / predicted_ms * 1000.0 if predicted_ms > 0 else None}
        if self.draft_n:
            timings |= {"draft_n": self.draft_n, "draft_n_accepted": self.draft_accepted}
        return timings

    def truth(self, status: int) -> dict:
        """The true figures, under the client's definitions: decode runs from the first content event
        to the last token generated (the closing step's, when the answer ends without text)."""
        decode_s = (self.t_last_token - self.t_first_token) if self.t_first_token is not None else 0.0
        after_first = self.completion_tokens - self.first_event_tokens
        return {
            "request_id": self.request_id, "api": self.encoder.api, "fault": self.fault, "status": status,
            "t_arrival": self.t_arrival, "t_admitted": self.t_admitted, "t_first_byte": self.t_first_byte,
            "t_first_token": self.t_first_token, "t_last_content": self.t_last_content,
            "t_last_token": self.t_last_token, "n_events": self.n_events,
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens, "first_event_tokens": self.first_event_tokens,
            "closing_tokens": self.answer.closing_tokens, "tokens_per_event": self.engine.config.tokens_per_event,
            "draft_n": self.draft_n, "draft_n_accepted": self.draft_accepted,
            "ttft_s": self.t_first_token - self.t_arrival if self.t_first_token is not None else None,
            "decode_tps": after_first / decode_s if decode_s > 0 and after_first > 0 else None,
            "reasoning_tokens": self.reasoning_tokens(), "t_first_answer_token": self.t_first_answer_token,
            "ttfo_s": (self.t_first_answer_token - self.t_arrival if self.t_first_answer_token is not None
                       else None),
            "prompt_chunks": self.prompt_chunks, "pauses": self.pauses, "n_pauses": self.n_pauses,
            "finish_reason": self.finish_reason, "wall_time": time.time(),
        }


def plan_steps(answer: Answer, draft_tokens: int, acceptance: float, rng: random.Random) -> tuple[list, int, int]:
    """The decode steps of an answer: [(event indexes, cost in tokens' time)], drafted, accepted.

    The first step is the prompt step's token. Without drafting every later step is one event and
    costs its tokens. With drafting (llama.cpp) each step drafts ``draft_tokens``, accepts them in
    order while each passes (chance ``acceptance``), and sends the accepted ones and its own token
    as separate events, for the cost of one token. The closing tokens (no text) are one more step:
    they cost their tokens' time, or ride in the last step when its draft had room for them."""
    n = len(answer.events)
    steps: list[tuple[list[int], float]] = [([0], 0.0)] if n else []
    drafted = accepted = 0
    index, room = 1, 0
    while index < n:
        if draft_tokens:
            run = 0
            while run < draft_tokens and rng.random() < acceptance:
                run += 1
            events = list(range(index, min(index + 1 + run, n)))
            drafted, accepted, room = drafted + draft_tokens, accepted + len(events) - 1, 1 + run - len(events)
            steps.append((events, 1.0))
        else:
            events = [index]
            steps.append((events, float(answer.events[index][1])))
        index += len(events)
    if answer.closing_tokens or not steps:
        cost = 0.0 if draft_tokens and room >= answer.closing_tokens else float(answer.closing_tokens)
        steps.append(([], cost if steps else 0.0))
    return steps, drafted, accepted
