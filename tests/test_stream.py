"""The measurement core on exact synthetic timestamps: no server, no Locust, no clock."""

import json
import re

import pytest

from sseclient import SSEClient

from bench_tasks.record import Record
from bench_tasks.stream import STALLS_KEPT, Recorder, assemble_tool_calls, parse_stalls


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chunk(content=None, role=None, usage=None, finish=None, **delta_extra):
    delta = dict(delta_extra)
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    obj = {"id": "req-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        obj["usage"] = usage
    return obj


def usage_chunk(prompt, completion, cached=None, timings=None):
    obj = {"id": "req-1", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    if cached is not None:
        obj["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    if timings:
        obj["timings"] = timings
    return obj


def standard_events(n_tokens=5, finish="length"):
    """A role-only chunk, n one-token content chunks, a finish chunk, usage, [DONE]. An answer that
    stops by itself ends with an end-of-sequence token: counted in usage, without text (llama.cpp)."""
    events = [sse(chunk("", role="assistant"))]
    events += [sse(chunk(f"w{i} ")) for i in range(n_tokens)]
    completion = n_tokens + (finish == "stop")
    events += [sse(chunk(finish=finish)), sse(usage_chunk(100, completion, cached=0)), b"data: [DONE]\n\n"]
    return events


def measure(timed, t_send=0.0, t_headers=None, t_end=None, first_event_tokens=None) -> tuple[Recorder, Record]:
    recorder = Recorder(t_send, first_event_tokens)
    if t_headers is not None:
        recorder.headers(t_headers)
    recorder.consume([item if len(item) == 3 else (*item, None) for item in timed])
    recorder.end(t_end if t_end is not None else (timed[-1][0] if timed else t_send))
    return recorder, recorder.fill(Record())


def test_formulas_on_exact_timestamps():
    # send at 10.0, headers at 10.01, role chunk at 10.02, tokens at 10.5, 10.6, ..., 10.9, and the
    # end-of-sequence token one step later: no text, only the finish chunk at 11.0.
    events = standard_events(5, finish="stop")
    times = [10.02, 10.5, 10.6, 10.7, 10.8, 10.9, 11.0, 11.0, 11.0]
    recorder, r = measure(list(zip(times, events)), t_send=10.0, t_headers=10.01)
    assert r.ok and r.error == "" and r.done
    assert r.ttfb_s == pytest.approx(0.01)
    assert r.ttft_s == pytest.approx(0.5)  # the role-only chunk at 10.02 is not a token
    assert r.e2e_s == pytest.approx(1.0)
    assert r.decode_s == pytest.approx(0.5)  # to the closing event: the end-of-sequence token is timed
    assert r.decode_tps == pytest.approx(5 / 0.5)  # (n - 1) / (t_last - t_first), n counting it
    assert r.itl_s == pytest.approx(0.1)
    assert r.prompt_tps == pytest.approx(100 / 0.5)
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (100, 6, 0)
    assert r.content_events == 5 and r.tokens_per_event == pytest.approx(6 / 5)
    assert r.first_event_tokens == 1.0 and r.first_event_tokens_source == "estimate"
    assert r.gap_p50_s == pytest.approx(0.1) and r.gap_max_s == pytest.approx(0.1)  # content events only
    assert r.finish_reason == "stop" and r.request_id == "req-1" and r.usage_source == "usage"
    assert recorder.answer_text == "w0 w1 w2 w3 w4 "


def test_an_answer_cut_by_length_ends_at_its_last_token():
    # llama.cpp sends the finish chunk some 0.3 ms after the last token: no token was generated then.
    events = standard_events(5, finish="length")
    times = [0.02, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9003, 0.9003, 0.9003]
    _, r = measure(list(zip(times, events)))
    assert r.decode_s == pytest.approx(0.4) and r.decode_tps == pytest.approx(4 / 0.4)
    assert r.first_event_tokens == 1.0


def test_vllm_style_end_of_sequence_with_per_event_usage():
    """vLLM: the end-of-sequence step is an empty delta carrying finish_reason and the usage so far."""
    usage = [{"prompt_tokens": 9, "completion_tokens": k} for k in range(5)]
    events = [sse(chunk("", role="assistant", usage=usage[0]))]
    events += [sse(chunk(f"w{i}", usage=usage[i + 1])) for i in range(3)]
    events += [sse(chunk("", finish="stop", usage=usage[4])), sse(usage_chunk(9, 4)), b"data: [DONE]\n\n"]
    times = [0.1, 0.2, 0.25, 0.3, 0.35, 0.35, 0.35]
    _, r = measure(list(zip(times, events)))
    assert r.content_events == 3 and r.first_event_tokens_source == "usage" and r.first_event_tokens == 1.0
    assert r.decode_s == pytest.approx(0.15) and r.decode_tps == pytest.approx(3 / 0.15)


def test_held_back_text_merged_into_one_event_is_counted_by_usage():
    """llama.cpp holds back text that may begin a stop string and sends it with the next token: one
    event carries two tokens, and the stop string that completes the answer is never sent."""
    events = [sse(chunk("The")), sse(chunk(" sky")), sse(chunk(" blue is")), sse(chunk(finish="stop")),
              sse(usage_chunk(9, 6)), b"data: [DONE]\n\n"]
    times = [0.1, 0.2, 0.4, 0.6, 0.6, 0.6]  # tokens at .1 .2 (.3 held) .4 (.5 .6: the stop string)
    # llama.cpp's profile knows its first event is one token; the events' average would say 5/3.
    _, r = measure(list(zip(times, events)), first_event_tokens=1)
    assert r.first_event_tokens == 1.0 and r.first_event_tokens_source == "profile"
    assert r.decode_s == pytest.approx(0.5) and r.decode_tps == pytest.approx(5 / 0.5)
    _, estimated = measure(list(zip(times, events)))
    assert estimated.first_event_tokens == pytest.approx(5 / 3) and estimated.first_event_tokens_source == "estimate"


def test_one_content_event_and_its_end_of_sequence_token_have_a_rate():
    events = [sse(chunk("Yes")), sse(chunk(finish="stop")), sse(usage_chunk(5, 2)), b"data: [DONE]\n\n"]
    _, r = measure(list(zip([0.3, 0.35, 0.35, 0.35], events)))
    assert r.decode_s == pytest.approx(0.05) and r.decode_tps == pytest.approx(1 / 0.05)
    assert r.gap_p50_s is None  # no gap between content events


def test_multi_token_events_with_per_event_usage():
    """Speculative decoding: 4 tokens per event; per-event usage gives the first event's tokens."""
    events = [sse(chunk("", role="assistant", usage={"prompt_tokens": 10, "completion_tokens": 0}))]
    for i in range(32):
        events.append(sse(chunk("abcd", usage={"prompt_tokens": 10, "completion_tokens": 4 * (i + 1)})))
    events += [sse(usage_chunk(10, 128)), b"data: [DONE]\n\n"]
    times = [0.001] + [0.1 + 0.04 * i for i in range(32)] + [1.5, 1.5]
    _, r = measure(list(zip(times, events)))
    assert r.first_event_tokens == 4.0 and r.first_event_tokens_source == "usage"
    assert r.tokens_per_event == 4.0
    # 124 tokens after the first event over 31 gaps of 40 ms; the naive (n-1) would say 127.
    assert r.decode_tps == pytest.approx(124 / (31 * 0.04))
    assert r.itl_s == pytest.approx(0.04 / 4)


def test_multi_token_events_without_per_event_usage_estimate():
    events = [sse(chunk("abcd")) for _ in range(10)] + [sse(usage_chunk(10, 40)), b"data: [DONE]\n\n"]
    times = [0.2 + 0.05 * i for i in range(10)] + [0.7, 0.7]
    _, r = measure(list(zip(times, events)))
    assert r.first_event_tokens == 4.0 and r.first_event_tokens_source == "estimate"
    assert r.decode_tps == pytest.approx(36 / 0.45)


def all_splits(data: bytes):
    """Every way to cut the stream once, plus byte-at-a-time, plus one event a read (with its blank line,
    as a server that keeps up writes them and the Recorder reads them without splitting)."""
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]
    yield re.findall(rb"(?s).*?\n\n|.+", data)


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_split_at_every_byte_boundary(newline):
    data = b"".join(standard_events(3)).replace(b"\n", newline)
    for pieces in all_splits(data):
        recorder, r = measure([(float(i), p) for i, p in enumerate(pieces)])
        result = (r.ok, r.done, r.content_events, r.completion_tokens, recorder.answer_text, r.finish_reason)
        assert result == (True, True, 3, 3, "w0 w1 w2 ", "length"), pieces


def test_event_gets_the_time_of_the_chunk_that_completes_it():
    body = sse(chunk("hello"))
    timed = [(1.0, body[:10]), (2.0, body[10:]), (3.0, sse(usage_chunk(1, 1))), (3.0, b"data: [DONE]\n\n")]
    _, r = measure(timed)
    assert r.ttft_s == 2.0


def test_comment_and_keepalive_lines_are_ignored():
    events = [b": ping\n\n"] + standard_events(2)[:2] + [b": keep-alive\n\n"] + standard_events(2)[2:]
    recorder, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert r.ok and r.content_events == 2 and recorder.answer_text == "w0 w1 "


def test_error_object_inside_a_200_stream():
    events = standard_events(3)[:3] + [sse({"error": {"message": "overloaded", "code": 503}})]
    _, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert not r.ok and r.error == "stream_error" and "overloaded" in r.error_detail
    assert r.ttft_s == pytest.approx(0.1)  # what was measured before the error is kept


def test_missing_done_is_an_error():
    events = standard_events(3)[:-1]
    _, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert not r.ok and r.error == "no_done" and not r.done
    assert r.completion_tokens == 3  # the figures are still there for whoever wants them


def test_malformed_json_event():
    events = standard_events(3)[:2] + [b"data: {not json\n\n"] + standard_events(3)[2:]
    _, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert r.error == "malformed_event" and "{not json" in r.error_detail


@pytest.mark.parametrize("odd", [
    b'{"choices": "none"}', b'{"choices": [null]}', b'{"choices": [{"delta": "x"}]}', b'{"choices": [7]}',
    b'{"choices": [{"delta": {"content": 5}}]}', b'{"choices": [{"delta": {"tool_calls": "call"}}]}',
    b'{"choices": [{"delta": {"tool_calls": [3]}}]}', b'{"choices": [], "usage": "12 tokens"}',
])
def test_json_of_the_wrong_shape_is_a_malformed_event_and_what_came_before_is_kept(odd):
    events = standard_events(3)[:2] + [b"data: " + odd + b"\n\n"] + standard_events(3)[2:]
    _, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert r.error == "malformed_event" and odd.decode()[:20] in r.error_detail
    assert r.ttft_s == pytest.approx(0.1)

def test_no_usage_falls_back_to_counting_and_says_so():
    events = [sse(chunk(f"t{i}")) for i in range(4)] + [b"data: [DONE]\n\n"]
    _, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert r.ok and r.usage_source == "counted" and r.completion_tokens == 4 and r.prompt_tokens is None
    assert r.prompt_tps is None


def test_one_event_has_no_decode_rate_and_it_is_missing_not_zero():
    events = [sse(chunk("only")), sse(usage_chunk(5, 1)), b"data: [DONE]\n\n"]
    _, r = measure([(0.3, events[0]), (0.3, events[1]), (0.3, events[2])])
    assert r.ok and r.ttft_s == pytest.approx(0.3)
    assert r.decode_tps is None and r.decode_s is None and r.itl_s is None


def test_role_only_stream_is_an_empty_answer():
    events = [sse(chunk("", role="assistant")), sse(chunk(finish="stop")), b"data: [DONE]\n\n"]
    _, r = measure([(0.1, e) for e in events])
    assert r.error == "empty_answer" and r.ttft_s is None


def test_reasoning_text_counts_as_first_token():
    events = [sse(chunk(None, reasoning_content="hmm")), sse(chunk("answer")), b"data: [DONE]\n\n"]
    _, r = measure([(0.2, events[0]), (0.5, events[1]), (0.5, events[2])])
    assert r.ttft_s == pytest.approx(0.2)


def test_tool_call_fragments_are_assembled_and_count_as_tokens():
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    events = [
        sse(chunk("", role="assistant")),
        sse(chunk(None, tool_calls=[first])),
        sse(chunk(None, tool_calls=[{"index": 0, "function": {"arguments": '{"path": '}}])),
        sse(chunk(None, tool_calls=[{"index": 0, "function": {"arguments": '"a.py"}'}}])),
        sse(chunk(finish="tool_calls")),
        b"data: [DONE]\n\n",
    ]
    recorder, r = measure([(0.1 * i, e) for i, e in enumerate(events)])
    assert r.ttft_s == pytest.approx(0.1) and r.content_events == 3
    assert recorder.tool_calls == [{"id": "call_1", "name": "read_file", "arguments": '{"path": "a.py"}'}]
    assert r.finish_reason == "tool_calls"


def test_completions_endpoint_text_and_llamacpp_timings():
    timings = {"prompt_n": 50, "prompt_ms": 20.0, "predicted_n": 3, "predicted_ms": 30.0,
               "predicted_per_second": 100.0, "cache_n": 7}
    events = [sse({"id": "c1", "choices": [{"index": 0, "text": t, "finish_reason": None}]}) for t in "abc"]
    events += [sse({"id": "c1", "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 57, "completion_tokens": 3}, "timings": timings}),
               b"data: [DONE]\n\n"]
    recorder, r = measure([(0.1 * (i + 1), e) for i, e in enumerate(events)])
    assert recorder.answer_text == "abc" and r.finish_reason == "length"
    assert r.engine_predicted_ms == 30.0 and r.engine_prompt_n == 50 and r.cached_tokens == 7


def test_assemble_keeps_parallel_calls_apart():
    deltas = [[{"index": 1, "function": {"name": "b", "arguments": "{}"}}],
              [{"index": 0, "function": {"name": "a", "arguments": "{"}}], [{"index": 0, "function": {"arguments": "}"}}]]
    assert [c["name"] + c["arguments"] for c in assemble_tool_calls(deltas)] == ["a{}", "b{}"]


def test_events_read_in_one_chunk_are_counted_and_a_lumped_stream_is_flagged():
    # Tokens at 1.0, 1.1, then the remaining four in one read at 1.5: 3 of 5 gaps are zero.
    events = standard_events(6)
    times = [0.5, 1.0, 1.1, 1.5, 1.5, 1.5, 1.5, 1.5, 1.6, 1.6]
    _, lumped = measure(list(zip(times, events)))
    assert lumped.bunched_events == 3 and lumped.flags == "bunched"
    assert lumped.gap_p50_s == 0.0 and lumped.decode_tps == pytest.approx(5 / 0.5)  # kept, but flagged
    # Two of five zero: speculative-style pairs, not a lump.
    times = [0.5, 1.0, 1.0, 1.2, 1.2, 1.4, 1.5, 1.6, 1.6, 1.6]
    _, paired = measure(list(zip(times, events)))
    assert paired.bunched_events == 2 and paired.flags == ""
    # The whole stream in one read: no decode time at all, so no rate (missing, not infinite).
    _, whole = measure([(2.0, b"".join(events))], t_send=0.0)
    assert whole.bunched_events == 5 and whole.flags == "bunched"
    assert whole.ttft_s == whole.e2e_s == 2.0 and whole.decode_tps is None


def test_tokens_accepted_from_a_draft_arrive_back_to_back_and_are_not_a_lump():
    """llama.cpp speculating: one event per token, each verification step's accepted draft tokens
    written back to back (here steps of 1 + 3 tokens every 0.1 s). Its timings say how many."""
    timings = {"predicted_n": 16, "predicted_ms": 300.0, "draft_n": 16, "draft_n_accepted": 12}
    events = [sse(chunk(f"w{i}")) for i in range(16)]
    events += [sse(chunk(finish="length")), sse({**usage_chunk(9, 16), "timings": timings}), b"data: [DONE]\n\n"]
    times = [0.1 * (i // 4) for i in range(16)] + [0.3, 0.3, 0.3]
    _, r = measure(list(zip(times, events)))
    assert r.bunched_events == 12 and r.engine_draft_accepted_n == 12 and r.engine_draft_n == 16
    assert r.flags == ""  # 12 of 15 gaps are zero, all of them the engine's own
    # The same lumps without a draft to explain them: a delivery problem.
    _, lumped = measure(list(zip(times, [*events[:17], sse(usage_chunk(9, 16)), events[-1]])))
    assert lumped.flags == "bunched"


def content(text: str) -> bytes:
    return json.dumps({"choices": [{"delta": {"content": text}}]}).encode()


# Every kind of line the SSE specification allows: a comment, fields other than data, data over two
# lines (joined by a newline, which is JSON whitespace), LF, CRLF and CR line endings, mixed (a CR line
# then a CRLF blank line: sseclient-py's own blank-line search misses it), and a last event that the
# body ends without its blank line.
AWKWARD_STREAM = (b": ping\r\nevent: message\r\nid: 7\r\n"
                  b"data: {\"choices\": [{\"delta\":\r\ndata: {\"content\": \"a\"}}]}\r\n\r\n"
                  b"data: " + content("b") + b"\r\rdata: " + content("c") + b"\n\ndata: " + content("d") + b"\r\r\n"
                  b"data: " + content("e") + b"\n\r\ndata: [DONE]")


def read(pieces: list[bytes]) -> tuple[Recorder, Record]:
    return measure([(float(i), piece) for i, piece in enumerate(pieces)])


def test_events_from_bytes_cut_anywhere_with_any_line_ending():
    for pieces in all_splits(AWKWARD_STREAM):  # a CR at the end of a piece may be half of a CRLF
        recorder, r = read(pieces)
        assert (recorder.answer_text, r.content_events, r.done, r.error) == ("abcde", 5, True, ""), pieces


def test_a_line_ended_by_a_cr_ends_when_the_cr_arrives():
    """A CR ends its line at once: the event it closes is not held for the LF that may follow."""
    for blank_line in (b"\r", b"\r\n"):
        ending = blank_line[:1]  # the chunk ends with the blank line's CR; its LF (if any) comes later
        timed = [(1.0, b"data: " + content("x") + blank_line + ending), (2.0, blank_line[1:] + b"data: [DONE]\n\n")]
        _, r = measure(timed)
        assert r.ttft_s == 1.0 and r.done and r.content_events == 1, blank_line


def test_events_without_data_are_not_events_and_empty_data_is_skipped():
    # The specification dispatches "data:" with empty data (sseclient-py does too): nothing to measure.
    events = [b"event: x\n\n: only a comment\n\nid: 3\n\n", b"data:\n\ndata: \n\n", sse(chunk("hi")),
              b"data: [DONE]\n\n"]
    recorder, r = read(events)
    assert r.error == "" and r.done and recorder.answer_text == "hi" and r.ttft_s == 2.0


def test_a_byte_order_mark_before_the_first_line_is_dropped():
    recorder, r = read([b"\xef\xbb\xbf" + sse(chunk("first")), sse(chunk(" second")), b"data: [DONE]\n\n"])
    assert recorder.answer_text == "first second" and r.ttft_s == 0.0


def test_utf8_split_between_reads_is_whole_and_bytes_that_are_not_utf8_are_malformed():
    body = b"data: " + json.dumps(chunk("café"), ensure_ascii=False).encode() + b"\n\ndata: [DONE]\n\n"
    cut = body.index("é".encode()) + 1  # between the two bytes of é
    recorder, r = read([body[:cut], body[cut:]])
    assert recorder.answer_text == "café" and r.ok
    _, bad = read([sse(chunk("ok")), b'data: {"choices": [{"delta": {"content": "\xff"}}]}\n\n', b"data: [DONE]\n\n"])
    assert bad.error == "malformed_event" and "not UTF-8" in bad.error_detail and bad.content_events == 1


def test_the_first_token_stamp_is_as_coarse_as_the_read_that_brought_it():
    """A read is stamped by its newest bytes: exact when it ended with the first content event, else
    late by about the events read with it (at most by how long the read's bytes had waited)."""
    events = standard_events(6)
    # Read on time: every event in a read of its own, the newest bytes 1 ms old when read.
    times = [(0.5, e, 0.001) for e in events[:1]] + [(1.0 + 0.1 * i, e, 0.001) for i, e in enumerate(events[1:7])]
    times += [(1.6, e, 0.0) for e in events[7:]]
    _, prompt = measure(times)
    assert prompt.ttft_uncertainty_s == 0.0 and prompt.read_lateness_max_s == pytest.approx(0.001)
    # Read late: the first three tokens in one read, stamped by the third's arrival, two gaps late.
    late = [(0.5, events[0], 0.0), (1.2, b"".join(events[1:4]), 0.25)] + \
           [(1.0 + 0.1 * i, e, 0.001) for i, e in enumerate(events[4:7], start=3)] + [(1.6, e, 0.0) for e in events[7:]]
    _, r = measure(late)
    assert r.bunched_events == 2 and r.ttft_uncertainty_s == pytest.approx(2 * 0.1)  # two gaps of 0.1 s
    assert r.read_lateness_max_s == pytest.approx(0.25)
    # Without kernel stamps nobody knows.
    _, unknown = measure([(t, e) for t, e, _late in late])
    assert unknown.ttft_uncertainty_s is None and unknown.read_lateness_max_s is None


# -- stalls: gaps long against the stream's own rhythm --
def paced(n_tokens: int, step_s: float, pauses: dict[int, float], finish="length", t0=1.0):
    """Events of ``n_tokens`` one-token chunks ``step_s`` apart; ``pauses[i]`` lengthens the gap before token i."""
    events, times, t = [], [], t0
    for i in range(n_tokens):
        t += step_s + pauses.get(i, 0.0) if i else 0.0
        events.append(sse(chunk(f"w{i} ")))
        times.append(t)
    if finish == "stop":
        t += step_s + pauses.get(n_tokens, 0.0)
    events += [sse(chunk(finish=finish)), sse(usage_chunk(10, n_tokens + (finish == "stop"))), b"data: [DONE]\n\n"]
    times += [t, t, t]
    return list(zip(times, events))


def test_stalls_are_gaps_long_against_the_streams_median_and_the_floor():
    # 40 ms steps; pauses of 0.5, 0.09 (a 130 ms gap: above 3 x 40 ms but below the 0.1 s floor) and 0.2 s.
    _, r = measure(paced(30, 0.04, {5: 0.5, 12: 0.09, 20: 0.2}), t_send=0.0)
    assert r.gap_p50_s == pytest.approx(0.04) and r.stall_threshold_s == pytest.approx(0.12)
    assert r.stall_count == 3 and r.stall_s == pytest.approx(0.54 + 0.13 + 0.24)
    starts = [1.0 + 0.04 * 4 + 0.0, 1.0 + 0.04 * 11 + 0.5, 1.0 + 0.04 * 19 + 0.59]
    assert r.stalls == ";".join(f"{s:.4f}:{g:.4f}" for s, g in zip(starts, (0.54, 0.13, 0.24)))
    assert [pair[1] for pair in parse_stalls(r.stalls)] == pytest.approx([0.54, 0.13, 0.24])
    # A fast stream: the floor decides; a 90 ms gap among 10 ms ones is not a stall worth naming.
    _, fast = measure(paced(30, 0.01, {7: 0.08}))
    assert fast.stall_threshold_s == pytest.approx(0.1) and fast.stall_count == 0 and fast.stalls == ""
    assert fast.stall_s == 0.0


def test_only_the_longest_stalls_are_kept_in_time_order_but_all_are_counted():
    pauses = {3 * k: 0.2 + 0.01 * k for k in range(1, 9)}  # 8 stalls, each longer than the one before
    _, r = measure(paced(30, 0.02, pauses))
    assert r.stall_count == 8 and r.stall_s == pytest.approx(sum(0.02 + v for v in pauses.values()))
    kept = parse_stalls(r.stalls)
    assert len(kept) == STALLS_KEPT
    assert [g for _, g in kept] == pytest.approx([0.02 + pauses[3 * k] for k in range(4, 9)])
    assert [s for s, _ in kept] == sorted(s for s, _ in kept)


def test_the_end_of_sequence_step_can_stall_and_one_event_has_no_stall_figures():
    _, r = measure(paced(10, 0.03, {10: 0.4}, finish="stop"))  # the pause lands before the closing event
    assert r.stall_count == 1 and parse_stalls(r.stalls)[0][1] == pytest.approx(0.43)
    _, cut = measure(paced(10, 0.03, {}, finish="length"))
    assert cut.stall_count == 0
    _, single = measure(paced(1, 0.03, {}))
    assert single.stall_count is None and single.stall_s is None and single.stalls == ""


def test_ttfo_waits_for_the_answer_after_the_reasoning_and_reasoning_tokens_come_from_usage():
    events = [sse(chunk("", role="assistant"))]
    events += [sse(chunk(reasoning_content=f"r{i} ")) for i in range(3)]
    events += [sse(chunk(f"a{i} ")) for i in range(2)]
    usage = usage_chunk(10, 6)
    usage["usage"]["completion_tokens_details"] = {"reasoning_tokens": 3}
    events += [sse(chunk(finish="stop")), sse(usage), b"data: [DONE]\n\n"]
    times = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.6]
    _, r = measure(list(zip(times, events)))
    assert r.ttft_s == pytest.approx(0.1) and r.ttfo_s == pytest.approx(0.4) and r.reasoning_tokens == 3
    _, plain = measure(list(zip([0.02, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9, 0.9], standard_events(5))))
    assert plain.ttfo_s == plain.ttft_s == pytest.approx(0.5) and plain.reasoning_tokens is None


def test_slot_wait_is_the_first_tokens_wait_less_the_engines_prompt_time_and_the_round_trip():
    timings = {"prompt_n": 10, "prompt_ms": 300.0, "predicted_n": 5, "predicted_ms": 400.0}
    events = [sse(chunk(f"w{i}")) for i in range(5)] + [sse(chunk(finish="length")),
                                                         sse(usage_chunk(10, 5, timings=timings)), b"data: [DONE]\n\n"]
    timed = list(zip([1.0, 1.1, 1.2, 1.3, 1.4, 1.4, 1.4, 1.4], events))
    recorder = Recorder(0.0)
    recorder.rtt_s = 0.002
    recorder.consume([(*item, None) for item in timed])
    recorder.end(1.4)
    r = recorder.fill(Record())
    assert r.rtt_s == 0.002 and r.slot_wait_s == pytest.approx(1.0 - 0.3 - 0.002)
    _, no_rtt = measure(timed)
    assert no_rtt.rtt_s is None and no_rtt.slot_wait_s is None  # the network's share unknown: not guessed


class EventLog:
    """A decoder that keeps every event it is handed, as (name, data)."""

    api, end_event = "log", "nothing"

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_event(self, _rec, name: str, data: str) -> bool:
        self.events.append((name, data))
        return True


# Each shape of event the Recorder reads itself (one data line, with or without its space; an event line
# and a data line, the name empty or not), beside every shape it leaves to sseclient-py: a comment, an id,
# a retry, a field without a colon, data over two lines, a data line before the event line, blank lines in
# a row, a lone event line, fields that only start like data or event, and a last event without its blank line.
EVENT_SHAPES = (b"data: {\"a\": 1}\n\ndata:{\"b\": 2}\n\ndata:  two spaces\n\ndata:\n\ndata: \n\n"
                b"event: response.created\ndata: {\"c\": 3}\n\nevent:\ndata: named nothing\n\n"
                b"event:tight\ndata:x\n\n: a comment\ndata: after it\n\nid: 9\ndata: with an id\n\n"
                b"retry: 10\n\ndata\n\ndata: one\ndata: two\n\ndata: y\nevent: later\n\n\n\n"
                b"event: alone\n\ndatum: no\n\nevents: no\ndata: z\n\ndata: caf\xc3\xa9 \xe2\x9c\x93\n\ndata: [DONE]")


def test_events_are_read_as_sseclient_py_reads_them():
    """The Recorder reads the plain events itself and hands sseclient-py the rest: what the decoder is
    handed is what sseclient-py makes of the whole stream, however the stream is cut."""
    parser = SSEClient([EVENT_SHAPES])
    expected = [(event.event, event.data) for event in parser.events()]
    assert len(expected) == 16  # every shape above that carries data
    for pieces in all_splits(EVENT_SHAPES):
        log = EventLog()
        recorder = Recorder(0.0, None, log)
        recorder.consume([(float(i), piece, None) for i, piece in enumerate(pieces)])
        assert log.events == expected and recorder.error == "", pieces
