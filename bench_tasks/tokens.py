"""Counting the prompt tokens of chat messages on the server under test, and reading their token ids.

In order of exactness: the engine's /tokenize with messages (vLLM shape: the chat template is
applied), llama.cpp's /apply-template then /tokenize, and as a last resort a max_tokens=1
probe request whose usage.prompt_tokens is the count. The probe runs a different marker first,
so it cannot warm the cache for the measured prompt.

``token_ids`` gives the ids themselves where the engine's tokenizer returns them (what the cache check
measures the run's shared opening with, bench_tasks.cache_share); ``cached_after`` is its stand-in where
there is none: a short request, and the cached tokens the server reports for it.
"""

from __future__ import annotations

from collections.abc import Callable

from bench_tasks import server
from bench_tasks.engine import Profile
from bench_tasks.prompt import CountTokens

TokenIds = Callable[[list[dict], "list[dict] | None"], list[int]]


def token_counter(base_url: str, profile: Profile, model: str, api_key: str = "",
                  timeout_s: float = 120.0) -> CountTokens:
    """``timeout_s``: seconds without a byte before a count fails (the run's --read-timeout)."""
    shape = profile.tokenize.get("shape", "none")
    path = profile.tokenize.get("path", "")
    if shape == "vllm" and path:
        return lambda messages: _vllm_count(base_url, path, model, messages, api_key, timeout_s)
    if shape == "llamacpp" and path:
        return lambda messages: _llamacpp_count(base_url, path, messages, api_key, timeout_s)
    return lambda messages: _probe_count(base_url, model, messages, api_key, timeout_s)


def _vllm_count(base_url, path, model, messages, api_key, timeout_s) -> int:
    answer = server.post_json(base_url, path, {"model": model, "messages": messages}, api_key=api_key,
                              timeout_s=timeout_s)
    return _count(base_url + path, answer, _get(answer, "count"))


def _llamacpp_count(base_url, path, messages, api_key, timeout_s) -> int:
    template = server.post_json(base_url, "/apply-template", {"messages": messages}, api_key=api_key,
                                timeout_s=timeout_s)
    prompt = _get(template, "prompt")
    if not isinstance(prompt, str):
        raise _odd(base_url + "/apply-template", template, "a prompt")
    answer = server.post_json(base_url, path, {"content": prompt, "add_special": True}, api_key=api_key,
                              timeout_s=timeout_s)
    tokens = _get(answer, "tokens")
    if not isinstance(tokens, list):
        raise _odd(base_url + path, answer, "a list of tokens")
    return len(tokens)


def _probe_count(base_url, model, messages, api_key, timeout_s) -> int:
    probe = [dict(m) for m in messages]
    probe[0]["content"] = "[probe] " + probe[0]["content"]
    body = {"model": model, "messages": probe, "max_tokens": 1, "temperature": 0, "stream": False}
    answer = server.post_json(base_url, "/v1/chat/completions", body, api_key=api_key, timeout_s=timeout_s)
    # "[probe] " is about 3 tokens on common tokenizers; the record keeps the real prompt_tokens.
    return _count(base_url + "/v1/chat/completions", answer, _get(_get(answer, "usage"), "prompt_tokens")) - 3


def _get(answer, key: str):
    return answer.get(key) if isinstance(answer, dict) else None


def _count(url: str, answer, value) -> int:
    """``value`` as a token count; a server that answered something else cannot size a prompt: say so."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise _odd(url, answer, "a token count")
    return int(value)


def _odd(url: str, answer, wanted: str) -> server.ServerError:
    text = repr(answer)
    text = text if len(text) <= 120 else text[:117] + "..."
    return server.ServerError(f"{url} answered {text}, not {wanted}: prompts cannot be sized to their token count")


def token_ids(base_url: str, profile: Profile, model: str, api_key: str = "",
              timeout_s: float = 120.0) -> TokenIds | None:
    """``ids(messages, tools)``: the server's token ids of the chat prompt (its template applied), or None
    where the engine's tokenizer gives none."""
    shape = profile.tokenize.get("shape", "none")
    path = profile.tokenize.get("path", "")
    if shape == "vllm" and path:
        def vllm(messages, tools=None):
            body = {"model": model, "messages": messages, **({"tools": tools} if tools else {})}
            answer = server.post_json(base_url, path, body, api_key=api_key, timeout_s=timeout_s)
            return _ids(base_url + path, _get(answer, "tokens"), answer)
        return vllm
    if shape == "llamacpp" and path:
        def llamacpp(messages, tools=None):
            body = {"messages": messages, **({"tools": tools} if tools else {})}
            template = server.post_json(base_url, "/apply-template", body, api_key=api_key, timeout_s=timeout_s)
            prompt = _get(template, "prompt")
            if not isinstance(prompt, str):
                raise _odd(base_url + "/apply-template", template, "a prompt")
            answer = server.post_json(base_url, path, {"content": prompt, "add_special": True}, api_key=api_key,
                                      timeout_s=timeout_s)
            return _ids(base_url + path, _get(answer, "tokens"), answer)
        return llamacpp
    return None


def _ids(url: str, tokens, answer) -> list[int]:
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise _odd(url, answer, "a list of token ids")
    return tokens


def cached_after(base_url: str, model: str, api_key: str = "",
                 timeout_s: float = 120.0) -> Callable[[list[dict], "list[dict] | None"], int | None]:
    """``cached(messages, tools)``: send a one-token request and return the prompt tokens the server says its
    cache served it (usage's cached_tokens, or llama.cpp's timings.cache_n); None when it says nothing."""
    def cached(messages, tools=None):
        body = {"model": model, "messages": messages, "max_tokens": 1, "temperature": 0, "stream": False,
                **({"tools": tools} if tools else {})}
        answer = server.post_json(base_url, "/v1/chat/completions", body, api_key=api_key, timeout_s=timeout_s)
        details = _get(_get(answer, "usage"), "prompt_tokens_details")
        value = _get(details, "cached_tokens")
        if value is None:
            value = _get(_get(answer, "timings"), "cache_n")
        return None if value is None else _count(base_url + "/v1/chat/completions", answer, value)
    return cached
