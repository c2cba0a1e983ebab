"""Server-sent event payloads of one streamed completion, shaped like vLLM's and llama.cpp's.

Content events are the hot path: their JSON is a fixed prefix + the quoted text + a fixed suffix,
built once per request. Everything else goes through json.dumps.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii  # json.dumps(str) without its dispatch


class ChunkEncoder:
    def __init__(self, request_id: str, model: str, created: int, chat: bool, crlf: bool) -> None:
        self.chat = chat
        self.end = b"\r\n\r\n" if crlf else b"\n\n"
        self.base = {"id": request_id, "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": created, "model": model}
        head = json.dumps(self.base)[:-1]
        if chat:
            self._prefix = (b'data: ' + head.encode() + b', "choices": [{"index": 0, "delta": {"content": ')
            self._reasoning_prefix = (b'data: ' + head.encode()
                                      + b', "choices": [{"index": 0, "delta": {"reasoning_content": ')
            self._suffix = b'}, "logprobs": null, "finish_reason": null}]}' + self.end
        else:
            self._prefix = b'data: ' + head.encode() + b', "choices": [{"index": 0, "text": '
            self._suffix = b', "logprobs": null, "finish_reason": null}]}' + self.end

    def event(self, obj: dict) -> bytes:
        return b"data: " + json.dumps(obj).encode() + self.end

    def chunk(self, delta: dict | None, finish_reason: str | None = None, usage: dict | None = None,
              timings: dict | None = None) -> bytes:
        if self.chat:
            choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": (delta or {}).get("content", ""), "logprobs": None,
                      "finish_reason": finish_reason}
        obj = {**self.base, "choices": [choice]}
        if usage is not None:
            obj["usage"] = usage
        if timings is not None:
            obj["timings"] = timings
        return self.event(obj)

    def role(self, usage: dict | None) -> bytes:
        # /v1/completions has no role: its first chunk is an empty text, equally not a token.
        return self.chunk({"role": "assistant", "content": ""} if self.chat else {"content": ""}, usage=usage)

    def content(self, text: str, usage: dict | None) -> bytes:
        if usage is None:
            return self._prefix + encode_basestring_ascii(text).encode() + self._suffix
        return self.chunk({"content": text}, usage=usage)

    def reasoning(self, text: str, usage: dict | None) -> bytes:
        """A thinking model's reasoning, as vLLM's reasoning parsers and llama.cpp stream it."""
        if usage is None:
            return self._reasoning_prefix + encode_basestring_ascii(text).encode() + self._suffix
        return self.chunk({"reasoning_content": text}, usage=usage)

    def tool_header(self, call_id: str, name: str, usage: dict | None) -> bytes:
        call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        return self.chunk({"role": "assistant", "content": None, "tool_calls": [call]}, usage=usage)

    def tool_arguments(self, fragment: str, usage: dict | None) -> bytes:
        return self.chunk({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}, usage=usage)

    def usage_only(self, usage: dict, timings: dict | None) -> bytes:
        obj = {**self.base, "choices": [], "usage": usage}
        if timings is not None:
            obj["timings"] = timings
        return self.event(obj)

    def error(self, message: str) -> bytes:
        return self.event({"error": {"message": message, "type": "server_error", "code": 500}})

    def malformed(self) -> bytes:
        return b'data: {"id": "' + self.base["id"].encode() + b'", "choices": [{"delta": {"content": "oops' + self.end

    def done(self) -> bytes:
        return b"data: [DONE]" + self.end

    def ping(self) -> bytes:
        return b": ping" + self.end
