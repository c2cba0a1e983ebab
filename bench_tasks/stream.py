"""Timing of one streamed completion: a pure function of (arrival time, bytes) pairs.

No clock is read here. The caller stamps each chunk as it arrives (``time.perf_counter()`` in the
Locust glue, exact synthetic times in the tests) and the Recorder turns the stamped chunks into
figures. The chunks are cut into server-sent events at their blank lines: the whole events a chunk
completed are read at once (the rest waits for the next chunk), so each event gets the stamp of the
chunk that completed it. An event of one ``data:`` line (all of Chat Completions') or of an ``event:``
line and a ``data:`` line (the typed APIs') is read by the Recorder itself; any other shape (comments,
ids, data over several lines) is parsed by sseclient-py's ``SSEClient``, and the test suite holds the
two to the same result on every shape and every cut. sseclient-py's per-line work (a split, a decode
and a string join per line, an object per event) was half the Recorder's time per event (3.3 of
6.1 us in a tight loop, W3's events).
Per event this is a split (none when a read brought one whole event, the common read), a decode, the
decoder's JSON parse (none for the events of the typed APIs that carry nothing to measure) and a few
appends; the rest once per request.

What an event means depends on the API the request spoke: a decoder per API (bench_tasks/decoders.py:
Chat Completions, Responses, Messages) maps each event to this Recorder's few calls (a token, the
closing event, usage, the end, an error), and the rules below are kept here, once, for all of them.

How the stream is read, where sseclient-py and the SSE specification (WHATWG HTML, "Interpreting an
event stream") could disagree:

- Lines end with LF, CRLF or CR, mixed as a server likes: the chunks are cut (and handed to SSEClient)
  with LF endings (sseclient-py's own blank-line search misses a CR line followed by a CRLF blank line,
  and would hold a CRLF's event for its LF). A CR that ends a chunk ends its line at once; an LF that opens
  the next chunk is then its CRLF's second half.
- A byte-order mark before the first line is dropped, as the specification says (sseclient-py
  would read ``\ufeffdata`` as an unknown field and lose the first event).
- An event whose data is empty (``data:``) is dispatched, as the specification says; it carries
  nothing to measure and is skipped.
- A last event without its blank line (``data: [DONE]`` and the body ends) still counts, as
  sseclient-py has it; the specification discards it, which would call a finished answer cut.
- Bytes that are not UTF-8 make the event ``malformed_event`` (the specification has a browser
  replace them; a measuring client says the server sent them).

Definitions (docs/measurement.md#the-figures-of-a-request repeats them):

- ``ttfb_s``: send -> response headers.
- ``ttft_s``: send -> the first event carrying non-empty content, reasoning or tool-call text. A
  role-only chunk (``{"role": "assistant", "content": ""}``) is not a token.
- ``e2e_s``: send -> the stream ended.
- ``decode_s``: first content event -> the last token generated. An answer that ends by itself
  ends with a token that has no text (the end-of-sequence token; a stop string the server
  swallows): ``usage`` counts it, so its time is counted too, and it was generated when the event
  that closes the answer (the one that says how it ended, without text: Chat Completions'
  ``finish_reason`` chunk; on the typed APIs the first event after the last token that says the tokens
  have ended, Messages' ``content_block_stop``, Responses' ``...done`` events, else the one that says
  how: ``message_delta``, ``response.completed``) was sent. Otherwise
  (cut by max_tokens, or the closing event carries text) the last token is the last content event.
  llama.cpp's ``predicted_ms`` and vLLM's ``request_decode_time_seconds`` span the same: first
  sampled token to last.
- ``decode_tps = (completion_tokens - first_event_tokens) / decode_s``: the tokens generated
  after the first content event over the time they took. With one token per event this is
  (n - 1) / (t_last - t_first); with several tokens per event (speculative decoding) subtracting
  only 1 would overstate the rate.
- ``first_event_tokens``: from per-event usage when the server streams it (vLLM's
  continuous_usage_stats), else from the engine profile when it knows (llama.cpp: 1, the token its
  prompt step sampled), else estimated as the content events' tokens over their number:
  max(completion_tokens - closing_tokens, content_events) / content_events, where closing_tokens
  is 1 when the answer ended by itself with a closing event that carried no text (its
  end-of-sequence token), else 0.
- ``prompt_tps = prompt_tokens / ttft_s``.
- ``ttft_uncertainty_s``: how much later than its arrival the first token may be stamped. A read is
  stamped by the arrival of its newest bytes (the kernel keeps one stamp for bytes that waited
  together), so the stamp is exact when the read that brought the first content event ended with
  it (0). When k more content events (or the closing end-of-sequence event) came in the same read,
  the stamp is the last of theirs: about k of the stream's mean gaps between reads later.
  Unknown (None) without kernel stamps, where the read's own time stands in.
- ``read_lateness_max_s``: the longest any read's newest bytes waited in the kernel.
- ``ttfo_s``: send -> the first event carrying answer text (content or tool-call text), after any
  reasoning; equal to ``ttft_s`` when the model did not reason, missing when the reasoning used up
  ``max_tokens``. ``reasoning_tokens``: ``usage.completion_tokens_details.reasoning_tokens`` where
  the server gives it, else missing.
- ``slot_wait_s = ttft_s - engine_prompt_ms / 1000 - rtt_s``: from the send to the engine taking
  the request into a slot, less the network: its queue, and whatever the server did with the
  request before (reading, parsing). Where the engine times its prompt (llama.cpp's ``prompt_ms``
  runs from the slot taking the request to its first token) and the kernel gives the connection's
  round trip (``rtt_s``, set by the caller).
- Stalls: the gaps between consecutive token events (the content events, and the closing event when
  it carries the end-of-sequence token, as ``decode_s`` counts it) longer than
  ``stall_threshold_s = max(STALL_FACTOR x gap_p50_s, STALL_FLOOR_S)``: long against the stream's
  own rhythm and long enough to see. ``stall_count`` and ``stall_s`` count and sum them all;
  ``stalls`` keeps the STALLS_KEPT longest, in time order, as ``start_s:stall_s`` pairs (start:
  the event before the gap, seconds from send). Found once per request from the times the stream
  already keeps: nothing per event.
- ``bunched_events``: content events stamped the same as the content event before them, i.e. read
  in the same chunk. The caller gives all lines of one read one stamp. Above half of the gaps, the
  record is flagged ``bunched``: the events came in lumps, and their times are the delivery's. The
  tokens a speculating engine accepted from its draft (llama.cpp's ``draft_n_accepted``) are sent
  back to back, one event each, by the engine itself: their gaps are left out of that share.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

from sseclient import SSEClient

from bench_tasks.decoders import ChatDecoder
from bench_tasks.errors import EMPTY_ANSWER, MALFORMED_EVENT, NO_DONE
from bench_tasks.record import Record, add_flag
from bench_tasks.statistics import quantile

BUNCHED_SHARE = 0.5  # of the gaps between content events, zero (same read) above this: flag `bunched`
BOM = b"\xef\xbb\xbf"
# Line ends as ints for ``in`` and ``find``: CPython (3.11 here) tries a bytes needle as an int first, and
# the TypeError it makes and clears costs eight times the search (0.43 against 0.05 us on a W3 event).
CR, LF = ord("\r"), ord("\n")
# A stall is a gap three times the stream's median gap: a decode step's own jitter, and the slowdown
# of a batch growing from one stream to a dozen (the sim's 1.9x at 12), stay below it. And at least
# 0.1 s, the limit below which a reader sees text as flowing (Nielsen's 0.1 s): a chat's 21-token
# question read between two decode steps pauses the others ~10 ms, which nobody sees.
STALL_FACTOR = 3.0
STALL_FLOOR_S = 0.1
STALLS_KEPT = 5


class _Unlogged:
    """sseclient-py logs every event it dispatches at debug level, through its private ``_logger``; the
    logger's level check alone cost 2-3% of the measuring path per event (a no-op here instead)."""

    @staticmethod
    def debug(*_args) -> None:
        return None


_UNLOGGED = _Unlogged()


def _sse_events(event: bytes) -> Iterator:
    """sseclient-py's events (objects with ``event`` and ``data``) of one event's lines."""
    parser = SSEClient([event + b"\n\n"])
    parser._logger = _UNLOGGED  # noqa: SLF001 - see _Unlogged
    return parser.events()


def _field_value(line: str, start: int) -> str:
    """A field's value: the line from ``start`` (just after the field's colon), less one leading space."""
    return line[start + 1:] if line.startswith(" ", start) else line[start:]


class Recorder:
    """Keeps, per event, only a timestamp and what the formulas need; the rest once per request."""

    def __init__(self, t_send: float, first_event_tokens: float | None = None, decoder=None) -> None:
        """``first_event_tokens``: what the engine's profile knows its first content event carries
        (llama.cpp: the one token its prompt step sampled), used when no per-event usage says.
        ``decoder``: what the events of the request's API mean (bench_tasks/decoders.py; default: Chat
        Completions)."""
        self.decoder = ChatDecoder() if decoder is None else decoder
        self._on_event = self.decoder.on_event  # bound once: it runs for every event
        self.t_send = t_send
        self.known_first_event_tokens = first_event_tokens
        self.t_headers: float | None = None
        self.rtt_s: float | None = None  # the connection's round trip, from the kernel (the caller's reading)
        self.t_end: float | None = None
        self.event_times: list[float] = []  # content events only
        self.t_first_answer: float | None = None  # the first content or tool-call event after any reasoning
        self.bunched_events = 0  # content events read in the same chunk as the content event before
        self.first_event_usage: dict | None = None
        self.first_event_lateness: float | None = None  # of the read that brought the first content event
        self.lateness_max: float | None = None
        self._t = t_send  # arrival of the chunk being parsed
        self._lateness: float | None = None  # of the chunk being read
        self.usage: dict | None = None
        self.timings: dict | None = None
        self.finish_reason: str | None = None
        self.t_close: float | None = None  # the event that carried finish_reason
        self._end_mark: tuple[float, int] | None = None  # (when, content events before it): see tokens_ended
        self.close_had_text = False
        self.response_id = ""
        self.done = False
        self.error = ""
        self.error_detail = ""
        self._pieces: list[str] = []
        self._tool_deltas: list[list] = []

    # -- feeding --
    def headers(self, t: float) -> None:
        self.t_headers = t

    def consume(self, timed_chunks: Iterable[tuple[float, bytes, float | None]]) -> None:
        """Read the whole stream, or until [DONE] or an error event. Each chunk comes with its
        arrival ``t`` and how long it waited in the kernel before it was read (None: unknown). An
        event gets the arrival time of the chunk that completes it."""
        held = b""  # the start of an event whose blank line is yet to come
        first, cr_ended = True, False  # cr_ended: the chunk before ended with a CR
        try:
            for t, chunk, lateness in timed_chunks:
                self._t, self._lateness = t, lateness
                if lateness is not None and (self.lateness_max is None or lateness > self.lateness_max):
                    self.lateness_max = lateness
                if first and chunk:
                    first, chunk = False, chunk[3:] if chunk.startswith(BOM) else chunk
                if CR in chunk or cr_ended:
                    chunk, cr_ended = _with_lf(chunk, cr_ended)
                if held:
                    chunk = held + chunk
                if chunk.find(LF) == len(chunk) - 2 and chunk[-1] == LF:
                    # One line and its blank line: the one event a server writes at a time, the common read.
                    # One memchr finds it (0.2 us a read here, where split's two-byte search cost 0.5).
                    events, held = [chunk[:-2]], b""
                else:
                    events = chunk.split(b"\n\n")  # the events this chunk completed, and the start of the next
                    held = events.pop()
                if events and not self._dispatch(events):
                    return
            if held:  # the body ended inside an event: it still counts (see above)
                self._dispatch([held])
        except UnicodeDecodeError as exc:
            self._fail(MALFORMED_EVENT, f"not UTF-8: {exc.object[max(0, exc.start - 80):exc.end + 80]!r}")

    def _dispatch(self, events: list[bytes]) -> bool:
        """Hand the decoder each event (its lines, LF-ended, without the blank line), by its name and data;
        False: the stream's end or an error ended it.

        An event of one ``data:`` line (every event of Chat Completions), or of an ``event:`` line and a
        ``data:`` line (the typed APIs'), is read here: a field's value is the line after its colon, less one
        leading space, the name ``message`` when none is given, as the specification and sseclient-py have
        it. Any other event (a comment, an ``id:``, data over several lines, blank lines in a row) is
        sseclient-py's to parse. sseclient-py's own work per line (splitting, decoding and joining each one,
        an object per event) cost half of the Recorder's time per event (see the module's docstring)."""
        on_event = self._on_event
        for event in events:
            if event.startswith(b"data:") and LF not in event:
                line = event.decode()  # _field_value's work, inline: this runs for every event
                if not on_event(self, "message", line[6:] if line[5:6] == " " else line[5:]):
                    return False
                continue
            name, _, data = event.partition(b"\n")
            if name.startswith(b"event:") and data.startswith(b"data:") and LF not in data:
                name, data = _field_value(name.decode(), 6) or "message", _field_value(data.decode(), 5)
                if not on_event(self, name, data):
                    return False
                continue
            for parsed in _sse_events(event):
                if not on_event(self, parsed.event, parsed.data):
                    return False
        return True

    # -- what the decoder says of each event (bench_tasks/decoders.py) --
    def token(self, text: str | None, answer, tools: list | None = None, usage: dict | None = None) -> None:
        """An event that carries generated text: answer text (``answer`` true), reasoning, or a tool
        call's fragments (``tools``); ``usage``: its own, where the server sends one per event."""
        t = self._t
        if self.t_first_answer is None and answer:
            self.t_first_answer = t
        times = self.event_times
        if not times:
            self.first_event_usage, self.first_event_lateness = usage, self._lateness
        elif t == times[-1]:  # one chunk, one stamp: the same read
            self.bunched_events += 1
        times.append(t)
        if text:
            self._pieces.append(text)
        if tools:
            self._tool_deltas.append(tools)

    def tool_fragment(self, tools: list) -> None:
        """A tool call's fragment without text (its id): kept for the assembly, not a token."""
        self._tool_deltas.append(tools)

    def tokens_ended(self) -> None:
        """An event that says the answer's tokens have ended, before the one that says how (Responses'
        ``...done`` events before ``response.completed``, which vLLM may send milliseconds later): the
        answer closed there, unless a token came after it (vLLM closes the reasoning mid-answer)."""
        if self._end_mark is None or self._end_mark[1] != len(self.event_times):
            self._end_mark = (self._t, len(self.event_times))

    def close(self, finish_reason: str, had_text: bool) -> None:
        """The event that says how the answer ended; the first one counts. It closed the answer, unless
        an event after the last token said the tokens had ended before it."""
        if self.t_close is None:
            mark = self._end_mark
            t = mark[0] if mark is not None and mark[1] == len(self.event_times) else self._t
            self.finish_reason, self.t_close, self.close_had_text = finish_reason, t, had_text

    def _fail(self, error: str, detail: str) -> bool:
        self.error, self.error_detail = error, detail
        return False

    def fail(self, error: str, detail: str = "") -> bool:
        """A failure, seen by the decoder or the caller (disconnect, timeout...): the first error wins.
        False: read no further."""
        if not self.error:
            self._fail(error, detail)
        return False

    def end(self, t: float) -> None:
        self.t_end = t
        if not self.error and not self.done:
            self._fail(NO_DONE, f"the stream ended without {self.decoder.end_event}")
        if not self.error and not self.event_times:
            self._fail(EMPTY_ANSWER, "no event carried content, reasoning or tool-call text")

    # -- results, once per request --
    @property
    def answer_text(self) -> str:
        return "".join(self._pieces)

    @property
    def tool_calls(self) -> list[dict]:
        return assemble_tool_calls(self._tool_deltas)

    def fill(self, record: Record) -> Record:
        """Write the measured figures into ``record``; missing figures stay None."""
        record.ok = not self.error
        record.api = self.decoder.api
        record.error, record.error_detail = self.error, self.error_detail
        record.done, record.finish_reason = self.done, self.finish_reason
        record.request_id = record.request_id or self.response_id
        record.t_send = self.t_send
        record.ttfb_s = _since(self.t_headers, self.t_send)
        record.e2e_s = _since(self.t_end, self.t_send)
        record.content_events = len(self.event_times)
        record.bunched_events = self.bunched_events
        record.read_lateness_max_s = self.lateness_max
        record.ttfo_s = _since(self.t_first_answer, self.t_send)
        record.rtt_s = self.rtt_s
        self._fill_tokens(record)
        self._fill_engine_timings(record)
        if is_bunched(record.content_events, self.bunched_events, record.engine_draft_accepted_n or 0):
            add_flag(record, "bunched")
        if self.event_times:
            self._fill_rates(record)
        if None not in (record.ttft_s, record.engine_prompt_ms, record.rtt_s):
            # The engine read the prompt for prompt_ms; the request and its first token crossed the
            # network once each way: the rest of the first token's wait was for a slot.
            record.slot_wait_s = record.ttft_s - record.engine_prompt_ms / 1000 - record.rtt_s
        return record

    def _fill_tokens(self, record: Record) -> None:
        usage = self.usage or {}
        if "completion_tokens" in usage:
            record.usage_source = "usage"
            record.prompt_tokens = usage.get("prompt_tokens")
            record.completion_tokens = usage.get("completion_tokens")
            details = usage.get("prompt_tokens_details") or {}
            record.cached_tokens = details.get("cached_tokens")
            record.reasoning_tokens = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        else:
            # No usage chunk: count content events, one token each, and say so.
            record.usage_source = "counted"
            record.completion_tokens = len(self.event_times) or None
        if record.cached_tokens is None and self.timings and "cache_n" in self.timings:
            record.cached_tokens = self.timings["cache_n"]

    def _fill_rates(self, record: Record) -> None:
        times = self.event_times
        record.ttft_s = times[0] - self.t_send
        n_events = len(times)
        completion = record.completion_tokens
        if completion:
            record.tokens_per_event = completion / n_events
            per_event = (self.first_event_usage or {}).get("completion_tokens")
            if per_event:
                record.first_event_tokens, record.first_event_tokens_source = float(per_event), "usage"
            elif self.known_first_event_tokens:
                record.first_event_tokens = float(self.known_first_event_tokens)
                record.first_event_tokens_source = "profile"
            else:
                # Every content event carries at least one token, whatever a server counts.
                record.first_event_tokens = max(completion - self._closing_tokens(), n_events) / n_events
                record.first_event_tokens_source = "estimate"
        if record.prompt_tokens and record.ttft_s > 0:
            record.prompt_tps = record.prompt_tokens / record.ttft_s
        # Generation ends at the closing event when it brought no text: the answer's last token (an
        # end-of-sequence token, a swallowed stop string) was generated then. Cut by max_tokens, the
        # last token is the last content event; the finish chunk llama.cpp sends after it is not.
        t_closed = self.t_close if self._closing_tokens() and self.t_close > times[-1] else times[-1]
        after_first = (completion or 0) - (record.first_event_tokens or 0)
        if t_closed > times[0]:
            record.decode_s = t_closed - times[0]
            if after_first > 0:
                record.decode_tps = after_first / record.decode_s
                record.itl_s = record.decode_s / after_first
        if n_events < 2:
            record.ttft_uncertainty_s = self._ttft_uncertainty([])
            return
        in_order = list(map(operator.sub, times[1:], times[:-1]))
        gaps = sorted(in_order)
        record.gap_p50_s = quantile(gaps, 0.5)
        record.gap_p95_s = quantile(gaps, 0.95)
        record.gap_max_s = gaps[-1]
        record.ttft_uncertainty_s = self._ttft_uncertainty(gaps)
        if t_closed > times[-1]:  # the end-of-sequence token's step is a gap of the stream too
            in_order.append(t_closed - times[-1])
        _fill_stalls(record, times, in_order, self.t_send)

    def _ttft_uncertainty(self, sorted_gaps: list[float]) -> float | None:
        """How coarse the first token's stamp may be (see the module's definitions)."""
        late, times = self.first_event_lateness, self.event_times
        if late is None:
            return None
        read_with_it = next((i for i, t in enumerate(times) if t != times[0]), len(times)) - 1
        if self.t_close == times[0] and self._closing_tokens():
            read_with_it += 1  # an end-of-sequence token, generated a step later, came in the same read
        if read_with_it == 0:
            return 0.0
        # The read is dated by its newest bytes; the first token's came about one event gap per
        # event read with it earlier: the stream's cadence, the mean of the gaps between its reads
        # (a loaded engine writes late now and then; the median would not see it).
        spaced = [g for g in sorted_gaps if g > 0]
        gap = sum(spaced) / len(spaced) if spaced else late
        return read_with_it * gap

    def _closing_tokens(self) -> int:
        """Tokens counted after the last content event, as far as the stream shows: the
        end-of-sequence token of an answer that ended by itself, sent as a closing event without
        text (llama.cpp: none at all, vLLM: an empty delta). A swallowed stop string may hold more."""
        ended_by_itself = self.finish_reason in ("stop", "tool_calls")
        return 1 if ended_by_itself and self.t_close is not None and not self.close_had_text else 0

    def _fill_engine_timings(self, record: Record) -> None:
        timings = self.timings
        if not timings:
            return
        record.engine_prompt_n = timings.get("prompt_n")
        record.engine_prompt_ms = timings.get("prompt_ms")
        record.engine_predicted_n = timings.get("predicted_n")
        record.engine_predicted_ms = timings.get("predicted_ms")
        record.engine_predicted_tps = timings.get("predicted_per_second")
        record.engine_cache_n = timings.get("cache_n")
        record.engine_draft_n = timings.get("draft_n")
        record.engine_draft_accepted_n = timings.get("draft_n_accepted")


def _fill_stalls(record: Record, times: list[float], gaps: list[float], t_send: float) -> None:
    """The gaps long against the stream's own rhythm (see the module's definitions); ``gaps[i]``
    follows ``times[i]``."""
    threshold = max(STALL_FACTOR * record.gap_p50_s, STALL_FLOOR_S)
    long_ones = [(gap, i) for i, gap in enumerate(gaps) if gap > threshold]
    record.stall_threshold_s = threshold
    record.stall_count = len(long_ones)
    record.stall_s = sum(gap for gap, _ in long_ones)
    kept = sorted(sorted(long_ones, reverse=True)[:STALLS_KEPT], key=operator.itemgetter(1))
    record.stalls = ";".join(f"{times[i] - t_send:.4f}:{gap:.4f}" for gap, i in kept)


def parse_stalls(text: str) -> list[tuple[float, float]]:
    """A record's ``stalls`` cell as (start_s, stall_s) pairs."""
    pairs = []
    for item in (text or "").split(";"):
        if item:
            start, length = item.split(":")
            pairs.append((float(start), float(length)))
    return pairs


def is_bunched(content_events: int, bunched_events: int, draft_accepted: int = 0) -> bool:
    """More than half of the gaps between content events were zero: the events reached us in lumps
    (a buffering proxy, a starved server loop, or a client that fell behind), so the per-event times
    are the delivery's, not the generation's, and decode and gap figures say little about the engine.

    A speculating engine that streams one event per token (llama.cpp) writes the tokens it accepted
    from a draft back to back with the one that verified them: ``draft_accepted`` such gaps are
    zero by the engine's own doing, and are left out of both counts."""
    gaps = content_events - 1 - draft_accepted
    lumped = bunched_events - draft_accepted
    return gaps >= 2 and lumped > BUNCHED_SHARE * gaps


def assemble_tool_calls(deltas: list[list]) -> list[dict]:
    """Join streamed tool-call fragments by index: the name once, the arguments concatenated."""
    calls: dict[int, dict] = {}
    for fragment_list in deltas:
        for fragment in fragment_list:
            call = calls.setdefault(fragment.get("index", 0), {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or fragment.get("id") or ""
            function = fragment.get("function") or {}
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


def _with_lf(chunk: bytes, after_cr: bool) -> tuple[bytes, bool]:
    """``chunk`` with LF line endings, and whether it ended with a CR. ``after_cr``: the chunk
    before ended with a CR, already an LF, so an LF opening this one was the rest of its CRLF."""
    if not chunk:
        return chunk, after_cr
    if after_cr and chunk.startswith(b"\n"):
        chunk = chunk[1:]
    return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), chunk.endswith(b"\r")


def _since(t: float | None, t0: float) -> float | None:
    return None if t is None else t - t0
