"""The Responses and Messages decoders on exact synthetic timestamps: no server, no Locust, no clock.

The same answer, streamed as each API streams it at the same instants, must give the same record (the
rules live once, in the Recorder); what differs is only where each API puts its tokens, usage and end.
"""

import json

import pytest

from bench_tasks import agent
from bench_tasks.decoders import ChatDecoder, MessagesDecoder, ResponsesDecoder
from bench_tasks.record import Record
from bench_tasks.stream import Recorder
from tests.test_stream import all_splits, chunk, sse, usage_chunk


def typed(name: str, obj) -> bytes:
    data = obj if isinstance(obj, bytes) else json.dumps({"type": name, **obj}).encode()
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def measure(decoder, timed, t_send=0.0, t_end=None, first_event_tokens=None) -> tuple[Recorder, Record]:
    recorder = Recorder(t_send, first_event_tokens, decoder)
    recorder.consume([item if len(item) == 3 else (*item, None) for item in timed])
    recorder.end(t_end if t_end is not None else (timed[-1][0] if timed else t_send))
    return recorder, recorder.fill(Record())


# -- Responses, as llama.cpp streams it (docs/engines.md#llamacpp-responses-stream) --
def responses_usage(prompt=100, completion=6, cached=0, reasoning=None):
    usage = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
             "input_tokens_details": {"cached_tokens": cached}}
    if reasoning is not None:
        usage["output_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def responses_start(rid="resp_1") -> list[bytes]:
    response = {"id": rid, "object": "response", "status": "in_progress"}
    return [typed("response.created", {"response": response}), typed("response.in_progress", {"response": response})]


def responses_text(pieces: list[str], item="msg_1") -> list[bytes]:
    """The first piece comes with its item and part (one partial result of llama.cpp), each later alone."""
    opened = [typed("response.output_item.added", {"item": {"id": item, "type": "message", "role": "assistant",
                                                            "status": "in_progress", "content": []}}),
              typed("response.content_part.added", {"item_id": item, "part": {"type": "output_text", "text": ""}})]
    deltas = [typed("response.output_text.delta", {"item_id": item, "delta": p}) for p in pieces]
    return [b"".join(opened) + deltas[0], *deltas[1:]]


def responses_end(usage, status="completed", text="", timings=None, incomplete=None, event="response.completed"):
    response = {"id": "resp_1", "object": "response", "status": status, "output": [], "usage": usage}
    if incomplete:
        response["incomplete_details"] = {"reason": incomplete}
    end = {"response": response}
    if timings:
        end["timings"] = timings
    return (typed("response.output_text.done", {"item_id": "msg_1", "text": text})
            + typed("response.content_part.done", {"item_id": "msg_1", "part": {"type": "output_text", "text": text}})
            + typed("response.output_item.done", {"item": {"type": "message", "id": "msg_1"}})
            + typed(event, end))


def responses_answer(n_tokens=5, finish="stop", max_output_tokens=None):
    pieces = [f"w{i} " for i in range(n_tokens)]
    completion = n_tokens + (finish == "stop")
    return [*responses_start(), *responses_text(pieces), responses_end(responses_usage(completion=completion))]


# -- Messages, as llama.cpp streams it (docs/engines.md#llamacpp-messages-stream) --
def message_start(input_tokens=100, cached=None, mid="msg_1"):
    usage = {"input_tokens": input_tokens, "output_tokens": 0}
    if cached is not None:
        usage["cache_read_input_tokens"] = cached
    return typed("message_start", {"message": {"id": mid, "type": "message", "role": "assistant", "content": [],
                                                "stop_reason": None, "usage": usage}})


def messages_text(pieces: list[str], index=0) -> list[bytes]:
    start = typed("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
    deltas = [typed("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": p}})
              for p in pieces]
    return [start + deltas[0], *deltas[1:]]


def messages_end(stop_reason="end_turn", output_tokens=6, blocks=(0,), usage_extra=None, stop=True):
    ending = b"".join(typed("content_block_stop", {"index": i}) for i in blocks)
    usage = {"output_tokens": output_tokens, **(usage_extra or {})}
    ending += typed("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": usage})
    return ending + (typed("message_stop", {}) if stop else b"")


def messages_answer(n_tokens=5, finish="stop"):
    pieces = [f"w{i} " for i in range(n_tokens)]
    reason = "end_turn" if finish == "stop" else "max_tokens"
    return [message_start(cached=0), *messages_text(pieces), messages_end(reason, n_tokens + (finish == "stop"))]


def chat_answer(n_tokens=5, finish="stop"):
    events = [sse(chunk("", role="assistant"))] + [sse(chunk(f"w{i} ")) for i in range(n_tokens)]
    completion = n_tokens + (finish == "stop")
    return events + [sse(chunk(finish=finish)) + sse(usage_chunk(100, completion, cached=0)) + b"data: [DONE]\n\n"]


DECODERS = {"chat": (ChatDecoder, chat_answer), "responses": (ResponsesDecoder, responses_answer),
            "messages": (MessagesDecoder, messages_answer)}
SAME_MEANING = ("ok", "error", "done", "finish_reason", "ttft_s", "ttfo_s", "e2e_s", "decode_s", "decode_tps", "itl_s",
                "prompt_tps", "prompt_tokens", "completion_tokens", "cached_tokens", "content_events", "bunched_events",
                "first_event_tokens", "first_event_tokens_source", "tokens_per_event", "gap_p50_s", "gap_max_s",
                "stall_count", "ttft_uncertainty_s", "usage_source")


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_the_same_answer_at_the_same_instants_gives_the_same_record_through_every_api(finish):
    """Start (role chunk, message_start, response.created) at 10.02, tokens at 10.5 ... 10.9, and the
    end: with the end-of-sequence token one step later (11.0) or, cut by the limit, 0.3 ms after the last."""
    t_end = 11.0 if finish == "stop" else 10.9003
    records = {}
    for api, (decoder, answer) in DECODERS.items():
        events = answer(5, finish)
        times = [10.02] * (len(events) - 6) + [10.5, 10.6, 10.7, 10.8, 10.9, t_end]
        # llama.cpp's Responses say "completed" either way: the limit asked tells a cut answer.
        limit = {"max_output_tokens": 5 if finish == "length" else 16} if api == "responses" else {}
        recorder, records[api] = measure(decoder(**limit), list(zip(times, events)), t_send=10.0)
        assert recorder.answer_text == "w0 w1 w2 w3 w4 " and records[api].api == api
    chat = records["chat"]
    assert chat.ok and chat.done and chat.ttft_s == pytest.approx(0.5) and chat.finish_reason == finish
    assert chat.decode_s == pytest.approx(0.5 if finish == "stop" else 0.4)
    for api in ("responses", "messages"):
        same = {column: getattr(records[api], column) for column in SAME_MEANING}
        assert same == {column: getattr(chat, column) for column in SAME_MEANING}, api


# -- Responses --
def test_responses_formulas_and_what_is_not_a_token():
    events = responses_answer(5, "stop")
    times = [10.02, 10.02, 10.5, 10.6, 10.7, 10.8, 10.9, 11.0]
    recorder, r = measure(ResponsesDecoder(), list(zip(times, events)), t_send=10.0)
    assert r.ok and r.done and r.api == "responses" and r.request_id == "resp_1"
    assert r.ttft_s == pytest.approx(0.5)  # response.created, in_progress, item and part added are not tokens
    assert r.decode_s == pytest.approx(0.5) and r.decode_tps == pytest.approx(5 / 0.5)
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.reasoning_tokens) == (100, 6, 0, None)
    assert r.finish_reason == "stop" and r.usage_source == "usage" and r.content_events == 5


def test_responses_llamacpp_marks_a_cut_answer_completed_and_the_limit_says_length():
    pieces = [f"w{i} " for i in range(5)]
    events = [*responses_start(), *responses_text(pieces), responses_end(responses_usage(completion=5))]
    times = [0.02, 0.02, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9003]
    _, cut = measure(ResponsesDecoder(max_output_tokens=5), list(zip(times, events)))
    assert cut.finish_reason == "length" and cut.decode_s == pytest.approx(0.4)
    assert cut.decode_tps == pytest.approx(4 / 0.4)
    # Without the limit it asked, the decoder cannot tell: a completed answer ended by itself.
    _, unknown = measure(ResponsesDecoder(), list(zip(times, events)))
    assert unknown.finish_reason == "stop"


def test_responses_the_answer_closed_at_the_done_events_when_vllm_sends_completed_later():
    """vLLM writes the ...done events as the last token comes and response.completed once it has built the
    whole response, milliseconds later now and then (measured 11 ms): the end-of-sequence token was generated
    at the first."""
    pieces = [f"w{i} " for i in range(5)]
    end = responses_end(responses_usage(completion=6))
    cut = end.index(b"event: response.completed")
    events = [*responses_start(), *responses_text(pieces), end[:cut], end[cut:]]
    times = [10.02, 10.02, 10.5, 10.6, 10.7, 10.8, 10.9, 11.0, 11.011]
    _, r = measure(ResponsesDecoder(max_output_tokens=256), list(zip(times, events)), t_send=10.0)
    assert r.finish_reason == "stop" and r.decode_s == pytest.approx(0.5) and r.e2e_s == pytest.approx(1.011)
    # Without event lines, read by their type: the same.
    bare = [b"".join(b"data: " + e.split(b"\ndata: ", 1)[1] + b"\n\n" for e in chunk.split(b"\n\n")[:-1])
            for chunk in events]
    _, r = measure(ResponsesDecoder(max_output_tokens=256), list(zip(times, bare)), t_send=10.0)
    assert r.decode_s == pytest.approx(0.5)


def test_responses_a_reasoning_item_done_before_the_text_does_not_close_the_answer():
    """vLLM closes the reasoning item when the text begins."""
    reasoning = [typed("response.output_item.added", {"item": {"id": "rs_1", "type": "reasoning", "content": []}})
                 + typed("response.reasoning_text.delta", {"item_id": "rs_1", "delta": "hmm"}),
                 typed("response.reasoning_text.done", {"item_id": "rs_1", "text": "hmm"})
                 + typed("response.output_item.done", {"item": {"id": "rs_1", "type": "reasoning"}})]
    end = responses_end(responses_usage(completion=4))
    cut = end.index(b"event: response.completed")
    events = [*responses_start(), *reasoning, *responses_text(["a", "b"]), end[:cut], end[cut:]]
    times = [0.05, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.52]
    _, r = measure(ResponsesDecoder(max_output_tokens=256), list(zip(times, events)))
    assert r.ttft_s == pytest.approx(0.1) and r.ttfo_s == pytest.approx(0.3) and r.decode_s == pytest.approx(0.4)


@pytest.mark.parametrize("event", ["response.completed", "response.incomplete"])
def test_responses_incomplete_status_is_length_whichever_event_carries_it(event):
    """vLLM sends status incomplete in response.completed, OpenAI in response.incomplete."""
    events = [*responses_start(), *responses_text(["a", "b", "c"]),
              responses_end(responses_usage(completion=3), status="incomplete", incomplete="max_output_tokens",
                            event=event)]
    _, r = measure(ResponsesDecoder(), list(zip([0.1, 0.1, 0.2, 0.3, 0.4, 0.4], events)))
    assert r.ok and r.done and r.finish_reason == "length" and r.decode_s == pytest.approx(0.2)


def test_responses_reasoning_is_the_first_token_and_the_answer_after_it_is_ttfo():
    reasoning = [typed("response.output_item.added", {"item": {"id": "rs_1", "type": "reasoning", "content": []}})
                 + typed("response.reasoning_text.delta", {"item_id": "rs_1", "delta": "hmm"}),
                 typed("response.reasoning_summary_text.delta", {"item_id": "rs_1", "delta": " so"})]
    events = [*responses_start(), *reasoning, *responses_text(["a", "b"]),
              responses_end(responses_usage(completion=5, reasoning=2))]
    _, r = measure(ResponsesDecoder(), list(zip([0.05, 0.05, 0.1, 0.2, 0.4, 0.5, 0.6], events)))
    assert r.ttft_s == pytest.approx(0.1) and r.ttfo_s == pytest.approx(0.4)
    assert r.reasoning_tokens == 2 and r.content_events == 4


def function_call_events(name="read_file", arguments=('{"path": ', '"stats.py"}'), call_id="fc_call_1"):
    """llama.cpp: the item carries no id, only call_id, and the deltas name it by that call_id."""
    opened = typed("response.output_item.added", {"item": {"type": "function_call", "call_id": call_id, "name": name,
                                                           "arguments": "", "status": "in_progress"}})
    return [opened] + [typed("response.function_call_arguments.delta", {"item_id": call_id, "delta": a})
                       for a in arguments]


def test_responses_tool_call_is_assembled_valid_and_its_name_is_the_first_token():
    events = [*responses_start(), *function_call_events(), responses_end(responses_usage(completion=4))]
    recorder, r = measure(ResponsesDecoder(max_output_tokens=256), list(zip([0.05, 0.05, 0.1, 0.2, 0.3, 0.4], events)))
    assert r.ttft_s == pytest.approx(0.1) and r.ttfo_s == pytest.approx(0.1) and r.content_events == 3
    assert recorder.tool_calls == [{"id": "fc_call_1", "name": "read_file", "arguments": '{"path": "stats.py"}'}]
    assert agent.validate(recorder.tool_calls[0]) and r.finish_reason == "tool_calls"
    assert r.decode_s == pytest.approx(0.3)  # the end-of-sequence token after the call


def test_responses_parallel_calls_by_item_id_as_vllm_names_them():
    opened = [typed("response.output_item.added", {"item": {"type": "function_call", "id": f"fc_{k}",
                                                            "call_id": f"call_{k}", "name": name, "arguments": ""}})
              for k, name in enumerate(("search", "read_file"))]
    deltas = [typed("response.function_call_arguments.delta", {"item_id": "fc_1", "delta": '{"path": "a"}'}),
              typed("response.function_call_arguments.delta", {"item_id": "fc_0", "delta": '{"query": "x"}'})]
    events = [*responses_start(), *opened, *deltas, responses_end(responses_usage(completion=9))]
    recorder, _ = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert recorder.tool_calls == [{"id": "call_0", "name": "search", "arguments": '{"query": "x"}'},
                                   {"id": "call_1", "name": "read_file", "arguments": '{"path": "a"}'}]


def test_responses_timings_of_llamacpp_beside_the_response_are_read():
    timings = {"cache_n": 41, "prompt_n": 1, "prompt_ms": 17.5, "predicted_n": 8, "predicted_ms": 213.3,
               "predicted_per_second": 32.8}
    events = [*responses_start(), *responses_text(["a", "b"]),
              responses_end(responses_usage(prompt=42, completion=3, cached=41), timings=timings)]
    _, r = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert (r.engine_prompt_n, r.engine_predicted_ms, r.engine_cache_n, r.cached_tokens) == (1, 213.3, 41, 41)


@pytest.mark.parametrize("failure", [
    typed("error", {"code": "server_error", "message": "overloaded", "param": None}),
    typed("response.failed", {"response": {"id": "resp_1", "status": "failed",
                                           "error": {"code": "server_error", "message": "overloaded"}}}),
], ids=["error", "response.failed"])
def test_responses_error_event_and_failed_response_are_stream_errors(failure):
    events = [*responses_start(), *responses_text(["a", "b"]), failure, responses_end(responses_usage())]
    _, r = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert not r.ok and r.error == "stream_error" and "overloaded" in r.error_detail and not r.done
    assert r.ttft_s == pytest.approx(0.2)  # what was measured before the error is kept


def test_responses_without_its_end_is_no_done_and_its_tokens_are_counted():
    events = [*responses_start(), *responses_text(["a", "b", "c"])]
    _, r = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert r.error == "no_done" and "response.completed" in r.error_detail
    assert r.usage_source == "counted" and r.completion_tokens == 3 and r.prompt_tokens is None


def test_responses_events_without_an_event_line_are_read_by_their_type():
    events = [b"data: " + e.split(b"\ndata: ", 1)[1] for e in b"".join(responses_answer(3)).split(b"\n\n")[:-1]]
    recorder, r = measure(ResponsesDecoder(), [(0.1 * i, e + b"\n\n") for i, e in enumerate(events)])
    assert r.ok and r.done and recorder.answer_text == "w0 w1 w2 " and r.completion_tokens == 4


def test_responses_events_that_carry_nothing_to_measure_are_not_parsed_and_a_delta_that_is_not_json_is_malformed():
    events = responses_answer(3)
    garbled_done = [*events[:-1], b"event: response.output_text.done\ndata: {not json\n\n", events[-1]]
    _, fine = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(garbled_done)])
    assert fine.ok and fine.done
    garbled_delta = [*events[:3], b"event: response.output_text.delta\ndata: {not json\n\n", *events[3:]]
    _, bad = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(garbled_delta)])
    assert bad.error == "malformed_event" and "{not json" in bad.error_detail and bad.content_events == 1


@pytest.mark.parametrize("odd", [
    {"delta": 7}, {"delta": ["a"]}, {"item_id": "msg_1"},
])
def test_responses_delta_of_the_wrong_shape_is_malformed(odd):
    events = [*responses_start(), *responses_text(["a"]), typed("response.output_text.delta", odd),
              responses_end(responses_usage())]
    _, r = measure(ResponsesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert r.error == "malformed_event" and r.content_events == 1


def test_responses_several_tokens_per_event_estimate_the_first_events_tokens():
    pieces = ["abcd"] * 10
    events = [*responses_start(), *responses_text(pieces), responses_end(responses_usage(completion=40))]
    times = [0.1, 0.1] + [0.2 + 0.05 * i for i in range(10)] + [0.65]
    _, r = measure(ResponsesDecoder(max_output_tokens=40), list(zip(times, events)))
    assert r.first_event_tokens == 4.0 and r.first_event_tokens_source == "estimate"
    assert r.finish_reason == "length" and r.decode_tps == pytest.approx(36 / 0.45)


# -- Messages --
def test_messages_formulas_usage_and_what_is_not_a_token():
    events = [message_start(input_tokens=13, cached=29), *messages_text([f"w{i} " for i in range(5)]),
              messages_end("end_turn", 6)]
    times = [10.02, 10.5, 10.6, 10.7, 10.8, 10.9, 11.0]
    recorder, r = measure(MessagesDecoder(), list(zip(times, events)), t_send=10.0)
    assert r.ok and r.done and r.api == "messages" and r.request_id == "msg_1"
    assert r.ttft_s == pytest.approx(0.5)  # message_start and content_block_start are not tokens
    # Anthropic's input_tokens leaves out the tokens read from the cache: the prompt is their sum.
    assert (r.prompt_tokens, r.cached_tokens, r.completion_tokens) == (42, 29, 6)
    assert r.decode_s == pytest.approx(0.5) and r.decode_tps == pytest.approx(5 / 0.5)
    assert r.finish_reason == "stop" and r.reasoning_tokens is None and recorder.answer_text == "w0 w1 w2 w3 w4 "


@pytest.mark.parametrize("reason,finish", [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
                                           ("tool_use", "tool_calls"), ("refusal", "content_filter"),
                                           ("pause_turn", "pause_turn")])
def test_messages_stop_reasons_in_one_vocabulary(reason, finish):
    events = [message_start(), *messages_text(["a", "b"]), messages_end(reason, 3)]
    _, r = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert r.finish_reason == finish


def test_messages_vllm_repeats_the_prompt_usage_in_message_delta():
    events = [message_start(input_tokens=20, cached=0), *messages_text(["a", "b"]),
              messages_end("max_tokens", 2, usage_extra={"input_tokens": 4, "cache_read_input_tokens": 16,
                                                          "cache_creation_input_tokens": 0})]
    _, r = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert (r.prompt_tokens, r.cached_tokens, r.completion_tokens) == (20, 16, 2)


def test_messages_thinking_first_then_text():
    thinking = [typed("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})
                + typed("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
                typed("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": ""}})]
    events = [message_start(), *thinking, *messages_text(["a", "b"], index=1), messages_end("end_turn", 4, (0, 1))]
    _, r = measure(MessagesDecoder(), list(zip([0.05, 0.1, 0.15, 0.4, 0.5, 0.6], events)))
    assert r.ttft_s == pytest.approx(0.1) and r.ttfo_s == pytest.approx(0.4) and r.content_events == 3


def test_messages_tool_use_is_assembled_and_an_empty_partial_json_is_no_token():
    opened = typed("content_block_start", {"index": 0, "content_block": {"type": "tool_use", "id": "toolu_1",
                                                                         "name": "read_file", "input": {}}})
    deltas = [typed("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": p}})
              for p in ("", '{"path": ', '"stats.py"}')]
    events = [message_start(), opened, *deltas, messages_end("tool_use", 4)]
    recorder, r = measure(MessagesDecoder(), list(zip([0.05, 0.1, 0.1, 0.2, 0.3, 0.4], events)))
    assert recorder.tool_calls == [{"id": "toolu_1", "name": "read_file", "arguments": '{"path": "stats.py"}'}]
    assert agent.validate(recorder.tool_calls[0]) and r.finish_reason == "tool_calls"
    assert r.content_events == 3 and r.bunched_events == 0 and r.ttft_s == pytest.approx(0.1)


def test_messages_text_then_tool_use_blocks_keep_their_calls_apart():
    tool = [typed("content_block_start", {"index": 1, "content_block": {"type": "tool_use", "id": "t1",
                                                                        "name": "search", "input": {}}}),
            typed("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta",
                                                                 "partial_json": '{"query": "median"}'}})]
    events = [message_start(), *messages_text(["Looking."]), *tool, messages_end("tool_use", 5, (0, 1))]
    recorder, r = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert recorder.answer_text == "Looking." and recorder.tool_calls[0]["arguments"] == '{"query": "median"}'


def test_messages_ping_is_ignored_and_an_error_event_is_a_stream_error():
    ping = typed("ping", {})
    events = [message_start(), ping, *messages_text(["a", "b"]), ping, messages_end()]
    _, r = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert r.ok and r.content_events == 2
    error = typed("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
    _, failed = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate([*events[:3], error, events[-1]])])
    assert failed.error == "stream_error" and "Overloaded" in failed.error_detail and not failed.done


def test_messages_without_message_stop_is_no_done():
    events = [message_start(), *messages_text(["a", "b"]), messages_end("end_turn", 3, stop=False)]
    _, r = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert r.error == "no_done" and "message_stop" in r.error_detail and r.completion_tokens == 3


def test_messages_without_message_delta_counts_its_events():
    events = [message_start(), *messages_text(["a", "b"]), typed("message_stop", {})]
    _, r = measure(MessagesDecoder(), [(0.1 * i, e) for i, e in enumerate(events)])
    assert r.ok and r.usage_source == "counted" and r.completion_tokens == 2 and r.finish_reason is None


# -- the framing, for the typed APIs --
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_split_at_every_byte_boundary(api, newline):
    """Every cut: an event line and its data in different chunks, a blank line cut in two, CRLF halves."""
    decoder, answer = DECODERS[api]
    data = b"".join(answer(3, "stop")).replace(b"\n", newline)
    for pieces in all_splits(data):
        recorder, r = measure(decoder(), [(float(i), p) for i, p in enumerate(pieces)])
        result = (r.ok, r.done, r.content_events, r.completion_tokens, recorder.answer_text, r.finish_reason)
        assert result == (True, True, 3, 4, "w0 w1 w2 ", "stop"), pieces


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_an_event_gets_the_time_of_the_chunk_that_completes_its_data(api):
    decoder, answer = DECODERS[api]
    events = answer(2, "stop")
    first = events[-3]  # the chunk that opens the answer, its first token at its end
    cut = first.rindex(b"\ndata: ") + 1  # its last event's `event:` line in one read, its data in the next
    timed = [(0.1, b"".join(events[:-3])), (1.0, first[:cut]), (2.0, first[cut:]), (3.0, events[-2]),
             (3.5, events[-1])]
    _, r = measure(decoder(), timed)
    assert r.ttft_s == 2.0 and r.content_events == 2 and r.ok


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_events_read_together_share_a_stamp_and_a_lumped_stream_is_flagged(api):
    decoder, answer = DECODERS[api]
    events = answer(6, "length")
    head = len(events) - 7  # the events before the first token
    timed = [(0.5, b"".join(events[:head])), (1.0, events[head]), (1.1, events[head + 1]),
             (1.5, b"".join(events[head + 2:]))]
    _, r = measure(decoder(), timed)
    assert r.bunched_events == 3 and r.flags == "bunched" and r.ttft_s == 1.0


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_first_token_stamp_is_as_coarse_as_the_read_that_brought_it(api):
    decoder, answer = DECODERS[api]
    events = answer(6, "length")
    head = len(events) - 7
    timed = [(0.5, b"".join(events[:head]), 0.0), (1.2, b"".join(events[head:head + 3]), 0.25)]
    timed += [(1.0 + 0.1 * i, e, 0.001) for i, e in enumerate(events[head + 3:-1], start=3)] + [(1.6, events[-1], 0.0)]
    _, r = measure(decoder(), timed)
    assert r.ttft_uncertainty_s == pytest.approx(2 * 0.1) and r.read_lateness_max_s == pytest.approx(0.25)
