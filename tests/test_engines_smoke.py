"""Smoke tests against real engines on 127.0.0.1 (fixtures in tests/engines/fixtures.py).

Raw HTTP (http.client) on purpose: these tests pin the engines' wire behaviour that llm-bench's client relies
on, independently of llm-bench's own client code.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from urllib.parse import urlsplit

import pytest

LLAMACPP_TIMINGS_KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                         "predicted_per_second"}
LLAMACPP_METRICS = ["llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_seconds",
                    "llamacpp:predicted_tokens_seconds", "llamacpp:requests_processing",
                    "llamacpp:requests_deferred"]
VLLM_METRICS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
                "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                "vllm:request_queue_time_seconds", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                "vllm:prompt_tokens_cached_total", "vllm:num_requests_running", "vllm:num_requests_waiting"]

# Words from the tokenizer's training corpus: ~1 token each on the tiny models.
WORDS = ("license software program copyright free public general terms conditions distribution source code "
         "modify work permission notice warranty library version file").split()


def text_of_words(n: int, seed: int = 0) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n))


class Stream:
    def __init__(self, status: int, events: list[tuple[float, str]], body: bytes = b""):
        self.status = status
        self.events = events          # (seconds since request sent, data payload) per SSE `data:` line
        self.body = body              # non-200 response body

    @property
    def done_last(self) -> bool:
        return bool(self.events) and self.events[-1][1] == "[DONE]"

    @property
    def chunks(self) -> list[dict]:
        return [json.loads(d) for _, d in self.events if d != "[DONE]"]

    @property
    def times(self) -> list[float]:
        return [t for t, d in self.events if d != "[DONE]"]

    def error(self) -> dict:
        return json.loads(self.body)


def _conn(url: str, timeout: float) -> http.client.HTTPConnection:
    u = urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def post_stream(url: str, path: str, body: dict, timeout: float = 300) -> Stream:
    conn = _conn(url, timeout)
    try:
        t0 = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json",
                                                       "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            return Stream(resp.status, [], resp.read())
        events = []
        for line in resp:
            line = line.strip()
            if line.startswith(b"data:"):
                events.append((time.perf_counter() - t0, line[5:].strip().decode()))
        return Stream(resp.status, events)
    finally:
        conn.close()


def request(url: str, method: str, path: str, body: dict | None = None, timeout: float = 120):
    conn = _conn(url, timeout)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        data = resp.read()
        ctype = resp.getheader("Content-Type", "")
        return resp.status, (json.loads(data) if "json" in ctype else data.decode())
    finally:
        conn.close()


def chat_body(model: str, content: str, max_tokens: int, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, "temperature": 0, **extra}


def content_chunks(chunks: list[dict]) -> list[dict]:
    return [c for c in chunks if c.get("choices") and c["choices"][0].get("delta", {}).get("content")]


# ----------------------------------------------------------------------------------------------- llama.cpp


def test_llamacpp_chat_stream_shape(llamacpp_server):
    s = post_stream(llamacpp_server.url, "/v1/chat/completions",
                    chat_body(llamacpp_server.model, f"{uuid.uuid4()} hello there", 24, ignore_eos=True))
    assert s.status == 200 and s.done_last
    chunks = s.chunks
    # First chunk: role only (content null), sent together with the first token.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    # Then the finish_reason chunk, then the usage chunk (choices == []) with timings, then [DONE].
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"] == {}
    assert "usage" not in finish and "timings" not in finish
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 24  # ignore_eos: exactly max_tokens
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 24
    assert usage["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    timings = usage["timings"]
    assert LLAMACPP_TIMINGS_KEYS <= set(timings)
    assert timings["predicted_n"] == 24
    assert timings["prompt_n"] + timings["cache_n"] == usage["usage"]["prompt_tokens"]
    # One content chunk per token (a byte-level token may be held back only while its UTF-8 is incomplete).
    assert 0 < len(content_chunks(chunks)) <= 24
    for c in chunks[:-1]:
        assert "usage" not in c and "timings" not in c


def test_llamacpp_timings_semantics(llamacpp_server):
    """What llama.cpp's own `timings` measure (the client's agreement test relies on this).

    Server side (tools/server: server_slot_stats): prompt_ms = slot starts on the prompt (after HTTP parsing,
    templating, tokenization and slot choice) -> first token sampled; predicted_ms = first token sampled -> last
    token sampled; predicted_n counts every generated token including the first, and
    predicted_per_second = (predicted_n - 1) / predicted_ms (the first token comes free with the prompt batch).
    The role-only chunk is written together with the first token, not before the prefill.
    """
    prompt = f"{uuid.uuid4()} " + text_of_words(2000)
    s = post_stream(llamacpp_server.url, "/v1/chat/completions",
                    chat_body(llamacpp_server.model, prompt, 32, ignore_eos=True))
    chunks, times = s.chunks, s.times
    timings = chunks[-1]["timings"]
    assert timings["predicted_n"] == 32
    assert timings["predicted_per_second"] * timings["predicted_ms"] / 1000 == pytest.approx(31, rel=1e-3)
    content_times = [t for t, c in zip(times, chunks)
                     if c.get("choices") and c["choices"][0].get("delta", {}).get("content")]
    ttft, span = content_times[0], content_times[-1] - content_times[0]
    # role chunk: first event, arriving with the first token (prefill of ~2K tokens takes far longer than the gap)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert content_times[0] - times[0] < 0.1 * ttft
    # the server's prompt window lies inside the client's TTFT
    assert 0 < timings["prompt_ms"] / 1000 < ttft
    # first->last token on both sides: close (both exclude the first token's own generation)
    assert span == pytest.approx(timings["predicted_ms"] / 1000, rel=0.3, abs=0.03)


def test_llamacpp_stream_without_include_usage_puts_timings_on_finish_chunk(llamacpp_server):
    body = chat_body(llamacpp_server.model, "tell me about software", 8, ignore_eos=True)
    del body["stream_options"]
    s = post_stream(llamacpp_server.url, "/v1/chat/completions", body)
    chunks = s.chunks
    assert s.done_last and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "timings" in chunks[-1] and "usage" not in chunks[-1]
    assert chunks[-1]["timings"]["predicted_n"] == 8


def test_llamacpp_completions_usage_on_finish_chunk(llamacpp_server):
    s = post_stream(llamacpp_server.url, "/v1/completions",
                    {"model": llamacpp_server.model, "prompt": "the license", "max_tokens": 6, "stream": True,
                     "ignore_eos": True, "stream_options": {"include_usage": True}})
    chunks = s.chunks
    assert s.done_last
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 6 and last["timings"]["predicted_n"] == 6


def test_llamacpp_tokenize_detokenize_metrics_models(llamacpp_server):
    url = llamacpp_server.url
    status, plain = request(url, "POST", "/tokenize", {"content": "hello world", "add_special": False})
    assert status == 200 and all(isinstance(t, int) for t in plain["tokens"]) and plain["tokens"]
    status, pieces = request(url, "POST", "/tokenize", {"content": "hello world", "with_pieces": True})
    assert status == 200
    assert [t["id"] for t in pieces["tokens"]] == plain["tokens"]
    assert "".join(t["piece"] for t in pieces["tokens"]) == "hello world"
    status, detok = request(url, "POST", "/detokenize", {"tokens": plain["tokens"]})
    assert status == 200 and detok["content"] == "hello world"
    status, tmpl = request(url, "POST", "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and tmpl["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    status, models = request(url, "GET", "/v1/models")
    assert status == 200 and models["data"][0]["id"] == llamacpp_server.model
    status, props = request(url, "GET", "/props")
    assert status == 200 and props["total_slots"] == 4
    status, metrics = request(url, "GET", "/metrics")
    assert status == 200
    for name in LLAMACPP_METRICS:
        assert f"\n{name} " in "\n" + metrics or f"{name}{{" in metrics, name


def test_llamacpp_tools_rendered(llamacpp_server):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    status, tmpl = request(llamacpp_server.url, "POST", "/apply-template",
                           {"messages": [{"role": "user", "content": "weather in Paris?"}], "tools": tools})
    assert status == 200 and "get_weather" in tmpl["prompt"] and "<tools>" in tmpl["prompt"]
    s = post_stream(llamacpp_server.url, "/v1/chat/completions",
                    chat_body(llamacpp_server.model, "weather in Paris?", 8, tools=tools))
    assert s.status == 200 and s.done_last and s.chunks[-1]["usage"]["prompt_tokens"] > 100


def test_llamacpp_prefix_cache(llamacpp_server):
    prompt = f"{uuid.uuid4()} " + text_of_words(1000)
    body = chat_body(llamacpp_server.model, prompt, 4, ignore_eos=True)
    first = post_stream(llamacpp_server.url, "/v1/chat/completions", body).chunks[-1]
    second = post_stream(llamacpp_server.url, "/v1/chat/completions", body).chunks[-1]
    assert first["usage"]["prompt_tokens"] > 900
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 900 and cached == second["timings"]["cache_n"]
    assert second["timings"]["prompt_n"] == second["usage"]["prompt_tokens"] - cached


def test_llamacpp_too_long_prompt_is_400(llamacpp_server):
    status, tok = request(llamacpp_server.url, "POST", "/tokenize", {"content": text_of_words(100)})
    per_word = len(tok["tokens"]) / 100
    n_words = int(llamacpp_server.n_ctx / per_word) + 500
    s = post_stream(llamacpp_server.url, "/v1/chat/completions",
                    chat_body(llamacpp_server.model, text_of_words(n_words), 4))
    assert s.status == 400
    assert s.error()["error"]["type"] == "exceed_context_size_error"


def test_smollm2_chat(smollm2_server):
    s = post_stream(smollm2_server.url, "/v1/chat/completions",
                    chat_body(smollm2_server.model, "What is the capital of France? Answer in one word.", 16))
    assert s.status == 200 and s.done_last
    chunks = s.chunks
    text = "".join(c["choices"][0]["delta"]["content"] for c in content_chunks(chunks))
    assert "paris" in text.lower()
    assert chunks[-1]["choices"] == [] and LLAMACPP_TIMINGS_KEYS <= set(chunks[-1]["timings"])
    s = post_stream(smollm2_server.url, "/v1/chat/completions",
                    chat_body(smollm2_server.model, "Count to three.", 12, ignore_eos=True))
    assert s.chunks[-1]["usage"]["completion_tokens"] == 12


# ----------------------------------------------------------------------------------------------------- vLLM


def test_vllm_chat_stream_shape(vllm_server):
    s = post_stream(vllm_server.url, "/v1/chat/completions",
                    chat_body(vllm_server.model, f"{uuid.uuid4()} hello there", 16, ignore_eos=True,
                              stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert s.status == 200 and s.done_last
    chunks = s.chunks
    # role chunk: content "" (llama.cpp: null); with continuous_usage_stats it carries usage, completion_tokens 0
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["usage"]["completion_tokens"] == 0
    final, finish = chunks[-1], chunks[-2]
    # finish_reason rides on the last content chunk (llama.cpp sends a separate empty-delta chunk)
    assert finish["choices"][0]["delta"].get("content")
    assert final["choices"] == []
    assert final["usage"]["completion_tokens"] == 16
    details = final["usage"]["prompt_tokens_details"]
    assert "cached_tokens" in details
    assert finish["choices"][0]["finish_reason"] == "length"
    # continuous_usage_stats: every content chunk carries usage, completion_tokens counting up.
    contents = content_chunks(chunks)
    assert contents and all("usage" in c for c in contents)
    counts = [c["usage"]["completion_tokens"] for c in contents]
    assert counts == sorted(counts) and counts[-1] <= 16


def test_vllm_tokenize_metrics_models(vllm_server):
    url = vllm_server.url
    status, tok = request(url, "POST", "/tokenize", {"model": vllm_server.model, "prompt": "hello world"})
    assert status == 200 and {"count", "max_model_len", "tokens"} <= set(tok)
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 32768
    status, tok = request(url, "POST", "/tokenize",
                          {"model": vllm_server.model, "messages": [{"role": "user", "content": "hi"}],
                           "add_generation_prompt": True, "return_token_strs": True})
    assert status == 200 and tok["count"] > 0 and "token_strs" in tok
    status, models = request(url, "GET", "/v1/models")
    assert status == 200 and models["data"][0]["id"] == vllm_server.model
    status, metrics = request(url, "GET", "/metrics")
    assert status == 200
    for name in VLLM_METRICS:
        assert name in metrics, name


def test_vllm_prefix_cache(vllm_server):
    prompt = f"{uuid.uuid4()} " + text_of_words(1000)
    body = chat_body(vllm_server.model, prompt, 4, ignore_eos=True)
    first = post_stream(vllm_server.url, "/v1/chat/completions", body).chunks[-1]
    second = post_stream(vllm_server.url, "/v1/chat/completions", body).chunks[-1]
    assert first["usage"]["prompt_tokens"] > 900
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0, second["usage"]


def test_vllm_too_long_prompt_is_400(vllm_server):
    s = post_stream(vllm_server.url, "/v1/chat/completions",
                    chat_body(vllm_server.model, text_of_words(40000), 4))
    assert s.status == 400, s.body[:500]


def _metric_total(metrics_text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_vllm_ngram_speculative_decoding(vllm_ngram_server):
    url, model = vllm_ngram_server.url, vllm_ngram_server.model
    # Greedy decoding on random weights falls into a loop; the n-gram proposer then drafts from the context.
    s = post_stream(url, "/v1/chat/completions",
                    chat_body(model, "one two three four one two three four one two three four", 64,
                              ignore_eos=True,
                              stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert s.status == 200 and s.done_last and s.chunks[-1]["usage"]["completion_tokens"] == 64
    status, metrics = request(url, "GET", "/metrics")
    assert _metric_total(metrics, "vllm:spec_decode_num_drafts_total") > 0
    assert _metric_total(metrics, "vllm:spec_decode_num_accepted_tokens_total") > 0
    # Several tokens can arrive in one chunk: fewer content chunks than tokens.
    assert len(content_chunks(s.chunks)) < 64
