"""The simulated engine on its own, through raw HTTP (stdlib client only: no llm-bench code).

It is the suite's ground truth, so its shapes are checked here byte-wise: stream layout, usage,
tool calls, faults, the truth log. No assertion is about speed; those marked ``alone`` hold the engine's
writes to its configured timings to the millisecond, which another process's load would break: they
have the machine to themselves (tests/machine.py). The others share it.
"""

from __future__ import annotations

import asyncio
import heapq
import http.client
import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import simengine
from bench_tasks import run_mark
from simengine.engine import Engine
from simengine.scheduler import Scheduler
from simengine.tokenizer import render_chat, tokenize
from simengine.truth_log import TruthLog

pytestmark = pytest.mark.timeout(60)
# Held to its configured timings, to the millisecond: the machine to itself (tests/machine.py).
ALONE = pytest.mark.alone

FAST = dict(decode_tps=2000.0, answer_tokens_min=8, answer_tokens_max=20)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                    "metric": {"type": "boolean"}},
                   "required": ["city", "days", "metric"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    handle = simengine.start_process(simengine.SimConfig(truth_log=str(truth), **FAST))
    handle.truth_log = truth
    yield handle
    handle.stop()


@pytest.fixture
def own_sim(tmp_path):
    handles = []

    def start(**config):
        truth = tmp_path / f"truth-{len(handles)}.jsonl"
        handle = simengine.start_process(simengine.SimConfig(truth_log=str(truth), **{**FAST, **config}))
        handle.truth_log = truth
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


# -- a tiny client --
def request(url: str, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 10):
    """(status, headers, body bytes, complete): complete is False when the body was cut short."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    connection.request(method, path, data, {"content-type": "application/json", **(headers or {})})
    response = connection.getresponse()
    try:
        raw, complete = response.read(), True
    except http.client.IncompleteRead as exc:
        raw, complete = exc.partial, False
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, raw, complete


def events(raw: bytes) -> list[str]:
    """SSE data payloads in order (comments skipped), for \\n or \\r\\n line endings."""
    text = raw.decode().replace("\r\n", "\n")
    out = []
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out


def chat(url: str, content="Tell me about rivers.", headers=None, **extra):
    body = {"model": "sim-model", "messages": [{"role": "user", "content": content}], "stream": True, **extra}
    return request(url, "POST", "/v1/chat/completions", body, headers)


def parsed(raw: bytes) -> list[dict]:
    return [json.loads(e) for e in events(raw) if e != "[DONE]"]


def contents(chunks: list[dict]) -> list[str]:
    return [c["choices"][0]["delta"]["content"] for c in chunks
            if c["choices"] and c["choices"][0]["delta"].get("content")]


def truth_rows(handle) -> dict:
    rows = [json.loads(line) for line in Path(handle.truth_log).read_text().splitlines() if line.strip()]
    return {row["request_id"]: row for row in rows}


# -- endpoints --
def test_health_models_metrics_and_404(sim):
    assert json.loads(request(sim.url, "GET", "/health")[2]) == {"status": "ok"}
    models = json.loads(request(sim.url, "GET", "/v1/models")[2])
    assert models["object"] == "list"
    assert models["data"][0] == {"id": "sim-model", "object": "model", "created": 0, "owned_by": "llm-bench-sim",
                                 "max_model_len": 163840}
    chat(sim.url)
    status, headers, raw, _ = request(sim.url, "GET", "/metrics")
    text = raw.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for name in ("vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
                 "vllm:time_to_first_token_seconds_count", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:prompt_tokens_cached_total", "vllm:num_requests_running",
                 "vllm:num_requests_waiting"):
        assert f'{name}{{model_name="sim-model"' in text
    status, _, raw, _ = request(sim.url, "GET", "/nowhere")
    assert status == 404 and "error" in json.loads(raw)


def test_stream_starts_with_role_chunk_and_ends_with_usage_then_done(sim):
    status, headers, raw, complete = chat(sim.url, stream_options={"include_usage": True})
    assert status == 200 and complete
    assert headers["content-type"] == "text/event-stream" and headers["transfer-encoding"] == "chunked"
    payloads = events(raw)
    assert payloads[-1] == "[DONE]"
    chunks = parsed(raw)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert {c["id"] for c in chunks} == {headers["x-request-id"]}
    finish, usage_chunk = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    # An answer that ends by itself ends with an end-of-sequence token: counted, never sent as text.
    assert usage["completion_tokens"] == len(contents(chunks)) + 1 and 9 <= usage["completion_tokens"] <= 21
    assert finish["choices"][0]["delta"] == {}
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert set(usage["prompt_tokens_details"]) == {"cached_tokens"}
    assert set(usage_chunk["timings"]) == {"cache_n", "prompt_n", "prompt_ms", "prompt_per_second", "predicted_n",
                                           "predicted_ms", "predicted_per_second"}
    # The role chunk went out before the first token, as the truth log says.
    row = truth_rows(sim)[headers["x-request-id"]]
    assert row["t_arrival"] <= row["t_admitted"] <= row["t_first_byte"] <= row["t_first_token"] <= row["t_last_token"]
    assert row["closing_tokens"] == 1 and row["t_last_token"] >= row["t_last_content"]
    timings = usage_chunk["timings"]
    assert timings["predicted_n"] == usage["completion_tokens"]
    assert timings["predicted_ms"] == pytest.approx((row["t_last_token"] - row["t_first_token"]) * 1000)


@ALONE
def test_an_answer_that_ends_by_itself_spends_a_token_on_its_end(own_sim):
    """The end-of-sequence token takes a token's time after the last text, as on llama.cpp and vLLM,
    and the finish chunk goes out when it is generated; the truth's decode rate counts it."""
    handle = own_sim(decode_tps=50.0, answer_tokens_min=4, answer_tokens_max=6)
    _, headers, raw, _ = chat(handle.url, stream_options={"include_usage": True})
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["finish_reason"] == "stop" and row["completion_tokens"] == row["n_events"] + 1
    assert 0.018 <= row["t_last_token"] - row["t_last_content"] <= 0.03  # 1/50 s
    assert row["decode_tps"] == pytest.approx((row["completion_tokens"] - 1) / (row["t_last_token"] - row["t_first_token"]))
    assert row["decode_tps"] == pytest.approx(50.0, rel=0.05)


def test_a_stop_string_ends_the_answer_unsent_and_text_that_may_begin_one_waits(own_sim):
    """llama.cpp's way: the stop string is counted, never sent; a token that may begin it is held back
    and leaves with the next one (one event, two tokens)."""
    handle = own_sim(decode_tps=2000.0, answer_tokens_min=40, answer_tokens_max=40)
    _, _, raw, _ = chat(handle.url, "one", stream_options={"include_usage": True}, ignore_eos=True, max_tokens=40)
    words = "".join(contents(parsed(raw))).split()
    stop = f" {words[6]} {words[7]}"  # a two-token stop string seven words in
    _, headers, raw, _ = chat(handle.url, "one", stream_options={"include_usage": True}, ignore_eos=True,
                              max_tokens=40, stop=[stop, "never"])
    chunks = parsed(raw)
    sent = contents(chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and "".join(sent).split() == words[:6]
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["completion_tokens"] == chunks[-1]["usage"]["completion_tokens"] == 8  # up to the stop's last token
    assert row["closing_tokens"] >= 1 and row["n_events"] == len(sent) <= 6  # the stop's tokens, unsent
    # No event ends with what may begin a stop string ("n" of "never" after " garden", say): held back.
    prefixes = [s[:k] for s in (stop, "never") for k in range(1, len(s))]
    assert not [c for c in sent if any(c.endswith(p) for p in prefixes)]


@ALONE
def test_llama_cpp_style_drafts_send_accepted_tokens_back_to_back(own_sim):
    handle = own_sim(decode_tps=100.0, draft_tokens=4, draft_acceptance=0.8, answer_tokens_min=60,
                     answer_tokens_max=60)
    _, headers, raw, _ = chat(handle.url, stream_options={"include_usage": True})
    usage_chunk = parsed(raw)[-1]
    row = truth_rows(handle)[headers["x-request-id"]]
    timings = usage_chunk["timings"]
    assert timings["draft_n"] == row["draft_n"] > 0 and 0 < timings["draft_n_accepted"] == row["draft_n_accepted"]
    assert row["n_events"] == 60 and usage_chunk["usage"]["completion_tokens"] == 61
    # Each step costs one token's time and yields its accepted tokens too: faster than 100 tok/s.
    steps = 60 - row["draft_n_accepted"]
    assert row["decode_tps"] == pytest.approx(60 / (steps * 0.01), rel=0.1) and row["decode_tps"] > 150


def test_tokens_per_event_with_continuous_usage(own_sim):
    handle = own_sim(tokens_per_event=3)
    status, headers, raw, _ = chat(handle.url, stream_options={"include_usage": True,
                                                               "continuous_usage_stats": True})
    chunks = parsed(raw)
    assert all("usage" in c for c in chunks)
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[0] == 0
    steps = [b - a for a, b in zip(counts, counts[1:]) if b != a]
    # Steps of 3 tokens, the last text step 1 to 3, then the end-of-sequence token alone.
    assert steps[:-2] == [3] * (len(steps) - 2) and 1 <= steps[-2] <= 3 and steps[-1] == 1
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["first_event_tokens"] == 3 and row["tokens_per_event"] == 3
    text_tokens = row["completion_tokens"] - row["closing_tokens"]
    assert row["n_events"] == len(contents(chunks)) == -(-text_tokens // 3)
    # vLLM-like: the end-of-sequence step's chunk carries finish_reason and the usage with it, no text.
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and counts[-2] == row["completion_tokens"]


def test_ignore_eos_gives_exactly_max_tokens(sim):
    _, _, raw, _ = chat(sim.url, max_tokens=57, ignore_eos=True, stream_options={"include_usage": True})
    chunks = parsed(raw)
    assert chunks[-1]["usage"]["completion_tokens"] == 57 == len(contents(chunks))
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    _, _, raw, _ = chat(sim.url, max_tokens=3, stream_options={"include_usage": True})
    assert parsed(raw)[-1]["usage"]["completion_tokens"] == 3


def test_completions_endpoint_and_non_streamed_bodies(sim):
    body = {"model": "sim-model", "prompt": "Once upon a time", "stream": True, "max_tokens": 5,
            "stream_options": {"include_usage": True}}
    _, _, raw, _ = request(sim.url, "POST", "/v1/completions", body)
    chunks = parsed(raw)
    assert chunks[0]["object"] == "text_completion" and chunks[0]["choices"][0]["text"] == ""
    assert len([c for c in chunks if c["choices"] and c["choices"][0]["text"]]) == 5
    status, _, raw, _ = request(sim.url, "POST", "/v1/completions", {**body, "stream": False})
    whole = json.loads(raw)
    assert status == 200 and whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == 5 and len(tokenize(whole["choices"][0]["text"])) == 5
    status, _, raw, _ = chat(sim.url, stream=False)
    whole = json.loads(raw)
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"]
    assert whole["usage"]["completion_tokens"] == len(tokenize(whole["choices"][0]["message"]["content"])) + 1


def test_prefix_cache_hits_a_repeated_prompt_only(sim):
    shared = "The same long document. " * 200
    usage = lambda text: parsed(chat(sim.url, text, stream_options={"include_usage": True})[2])[-1]["usage"]  # noqa: E731
    first = usage(f"run {time.time_ns()}\n" + shared)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    again_text = f"again {time.time_ns()}\n" + shared
    usage(again_text)
    repeat = usage(again_text)
    assert repeat["prompt_tokens_details"]["cached_tokens"] >= 64 * 10
    assert repeat["prompt_tokens_details"]["cached_tokens"] % 64 == 0
    fresh = usage(f"fresh first line {time.time_ns()}\n" + shared)
    assert fresh["prompt_tokens_details"]["cached_tokens"] == 0


def test_different_words_are_different_tokens_as_with_a_real_tokenizer():
    codes = {run_mark.code("1a2b3c4d", "classroom", n) for n in range(100_000)}  # a run's codes, one word each
    assert len({tuple(tokenize(code)) for code in codes}) == len(codes) > 99_000


def test_prompts_that_differ_in_one_word_share_only_the_blocks_before_it(sim):
    # Two of a run's codes that a 32,000-id hashed vocabulary gave one id: the cache served one prompt
    # from the other's blocks, and the client flagged a cache hit that was the engine's mistake.
    def cached_tokens(code: str) -> int:
        raw = chat(sim.url, f"[{code}]" + " Answer in French." * 40, stream_options={"include_usage": True})[2]
        return parsed(raw)[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]

    assert cached_tokens("8baaa0e9") == 0 and cached_tokens("ff68562a") == 0


def test_too_long_prompt_is_rejected_like_llama_cpp(own_sim):
    handle = own_sim(ctx_len=100)
    status, _, raw, _ = chat(handle.url, "word " * 120)
    error = json.loads(raw)["error"]
    assert status == 400 and error["type"] == "exceed_context_size_error" and error["code"] == 400
    assert "exceeds the available context size" in error["message"]
    status, _, _, _ = chat(handle.url, "short", max_tokens=200)
    assert status == 400


def test_needle_is_found(sim):
    haystack = "Filler sentence about nothing. " * 300
    prompt = haystack + "Remember: the code word is blue-falcon_42. " + haystack + "\nWhat is the code word?"
    _, _, raw, _ = chat(sim.url, prompt)
    chunks = parsed(raw)
    assert "".join(contents(chunks)) == "The code word is blue-falcon_42."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_tool_call_is_streamed_with_valid_arguments(sim):
    status, _, raw, _ = chat(sim.url, "What is the weather in Paris? Use get_weather.", tools=TOOLS)
    chunks = parsed(raw)
    deltas = [c["choices"][0]["delta"].get("tool_calls") for c in chunks if c["choices"]]
    deltas = [d for d in deltas if d]
    header = deltas[0][0]
    assert header["function"] == {"name": "get_weather", "arguments": ""} and header["type"] == "function"
    assert header["id"] and header["index"] == 0
    fragments = [d[0]["function"]["arguments"] for d in deltas[1:]]
    assert len(fragments) > 3
    arguments = json.loads("".join(fragments))
    assert isinstance(arguments["city"], str) and isinstance(arguments["days"], int)
    assert isinstance(arguments["metric"], bool)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # After the tool's answer, the model talks.
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": header["id"], "type": "function",
                                                                       "function": {"name": "get_weather",
                                                                                    "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": header["id"], "content": "sunny"}]
    body = {"model": "sim-model", "messages": messages, "tools": TOOLS, "stream": True}
    chunks = parsed(request(sim.url, "POST", "/v1/chat/completions", body)[2])
    assert contents(chunks) and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_tokenize_counts_equal_prompt_tokens(sim):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi, what's 2+2?"}]
    counted = json.loads(request(sim.url, "POST", "/tokenize", {"messages": messages, "tools": TOOLS})[2])
    body = {"model": "sim-model", "messages": messages, "tools": TOOLS, "stream": True,
            "stream_options": {"include_usage": True}}
    usage = parsed(request(sim.url, "POST", "/v1/chat/completions", body)[2])[-1]["usage"]
    assert counted["count"] == usage["prompt_tokens"] == len(counted["tokens"])
    assert counted["max_model_len"] == 163840
    llama = json.loads(request(sim.url, "POST", "/tokenize", {"content": "Hello, world!"})[2])
    assert set(llama) == {"tokens"} and len(llama["tokens"]) == 4
    vllm = json.loads(request(sim.url, "POST", "/tokenize", {"prompt": "Hello, world!"})[2])
    assert vllm["count"] == 4 and vllm["tokens"] == llama["tokens"]


# -- faults --
def fault(url: str, kind: str, **headers):
    return chat(url, headers={"X-Sim-Fault": kind, **headers}, max_tokens=12,
                stream_options={"include_usage": True})


def test_http_faults(sim):
    status, _, raw, _ = fault(sim.url, "http500")
    assert status == 500 and json.loads(raw)["error"]["code"] == 500
    status, headers, _, _ = fault(sim.url, "http429")
    assert status == 429 and headers["retry-after"] == "1"
    status, headers, raw, _ = fault(sim.url, "non_sse")
    assert status == 200 and headers["content-type"].startswith("text/html") and raw.startswith(b"<!DOCTYPE")


def test_drop_cuts_the_stream(sim):
    _, _, raw, complete = fault(sim.url, "drop")
    assert not complete and len(contents(parsed(raw))) == 3 and b"[DONE]" not in raw


def test_malformed_event_mid_stream(sim):
    payloads = events(fault(sim.url, "malformed")[2])
    bad = [p for p in payloads if p != "[DONE]" and not _is_json(p)]
    assert len(bad) == 1 and payloads[-1] == "[DONE]"


def test_error_event_in_a_200_stream(sim):
    status, _, raw, complete = fault(sim.url, "error_event")
    payloads = events(raw)
    assert status == 200 and complete and payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["error"]["type"] == "server_error"


def test_stall_goes_silent_then_closes(sim):
    started = time.monotonic()
    _, _, raw, complete = fault(sim.url, "stall", **{"X-Sim-Stall-S": "0.5"})
    assert not complete and len(contents(parsed(raw))) == 3 and time.monotonic() - started >= 0.5


def test_no_done_and_no_usage(sim):
    _, _, raw, complete = fault(sim.url, "no_done")
    assert complete and events(raw)[-1] != "[DONE]" and "usage" in parsed(raw)[-1]
    _, _, raw, _ = fault(sim.url, "no_usage")
    chunks = parsed(raw)
    assert not any("usage" in c or "timings" in c for c in chunks) and events(raw)[-1] == "[DONE]"


def test_keepalive_crlf_and_split_keep_the_content(sim):
    _, _, reference, _ = chat(sim.url, max_tokens=12)
    expected = contents(parsed(reference))
    _, _, raw, _ = fault(sim.url, "keepalive")
    assert raw.count(b": ping\n\n") > 10 and contents(parsed(raw)) == expected
    _, _, raw, _ = fault(sim.url, "crlf")
    assert b"\r\n\r\n" in raw and b"}\n\n" not in raw and contents(parsed(raw)) == expected
    _, _, raw, complete = fault(sim.url, "split")
    assert complete and contents(parsed(raw)) == expected


def test_split_fragments_arrive_separately(sim):
    """Read raw socket bytes: a split stream arrives in many more reads than it has events."""
    parts = urlsplit(sim.url)
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                       "max_tokens": 12}).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Sim-Fault: split\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        reads = []
        while chunk := sock.recv(65536):
            reads.append(chunk)
    assert len(reads) > 16 and b"".join(reads).endswith(b"0\r\n\r\n")


def test_a_request_never_answered_is_held_open_silent_until_the_client_closes_it(own_sim):
    handle = own_sim(never_answer=2)
    question = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    def unanswered(path="/v1/chat/completions", **headers) -> bool:
        try:
            request(handle.url, "POST", path, question, headers, timeout=0.5)
        except TimeoutError:  # not a byte, the connection held open
            return True
        return False

    assert chat(handle.url)[0] == 200 and unanswered() and chat(handle.url)[0] == 200  # the second alone
    # One chosen while it runs: the second request from now (a request id ends with its number).
    status, _, raw, _ = request(handle.url, "POST", "/sim/never-answer", {"after": 2})
    assert status == 200 and json.loads(raw) == {"request": 5}
    assert chat(handle.url)[1]["x-request-id"].endswith("0000004")
    assert unanswered("/v1/messages") and chat(handle.url)[0] == 200
    assert request(handle.url, "POST", "/sim/never-answer", {"after": 0})[0] == 400
    assert unanswered(**{"X-Sim-Fault": "hang"})  # asked for by name, as every fault
    time.sleep(0.2)  # the engine hears the client leave
    hung = {row["request_id"][-7:]: row for row in truth_rows(handle).values() if row["fault"] == "hang"}
    assert sorted(hung) == ["0000002", "0000005", "0000007"]  # each logged when its client gave up
    assert all(row["status"] == 499 and row["t_first_byte"] is None and row["t_closed"] - row["t_arrival"] >= 0.45
               for row in hung.values())


def test_unknown_fault_kind_is_refused(sim):
    assert fault(sim.url, "gremlins")[0] == 400


def test_random_faults_follow_the_rate(own_sim):
    handle = own_sim(fault_rate=1.0, fault_kinds="http500,no_done", seed=7)
    statuses = {chat(handle.url)[0] for _ in range(12)}
    assert statuses == {200, 500}
    assert {row["fault"] for row in truth_rows(handle).values()} == {"http500", "no_done"}


# -- queueing and the truth log --
def test_slots_queue_fifo_and_truth_is_logged(own_sim):
    handle = own_sim(slots=1, decode_tps=400.0)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda i: chat(handle.url, f"question {i}"), range(3)))
    ids = [headers["x-request-id"] for _status, headers, _raw, _complete in results]
    rows = truth_rows(handle)
    assert set(ids) <= set(rows)
    served = sorted((rows[i] for i in ids), key=lambda r: r["t_admitted"])
    for earlier, later in zip(served, served[1:]):  # one slot: each waits for the one before
        assert later["t_admitted"] >= earlier["t_last_token"]
    for row in served:
        assert row["status"] == 200 and row["finish_reason"] == "stop" and row["fault"] is None
        assert row["ttft_s"] == pytest.approx(row["t_first_token"] - row["t_arrival"])
        expected_tps = (row["completion_tokens"] - row["first_event_tokens"]) / (row["t_last_token"] - row["t_first_token"])
        assert row["decode_tps"] == pytest.approx(expected_tps)
        assert row["n_events"] == row["completion_tokens"] - row["closing_tokens"]


def read_until_closing(url: str, headers: dict, seen: threading.Event) -> bytes:
    """Stream a chat answer over a raw socket; SEEN is set when the chunked terminator arrives."""
    parts = urlsplit(url)
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "Tell me about rivers."}],
                       "stream": True, "max_tokens": 12}).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    raw = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n"
                     f"Content-Type: application/json\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        while data := sock.recv(65536):
            raw += data
            if raw.endswith(b"\r\n0\r\n\r\n"):
                seen.set()
    return raw


@pytest.mark.parametrize("kind", [None, "error_event"])
def test_a_responses_truth_line_is_written_before_its_last_bytes(tmp_path, kind):
    """A client that has read its response to the end finds its line. (Not one that stops at [DONE]: the
    closing events go out first, so that the last token's time is stamped at its write.) The truth log is a
    pipe this test has filled, so the engine's write of the line blocks until the test drains it: meanwhile
    the response's end may not reach the client."""
    fifo = tmp_path / "truth.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    filler = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(filler, b"\n" * 4096)
    except BlockingIOError:
        pass
    handle = simengine.start_process(simengine.SimConfig(truth_log=str(fifo), **FAST))
    seen = threading.Event()
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(read_until_closing, handle.url, {"X-Sim-Fault": kind} if kind else {}, seen)
            # The answer takes ~10 ms; then the engine blocks on the line, before or after its last bytes.
            assert not seen.wait(1.0), "the response ended before its truth line was written"
            drained = b""
            while b'"request_id"' not in drained or not drained.endswith(b"\n"):
                try:
                    drained += os.read(reader, 65536)
                except BlockingIOError:
                    time.sleep(0.01)
            raw = answer.result(timeout=10)
        assert seen.is_set() and raw.endswith(b"0\r\n\r\n") and b"data: [DONE]" in raw
        row = json.loads(drained.strip().splitlines()[-1])
        assert row["status"] == 200 and row["finish_reason"] in (["error"] if kind else ["stop", "length"])
    finally:
        handle.stop()
        os.close(filler)
        os.close(reader)


def test_cli_help_lists_every_config_field():
    out = subprocess.run([sys.executable, "-m", "simengine", "--help"], capture_output=True, text=True, timeout=30)
    for name in simengine.SimConfig.__dataclass_fields__:
        assert "--" + name.replace("_", "-") in out.stdout


def test_sim_exits_when_its_parent_dies(tmp_path):
    script = textwrap.dedent("""
        import simengine, sys
        handle = simengine.start_process(simengine.SimConfig())
        print(handle.popen.pid, flush=True)
        sys.stdin.read()
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child_pid):
        time.sleep(0.1)
    assert not _alive(child_pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


# -- the decode clock, without any real time --
def test_decode_clock_stretches_intervals_when_the_rate_changes():
    loop = asyncio.new_event_loop()
    try:
        scheduler = Scheduler(loop)
        scheduler.set_rate(10.0, now=100.0)  # 10 tok/s
        scheduler.decode_at(scheduler.v_at(100.0) + 10, lambda *_: None, None)  # 10 tokens ahead: due at 101
        assert scheduler._next_due() == pytest.approx(101.0)
        scheduler.set_rate(5.0, now=100.5)  # halfway, the rate halves: the other 5 tokens take 1 s
        assert scheduler._next_due() == pytest.approx(101.5)
    finally:
        loop.close()


def test_decode_rate_follows_the_slowdown_formula():
    loop = asyncio.new_event_loop()
    try:
        engine = Engine(simengine.SimConfig(decode_tps=100.0, decode_slowdown=0.25), Scheduler(loop), TruthLog(None))
        rates = []
        for _ in range(3):
            engine.join_decode(now=1.0)
            rates.append(engine.decode_rate_tps())
        assert rates == [100.0, 80.0, pytest.approx(100 / 1.5)]
        for _ in range(3):
            engine.leave_decode(now=2.0)
        assert engine.decode_rate_tps() == 0.0
    finally:
        loop.close()


# -- batched prefill: a long prompt pauses the other streams, and the truth log says so --
PASTE = dict(prefill_mode="batched", n_batch=256, prefill_tps=2000.0, decode_tps=50.0, decode_slowdown=0.0,
             slots=3)
PAUSE_FLOOR_S = 0.08  # a chunk here is 255 / 2000 s = 127.5 ms, a decode step 20 ms


def stamped_stream(url: str, content: str, seen: dict, started: threading.Event | None = None, **extra) -> None:
    """Stream a chat answer, stamping each content event as it is read (perf_counter)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = {"model": "sim-model", "messages": [{"role": "user", "content": content}], "stream": True, **extra}
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    response = connection.getresponse()
    seen["id"], seen["times"] = response.getheader("x-request-id"), []
    while line := response.readline():
        if line.startswith(b"data: {") and b'"content": "' in line and b'"content": ""' not in line:
            seen["times"].append(time.perf_counter())
            if started is not None and len(seen["times"]) == 5:
                started.set()
    connection.close()


def paste_while_chatting(url: str, paste_words: int) -> tuple[dict, dict]:
    """A chat answer of 60 tokens streams; after its 5th event, a long prompt arrives."""
    chat_seen, paste_seen, started = {}, {}, threading.Event()
    chat_thread = threading.Thread(target=stamped_stream, args=(url, "Tell me about rivers.", chat_seen, started),
                                   kwargs={"max_tokens": 60, "ignore_eos": True})
    chat_thread.start()
    assert started.wait(10)
    stamped_stream(url, "word " * paste_words, paste_seen, max_tokens=5)
    chat_thread.join(30)
    return chat_seen, paste_seen


@ALONE
def test_batched_prefill_pauses_a_decoding_stream_once_per_chunk(own_sim):
    """llama.cpp's loop: a chunk of n_batch tokens (one of them the decoding stream's) read with the
    decode clock frozen, then one decode step, then the next chunk. The stream sees one long gap per
    chunk; the truth log lists each, its frozen time and the paste as its cause."""
    handle = own_sim(**PASTE)
    chat_seen, paste_seen = paste_while_chatting(handle.url, 1180)
    rows = truth_rows(handle)
    chat_row, paste_row = rows[chat_seen["id"]], rows[paste_seen["id"]]
    to_read = paste_row["prompt_tokens"] - paste_row["cached_tokens"]
    chunk_tokens = PASTE["n_batch"] - 1  # the batch also holds the decoding stream's token
    chunks = -(-to_read // chunk_tokens)
    assert chunks == 5 and paste_row["prompt_chunks"] == chunks
    pauses = chat_row["pauses"]
    assert chat_row["n_pauses"] == len(pauses) == chunks
    assert {p["cause_request_id"] for p in pauses} == {paste_seen["id"]}
    chunk_s = [n / PASTE["prefill_tps"] for n in [chunk_tokens] * (chunks - 1) + [to_read - (chunks - 1) * chunk_tokens]]
    # Frozen inside the gap: the whole chunk, unless the event before it was written late into it.
    # The tolerances (half a decode step) absorb the sim's write lateness on a busy machine.
    assert [p["frozen_s"] for p in pauses] == pytest.approx(chunk_s, abs=0.01)
    step_s = 1 / PASTE["decode_tps"]
    for earlier, later in zip(pauses, pauses[1:]):  # one decode step between chunks: one event
        assert later["t_start"] == earlier["t_end"]
    for pause in pauses:  # whatever the stream's phase in the step: one step and one chunk
        assert pause["t_end"] - pause["t_start"] == pytest.approx(pause["frozen_s"] + step_s, abs=0.01)
    # What the client saw: the same gaps, at the truth's events.
    times = chat_seen["times"]
    gaps = [(a, b - a) for a, b in zip(times, times[1:]) if b - a > PAUSE_FLOOR_S]
    assert len(gaps) == chunks
    for (start, gap_s), pause in zip(gaps, pauses):
        assert gap_s == pytest.approx(pause["t_end"] - pause["t_start"], abs=0.01)
        assert start == pytest.approx(pause["t_start"], abs=0.01)
    # The paste's own first token waited for its chunks and the decode steps between them.
    prefill_s = to_read / PASTE["prefill_tps"] + (chunks - 1) * step_s
    assert paste_row["t_first_token"] - paste_row["t_admitted"] >= prefill_s - 1e-3
    assert paste_row["t_first_token"] - paste_row["t_admitted"] == pytest.approx(prefill_s, abs=0.02)
    assert paste_row["pauses"] == [] and paste_row["ttft_s"] >= prefill_s


@ALONE
def test_concurrent_prefill_never_pauses_decoding(own_sim):
    handle = own_sim(**{**PASTE, "prefill_mode": "concurrent"})
    chat_seen, paste_seen = paste_while_chatting(handle.url, 1180)
    rows = truth_rows(handle)
    chat_row, paste_row = rows[chat_seen["id"]], rows[paste_seen["id"]]
    assert chat_row["pauses"] == [] and chat_row["n_pauses"] == 0 and paste_row["prompt_chunks"] == 0
    assert paste_row["t_first_token"] - paste_row["t_admitted"] == pytest.approx(
        paste_row["prompt_tokens"] / PASTE["prefill_tps"], abs=0.02)
    times = chat_seen["times"]
    assert len(times) == 60 and max(b - a for a, b in zip(times, times[1:])) < PAUSE_FLOOR_S


class FakeReader:
    """Just what the compute loop reads and calls of a request reading its prompt."""

    def __init__(self, request_id: str, prompt_tokens: int) -> None:
        self.request_id, self.state, self.prompt_left, self.prompt_chunks = request_id, "prefill", prompt_tokens, 0
        self.prefilled_at = None

    def on_prefilled(self, due: float) -> None:
        self.prefilled_at = due


def test_prompts_share_the_batch_in_admission_order_and_the_cause_is_whose_tokens_took_longest():
    loop = asyncio.new_event_loop()
    try:
        engine = Engine(simengine.SimConfig(prefill_mode="batched", n_batch=256, prefill_tps=1000.0),
                        Scheduler(loop), TruthLog(None))
        first, second = FakeReader("first", 300), FakeReader("second", 300)
        engine.compute.add(first, 10.0)
        engine.compute.add(second, 10.0)
        while engine.compute.state != "idle":  # nobody decodes: chunks follow each other
            due, _seq, callback, arg = heapq.heappop(engine.scheduler._wall)
            callback(arg, due)
        assert [c.shares for c in engine.compute.chunks] == [[("first", 256)], [("first", 44), ("second", 212)],
                                                            [("second", 88)]]
        assert first.prefilled_at == pytest.approx(10.512) and second.prefilled_at == pytest.approx(10.6)
        assert (first.prompt_chunks, second.prompt_chunks) == (2, 2)
        # A gap spanning the second chunk and half the third: 256 ms frozen, most of it second's.
        frozen_s, cause = engine.compute.frozen_between(1, 10.3, 10.556)
        assert frozen_s == pytest.approx(0.256) and cause == "second"
        assert engine.compute.frozen_between(0, 10.0, 10.1) == (pytest.approx(0.1), "first")
    finally:
        loop.close()


def test_a_frozen_decode_clock_moves_every_due_event_later_by_the_freeze():
    loop = asyncio.new_event_loop()
    try:
        scheduler = Scheduler(loop)
        scheduler.set_rate(10.0, now=100.0)
        scheduler.decode_at(scheduler.v_at(100.0) + 10, lambda *_: None, None)  # due at 101
        scheduler.freeze(scheduler.v_at(100.5), 100.5)
        assert scheduler.v_at(100.9) == pytest.approx(5.0) and scheduler._next_due() == math.inf
        scheduler.set_rate(5.0, now=100.7)  # a rate change while frozen moves nothing
        assert scheduler.v_at(100.9) == pytest.approx(5.0)
        scheduler.thaw(100.8)  # frozen 0.3 s; the other 5 tokens at the new rate take 1 s
        assert scheduler._next_due() == pytest.approx(101.8)
    finally:
        loop.close()


# -- a thinking model --
def test_reasoning_comes_first_and_is_counted(own_sim):
    handle = own_sim(reasoning_tokens=7, decode_tps=50.0)
    _, headers, raw, _ = chat(handle.url, stream_options={"include_usage": True})
    chunks = parsed(raw)
    deltas = [c["choices"][0]["delta"] for c in chunks[1:] if c["choices"] and c["choices"][0]["delta"]]
    kinds = ["reasoning" if "reasoning_content" in d else "content" for d in deltas]
    assert kinds[:7] == ["reasoning"] * 7 and set(kinds[7:]) == {"content"} and len(kinds) > 8
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 7}
    assert usage["completion_tokens"] == len(deltas) + 1  # and the end-of-sequence token
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["reasoning_tokens"] == 7 and row["t_first_answer_token"] > row["t_first_token"]
    assert row["ttfo_s"] == pytest.approx(row["t_first_answer_token"] - row["t_arrival"])
    # Seven tokens' time of reasoning (140 ms), less what a loaded machine may hold the first token's write: the
    # engine keeps its schedule, so a late first token does not delay the next (a clean-clone run here read 7
    # tokens of 5 ms in 32.2 ms). Reasoning written at once, or an answer timed from the reasoning, reads 0.
    assert row["ttfo_s"] - row["ttft_s"] >= 4 / 50.0
    # The profile's thinking switch: the same question answered without reasoning, the same answer.
    _, headers, raw_off, _ = chat(handle.url, stream_options={"include_usage": True},
                                  chat_template_kwargs={"enable_thinking": False})
    chunks_off = parsed(raw_off)
    assert contents(chunks_off) == contents(chunks) and "completion_tokens_details" not in chunks_off[-1]["usage"]
    assert not [c for c in chunks_off if c["choices"] and "reasoning_content" in c["choices"][0]["delta"]]
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["reasoning_tokens"] == 0 and row["t_first_answer_token"] == row["t_first_token"]
    assert row["ttfo_s"] == row["ttft_s"]
    # max_tokens counts the reasoning: a budget it fills leaves no answer.
    _, headers, raw, _ = chat(handle.url, max_tokens=5, stream_options={"include_usage": True})
    chunks = parsed(raw)
    assert not contents(chunks) and chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["t_first_answer_token"] is None and row["ttfo_s"] is None and row["ttft_s"] is not None
    status, _, raw, _ = chat(handle.url, stream=False)
    message = json.loads(raw)["choices"][0]["message"]
    assert status == 200 and message["content"] and len(tokenize(message["reasoning_content"])) == 7


# -- the engine's queue and cache --
def gauges(url: str) -> dict:
    text = request(url, "GET", "/metrics")[2].decode()
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(names) and '{model_name="sim-model",engine="0"}' in line}


def test_queue_and_kv_cache_gauges_move(own_sim):
    handle = own_sim(slots=1, decode_tps=50.0, answer_tokens_min=40, answer_tokens_max=40, kv_tokens=1000)
    assert gauges(handle.url) == {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0,
                                  "vllm:kv_cache_usage_perc": 0.0}
    with ThreadPoolExecutor(2) as pool:
        answers = [pool.submit(chat, handle.url, f"question {i}") for i in range(2)]
        deadline, busy = time.monotonic() + 5, {}
        while time.monotonic() < deadline:
            busy = gauges(handle.url)
            if busy["vllm:num_requests_waiting"] == 1.0:
                break
            time.sleep(0.01)
        assert busy["vllm:num_requests_running"] == 1.0 and busy["vllm:num_requests_waiting"] == 1.0
        # One admitted request: its whole prompt (concurrent mode) and what it generated so far.
        prompt_tokens = len(tokenize(render_chat([{"role": "user", "content": "question 1"}], None)))
        assert prompt_tokens / 1000 <= busy["vllm:kv_cache_usage_perc"] <= (prompt_tokens + 41) / 1000
        [answer.result() for answer in answers]
    assert gauges(handle.url)["vllm:kv_cache_usage_perc"] == 0.0


# -- the Responses and Messages APIs --
def typed_events(raw: bytes) -> list[tuple[str, dict]]:
    """(event name, data) per SSE event of a typed API, for \\n or \\r\\n line endings; comments skipped."""
    out = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            name = next(line[7:] for line in lines if line.startswith("event: "))
            data = json.loads("".join(line[6:] for line in lines if line.startswith("data: ")))
            assert data["type"] == name, block  # the event line names the data's type
            out.append((name, data))
    return out


CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_7", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris", "days": 2, "metric": true}'}}]},
                {"role": "tool", "tool_call_id": "call_7", "content": "sunny"}]
RESPONSES_INPUT = [{"role": "user", "content": "Weather in Paris?"},
                   {"type": "function_call", "call_id": "call_7", "name": "get_weather",
                    "arguments": '{"city": "Paris", "days": 2, "metric": true}'},
                   {"type": "function_call_output", "call_id": "call_7", "output": "sunny"}]
MESSAGES_TURNS = [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather",
                                                     "input": {"city": "Paris", "days": 2, "metric": True}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "sunny"}]}]


def responses(url: str, input_=None, headers=None, **extra):
    body = {"model": "sim-model", "input": input_ or [{"role": "user", "content": "Tell me about rivers."}],
            "stream": True, **extra}
    return request(url, "POST", "/v1/responses", body, headers)


def messages(url: str, turns=None, headers=None, **extra):
    body = {"model": "sim-model", "messages": turns or [{"role": "user", "content": "Tell me about rivers."}],
            "max_tokens": 256, "stream": True, **extra}
    return request(url, "POST", "/v1/messages", body, headers)


def flat_tools():
    return [{"type": "function", **tool["function"]} for tool in TOOLS]


def anthropic_tools():
    return [{**{k: v for k, v in t["function"].items() if k != "parameters"},
             "input_schema": t["function"]["parameters"]} for t in TOOLS]


def test_messages_stream_as_llamacpp_sends_it_with_usage_where_anthropic_puts_it(sim):
    status, headers, raw, complete = messages(sim.url)
    assert status == 200 and complete and headers["content-type"] == "text/event-stream"
    stream = typed_events(raw)
    names = [name for name, _ in stream]
    deltas = [data["delta"]["text"] for name, data in stream if name == "content_block_delta"]
    assert names == ["message_start", "content_block_start", *["content_block_delta"] * len(deltas),
                     "content_block_stop", "message_delta", "message_stop"]
    start = stream[0][1]["message"]
    assert start["id"] == headers["x-request-id"] and start["usage"]["output_tokens"] == 0
    ending = stream[-2][1]
    assert ending["delta"]["stop_reason"] == "end_turn" and ending["usage"]["output_tokens"] == len(deltas) + 1
    # The prompt is the same as Chat Completions': input tokens plus those read from the cache.
    counted = json.loads(request(sim.url, "POST", "/tokenize", {
        "messages": [{"role": "user", "content": "Tell me about rivers."}]})[2])["count"]
    assert start["usage"]["input_tokens"] + start["usage"]["cache_read_input_tokens"] == counted
    row = truth_rows(sim)[headers["x-request-id"]]
    assert row["api"] == "messages" and row["n_events"] == len(deltas) and row["closing_tokens"] == 1
    assert row["t_first_byte"] < row["t_first_token"] <= row["t_last_content"] <= row["t_last_token"]


def test_responses_stream_as_llamacpp_sends_it_with_usage_and_timings_at_its_end(sim):
    status, headers, raw, complete = responses(sim.url, max_output_tokens=50)
    assert status == 200 and complete
    stream = typed_events(raw)
    names = [name for name, _ in stream]
    deltas = [data["delta"] for name, data in stream if name == "response.output_text.delta"]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * len(deltas),
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    completed = stream[-1][1]
    response = completed["response"]
    assert response["id"] == headers["x-request-id"] and response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "".join(deltas)
    usage = response["usage"]
    assert usage["output_tokens"] == len(deltas) + 1 and usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}
    assert completed["timings"]["predicted_n"] == usage["output_tokens"]
    row = truth_rows(sim)[headers["x-request-id"]]
    assert row["api"] == "responses" and row["n_events"] == len(deltas)
    # Cut by the limit, llama.cpp's status stays "completed".
    _, _, raw, _ = responses(sim.url, max_output_tokens=3, ignore_eos=True)
    response = typed_events(raw)[-1][1]["response"]
    assert response["status"] == "completed" and response["usage"]["output_tokens"] == 3


def test_one_conversation_is_one_prompt_and_one_answer_on_every_api(sim):
    """The agent's tool call and its result, said in each API's shape: the same prompt tokens, the same answer."""
    body = {"model": "sim-model", "messages": CONVERSATION, "tools": TOOLS, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks = parsed(request(sim.url, "POST", "/v1/chat/completions", body)[2])
    chat_prompt, chat_text = chunks[-1]["usage"]["prompt_tokens"], "".join(contents(chunks))
    stream = typed_events(responses(sim.url, RESPONSES_INPUT, instructions="You are terse.", tools=flat_tools())[2])
    usage = stream[-1][1]["response"]["usage"]
    text = "".join(d["delta"] for n, d in stream if n == "response.output_text.delta")
    assert (usage["input_tokens"], text) == (chat_prompt, chat_text)
    stream = typed_events(messages(sim.url, MESSAGES_TURNS, system="You are terse.", tools=anthropic_tools())[2])
    start = stream[0][1]["message"]["usage"]
    text = "".join(d["delta"]["text"] for n, d in stream if n == "content_block_delta")
    assert (start["input_tokens"] + start["cache_read_input_tokens"], text) == (chat_prompt, chat_text)


def test_tool_calls_on_responses_and_messages(sim):
    ask = [{"role": "user", "content": "What is the weather in Paris? Use get_weather."}]
    stream = typed_events(responses(sim.url, ask, tools=flat_tools())[2])
    added = [d["item"] for n, d in stream if n == "response.output_item.added"]
    assert added[0]["type"] == "function_call" and added[0]["name"] == "get_weather"
    fragments = [d["delta"] for n, d in stream if n == "response.function_call_arguments.delta"]
    assert len(fragments) > 3 and {d["item_id"] for n, d in stream if "arguments.delta" in n} == {added[0]["call_id"]}
    arguments = json.loads("".join(fragments))
    assert isinstance(arguments["days"], int) and stream[-1][1]["response"]["output"][0]["arguments"] == "".join(
        fragments)
    stream = typed_events(messages(sim.url, ask, tools=anthropic_tools())[2])
    block = next(d["content_block"] for n, d in stream if n == "content_block_start")
    assert block["type"] == "tool_use" and block["name"] == "get_weather" and block["input"] == {}
    partial = "".join(d["delta"]["partial_json"] for n, d in stream if n == "content_block_delta")
    assert json.loads(partial) == arguments  # the same answer as on Responses
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_reasoning_on_responses_and_messages_and_the_switch_on_both(own_sim):
    handle = own_sim(reasoning_tokens=5, decode_tps=500.0)
    stream = typed_events(responses(handle.url)[2])
    names = [n for n, _ in stream]
    assert names[2] == "response.output_item.added" and stream[2][1]["item"]["type"] == "reasoning"
    assert names[3:8] == ["response.reasoning_text.delta"] * 5
    assert stream[-1][1]["response"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}
    stream = typed_events(messages(handle.url)[2])
    kinds = [d["delta"]["type"] for n, d in stream if n == "content_block_delta"]
    assert kinds[:5] == ["thinking_delta"] * 5 and set(kinds[5:]) == {"text_delta"}
    starts = [d for n, d in stream if n == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [(0, "thinking"), (1, "text")]
    assert [d["index"] for n, d in stream if n == "content_block_stop"] == [0, 1]
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert not [n for n, _ in typed_events(responses(handle.url, **off)[2]) if "reasoning" in n]
    assert "thinking_delta" not in str(typed_events(messages(handle.url, **off)[2]))


def test_several_tokens_per_event_on_the_typed_apis(own_sim):
    handle = own_sim(tokens_per_event=4, answer_tokens_min=30, answer_tokens_max=30)
    _, headers, raw, _ = messages(handle.url)
    deltas = [d["delta"]["text"] for n, d in typed_events(raw) if n == "content_block_delta"]
    assert [len(tokenize(text)) for text in deltas] == [4] * 7 + [2]
    row = truth_rows(handle)[headers["x-request-id"]]
    assert row["first_event_tokens"] == 4 and row["n_events"] == 8 and row["completion_tokens"] == 31


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_faults_on_the_typed_apis(sim, api):
    send = responses if api == "responses" else messages
    end = "response.completed" if api == "responses" else "message_stop"

    def fault(kind, **headers):
        return send(sim.url, headers={"X-Sim-Fault": kind, **headers}, **(
            {"max_output_tokens": 12} if api == "responses" else {}))

    status, _, raw, complete = fault("error_event")
    stream = typed_events(raw)
    assert status == 200 and complete and stream[-1][0] == "error" and end not in raw.decode()
    _, _, raw, complete = fault("no_done")
    assert complete and end not in raw.decode() and typed_events(raw)
    _, _, raw, _ = fault("no_usage")
    assert '"usage"' not in raw.decode() and typed_events(raw)[-1][0] == end
    _, _, raw, _ = fault("keepalive")
    pings = raw.count(b"event: ping") if api == "messages" else raw.count(b": ping\n\n")
    assert pings > 5 and typed_events(raw)[-1][0] == end
    _, _, raw, _ = fault("crlf")
    assert b"\r\n\r\n" in raw and b"}\n\n" not in raw and typed_events(raw)[-1][0] == end
    _, _, raw, complete = fault("drop")
    assert not complete and end not in raw.decode()
    _, _, raw, _ = fault("malformed")
    bad = [block for block in raw.decode().split("\n\n") if '"oops' in block]
    assert len(bad) == 1 and end in raw.decode()  # one event whose data is not JSON, mid-stream
    status, _, _, _ = fault("http500")
    assert status == 500
    row = [r for r in truth_rows(sim).values() if r["fault"] == "http500" and r["api"] == api]
    assert row and row[-1]["status"] == 500


def test_typed_apis_not_streamed_and_bad_requests(sim):
    status, _, raw, _ = responses(sim.url, stream=False, max_output_tokens=5)
    whole = json.loads(raw)
    assert status == 200 and whole["object"] == "response" and whole["usage"]["output_tokens"] == 5
    assert len(tokenize(whole["output"][0]["content"][0]["text"])) == 5
    status, _, raw, _ = messages(sim.url, stream=False, max_tokens=5)
    whole = json.loads(raw)
    assert status == 200 and whole["type"] == "message" and whole["stop_reason"] == "max_tokens"
    assert whole["usage"]["output_tokens"] == 5 and len(tokenize(whole["content"][0]["text"])) == 5
    assert responses(sim.url, input_=[{"type": "mystery"}])[0] == 400
    assert request(sim.url, "POST", "/v1/messages", {"model": "sim-model", "messages": []})[0] == 400
