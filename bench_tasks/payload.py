"""Request bodies for /v1/chat/completions, built the same way for every engine (the other APIs' in
bench_tasks/apis.py).

Every body streams, asks for usage (``stream_options.include_usage``) and uses temperature 0;
``extras`` carries what an engine profile adds (switching thinking off, per-event usage).
"""

from __future__ import annotations

import json

CHAT_PATH = "/v1/chat/completions"


def chat_body(
    model: str,
    messages: list[dict],
    max_tokens: int,
    *,
    ignore_eos: bool = False,
    tools: list[dict] | None = None,
    stop: list[str] | None = None,
    extras: dict | None = None,
) -> dict:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = tools
    if stop:
        body["stop"] = list(stop)
    return finish_body(body, ignore_eos, extras)


def finish_body(body: dict, ignore_eos: bool, extras: dict | None) -> dict:
    """``body`` with ``ignore_eos`` (where the engine takes it) and the profile's ``extras`` merged in."""
    if ignore_eos:
        body["ignore_eos"] = True
    for key, value in (extras or {}).items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}  # e.g. stream_options gains continuous_usage_stats
        else:
            body[key] = value
    return body


def encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
