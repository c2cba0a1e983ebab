"""One finished request, flat: its field names are the CSV columns and the documentation's terms
(docs/reference.md#requestscsv-one-row-per-request).

A figure that could not be measured is ``None`` (an empty CSV cell), never 0: a request that
produced one event has no decode rate, a failed request has no TTFT.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class Record:
    # -- what was asked, and by whom (labels) --
    scenario: str = ""  # chat, prompt, agent, burst, needle, warmup
    phase: str = ""  # e.g. chat, prompt-16k, agent, burst-12, needle-32k
    round: int | None = None  # run number within the phase (burst: round)
    turn: int | None = None  # agent turn, 1-based
    concurrency: int = 1  # requests the phase sends at the same moment
    students: int | None = None  # classroom: students seated when it was sent
    user: str = ""  # Locust user that sent it
    client_host: str = ""  # machine that sent it (hostname or --client-host)
    client_pid: int = 0
    setup: str = ""  # the label of the serving setup under test (--setup)
    engine: str = ""  # engine profile used
    model: str = ""
    endpoint: str = ""  # /v1/chat/completions, /v1/responses, /v1/messages (or /v1/completions)
    api: str = ""  # chat, responses or messages: the API whose stream was read (bench_tasks/decoders.py)
    prompt_size: int | None = None  # asked prompt size in tokens (prompt, needle)
    needle_depth: float | None = None  # 0.1, 0.5, 0.9
    needle_found: bool | None = None
    tool_name: str | None = None  # agent: the tool the model called
    tool_call_valid: bool | None = None  # agent: a known tool with JSON arguments
    # -- the user's own traffic (bench_tasks/traffic) --
    source: str = ""  # file:line the request was read from (a prompt file, a conversation, a trace)
    shared_tokens: int | None = None  # its prompt's tokens an earlier request sent too (trace hash ids, a prefix)
    request_id: str = ""  # the server's response id (joins with engine logs)
    run_mark: str = ""  # the mark that opened this run's prompts (bench_tasks.run_mark)
    mark_repeated: bool = False  # --repeat-mark: an earlier run's texts again, meant to be served from its cache
    t_start: float = 0.0  # unix seconds when sent: a label, never used for durations
    # -- outcome --
    ok: bool = False
    error: str = ""  # error class, empty when ok
    error_detail: str = ""
    http_status: int | None = None
    done: bool = False  # the stream ended with data: [DONE]
    finish_reason: str | None = None
    flags: str = ""  # ';'-joined: cache_hit, client_saturated, bunched, ...
    # -- durations (time.perf_counter, seconds from sending) --
    ttfb_s: float | None = None  # response headers received
    ttft_s: float | None = None  # first event carrying content, reasoning or tool-call text
    ttfo_s: float | None = None  # first answer (content or tool-call) event, after any reasoning
    e2e_s: float | None = None  # stream finished
    decode_s: float | None = None  # the closing (finish_reason) event - the first content event
    t_send: float | None = None  # perf_counter at send; comparable within one machine
    release_offset_s: float | None = None  # burst: send time minus the round's release instant
    clock_offset_s: float | None = None  # on a worker: master clock minus this clock (ping/pong)
    # -- where the wait went --
    rtt_s: float | None = None  # the connection's least TCP round trip (tcpi_min_rtt; Linux)
    slot_wait_s: float | None = None  # waiting for a slot: ttft_s - engine_prompt_ms - rtt_s (llama.cpp timings)
    # -- tokens (from the server's usage when it sends one) --
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    shareable_tokens: int | None = None  # what it may share with earlier requests (bench_tasks.cache_share)
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, where given
    usage_source: str = ""  # usage | counted (no usage chunk: one token per content event assumed)
    content_events: int = 0
    bunched_events: int = 0  # content events read in the same chunk as the one before
    first_event_tokens: float | None = None
    first_event_tokens_source: str = ""  # usage (per-event usage) | estimate (completion_tokens / content_events)
    tokens_per_event: float | None = None
    # -- rates --
    prompt_tps: float | None = None  # prompt_tokens / ttft_s
    decode_tps: float | None = None  # (completion_tokens - first_event_tokens) / decode_s
    itl_s: float | None = None  # per token: decode_s / (completion_tokens - first_event_tokens)
    gap_p50_s: float | None = None  # between consecutive content events
    gap_p95_s: float | None = None
    gap_max_s: float | None = None
    # -- stalls: gaps longer than stall_threshold_s = max(3 x gap_p50_s, 0.1 s) --
    stall_count: int | None = None
    stall_s: float | None = None  # their total
    stall_threshold_s: float | None = None
    stalls: str = ""  # the 5 longest, in time order: start_s:stall_s (seconds from send), ';'-joined
    # -- how far the client's stamps can be trusted --
    ttft_uncertainty_s: float | None = None  # how much later than its arrival the first token may be stamped
    read_lateness_max_s: float | None = None  # the longest a read's bytes waited in the kernel
    cpu_stolen_s: float | None = None  # the most the client machine's host took from one of its CPUs while it
    # ran (steal, bench_tasks.steal), in all
    cpu_pause_s: float | None = None  # the most it took at once (locustfiles.guard): how much later than their
    # arrival its bytes may be stamped
    # -- the engine's own clock, when it reports one (llama.cpp `timings`) --
    engine_prompt_n: int | None = None
    engine_prompt_ms: float | None = None
    engine_predicted_n: int | None = None
    engine_predicted_ms: float | None = None
    engine_predicted_tps: float | None = None
    engine_cache_n: int | None = None
    engine_draft_n: int | None = None  # speculative decoding: tokens drafted for this request
    engine_draft_accepted_n: int | None = None  # of those, accepted
    # -- the open loop (bench_tasks.open_loop): when the request was due, and the figures timed from then --
    offered_rps: float | None = None  # the rate its step offered (requests/s; empty for a trace's own times)
    t_due: float | None = None  # perf_counter when it was due, on the clock of t_send (a worker's own)
    send_lag_s: float | None = None  # t_send - t_due: how late it left (the client's own queue)
    ttft_due_s: float | None = None  # send_lag_s + ttft_s: the first token as the one who asked at t_due waited
    e2e_due_s: float | None = None  # send_lag_s + e2e_s

    def to_dict(self) -> dict:
        # Every field is a scalar: a shallow copy is the whole record (dataclasses.asdict copies
        # deeply, field by field, and cost more per request than reading a 200-token stream's events).
        return dict(self.__dict__)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Record))
FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(Record)}


def flag_set(cell) -> frozenset[str]:
    """A record's ``flags`` cell as the set of its flags: ``cache_hit;client_saturated`` ->
    {cache_hit, client_saturated}; an empty or missing cell (None, NaN) has none. The one reader of the cell."""
    return frozenset(filter(None, cell.split(";"))) if isinstance(cell, str) else frozenset()


def flags_cell(flags) -> str:
    """The ``flags`` cell of a set of flags: sorted, ';'-joined (a record stays one flat CSV row). The one writer."""
    return ";".join(sorted(flags))


def add_flag(record: Record, flag: str) -> None:
    record.flags = flags_cell(flag_set(record.flags) | {flag})
