"""Counting the prompt tokens of chat messages on the server under test.

In order of exactness: the engine's /tokenize with messages (vLLM shape: the chat template is
applied), llama.cpp's /apply-template then /tokenize, and as a last resort a max_tokens=1
probe request whose usage.prompt_tokens is the count. The probe runs a different marker first,
so it cannot warm the cache for the measured prompt.
"""

from __future__ import annotations

from bench_tasks import server
from bench_tasks.engine import Profile
from bench_tasks.prompt import CountTokens


def token_counter(base_url: str, profile: Profile, model: str, api_key: str = "") -> CountTokens:
    shape = profile.tokenize.get("shape", "none")
    path = profile.tokenize.get("path", "")
    if shape == "vllm" and path:
        return lambda messages: _vllm_count(base_url, path, model, messages, api_key)
    if shape == "llamacpp" and path:
        return lambda messages: _llamacpp_count(base_url, path, messages, api_key)
    return lambda messages: _probe_count(base_url, model, messages, api_key)


def _vllm_count(base_url, path, model, messages, api_key) -> int:
    answer = server.post_json(base_url, path, {"model": model, "messages": messages}, api_key=api_key)
    return int(answer["count"])


def _llamacpp_count(base_url, path, messages, api_key) -> int:
    prompt = server.post_json(base_url, "/apply-template", {"messages": messages}, api_key=api_key)["prompt"]
    answer = server.post_json(base_url, path, {"content": prompt, "add_special": True}, api_key=api_key)
    return len(answer["tokens"])


def _probe_count(base_url, model, messages, api_key) -> int:
    probe = [dict(m) for m in messages]
    probe[0]["content"] = "[probe] " + probe[0]["content"]
    body = {"model": model, "messages": probe, "max_tokens": 1, "temperature": 0, "stream": False}
    answer = server.post_json(base_url, "/v1/chat/completions", body, api_key=api_key)
    # "[probe] " is about 3 tokens on common tokenizers; the record keeps the real prompt_tokens.
    return int(answer["usage"]["prompt_tokens"]) - 3
