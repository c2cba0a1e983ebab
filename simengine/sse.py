"""Server-sent event payloads of one streamed completion, shaped like vLLM's and llama.cpp's, on each
API: Chat Completions and Completions (``ChunkEncoder``), Responses (``ResponsesEncoder``) and
Messages (``MessagesEncoder``), all with one interface for the generation (simengine.generation).

Content events are the hot path: their JSON is a fixed prefix + the quoted text + a fixed suffix,
built once per request. Everything else goes through json.dumps.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii  # json.dumps(str) without its dispatch


class ChunkEncoder:
    """Chat Completions (``chat``) and Completions chunks, ``data:`` lines only, ending with ``[DONE]``."""

    start_usage = False  # the role chunk carries usage only with continuous usage

    def __init__(self, request_id: str, model: str, created: int, chat: bool, crlf: bool) -> None:
        self.chat = chat
        self.api = "chat" if chat else "completions"
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

    def closing(self, reason: str, finish_usage: dict | None, usage: dict | None, timings: dict | None,
                done: bool) -> list[bytes]:
        """The writes that end the answer: the finish chunk (its usage with continuous usage; the
        timings when no usage chunk follows), the usage chunk, ``[DONE]``."""
        writes = [self.chunk({}, reason, finish_usage, timings if usage is None else None)]
        if usage is not None:
            writes.append(self.usage_only(usage, timings))
        if done:
            writes.append(self.done())
        return writes

    def failure(self, message: str) -> list[bytes]:
        """An error event inside the 200 stream, then ``[DONE]``, as vLLM sends them."""
        return [self.error(message), self.done()]

    def body(self, answer, reason: str, usage: dict | None, timings: dict | None) -> dict:
        """The whole answer, not streamed."""
        if self.chat:
            message = {"role": "assistant", "content": answer.text if answer.tool_name is None else None}
            if answer.reasoning_tokens:
                message["reasoning_content"] = answer.reasoning_text
            if answer.tool_name is not None:
                message["tool_calls"] = [{"id": answer.tool_call_id, "type": "function",
                                          "function": {"name": answer.tool_name, "arguments": answer.text}}]
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": answer.text, "logprobs": None, "finish_reason": reason}
            kind = "text_completion"
        body = {**self.base, "object": kind, "choices": [choice]}
        if usage is not None:
            body["usage"] = usage
            body["timings"] = timings
        return body

    def error(self, message: str) -> bytes:
        return self.event({"error": {"message": message, "type": "server_error", "code": 500}})

    def malformed(self) -> bytes:
        return b'data: {"id": "' + self.base["id"].encode() + b'", "choices": [{"delta": {"content": "oops' + self.end

    def done(self) -> bytes:
        return b"data: [DONE]" + self.end

    def ping(self) -> bytes:
        return b": ping" + self.end


class _TypedEncoder:
    """Typed events: an ``event:`` line naming each, its data's ``type`` the same name."""

    api = ""
    start_usage = True

    def __init__(self, request_id: str, model: str, crlf: bool) -> None:
        self.request_id = request_id
        self.model = model
        self.nl = b"\r\n" if crlf else b"\n"
        self.end = self.nl + self.nl

    def event(self, name: str, obj: dict) -> bytes:
        return b"event: " + name.encode() + self.nl + b"data: " + json.dumps({"type": name, **obj}).encode() + self.end

    def fixed(self, name: str, head: str) -> tuple[bytes, bytes]:
        """The bytes of an event ``name`` around one quoted string: ``head`` (JSON up to the string) and the
        closing braces, for the per-token events."""
        prefix = b"event: " + name.encode() + self.nl + b'data: {"type": "' + name.encode() + b'", ' + head.encode()
        return prefix, b"}" * head.count("{") + b"}" + self.end

    def done(self) -> bytes:  # the error_event fault's end: these APIs have no [DONE]
        return b""

    def ping(self) -> bytes:
        return b": ping" + self.end


class ResponsesEncoder(_TypedEncoder):
    """OpenAI Responses events, in llama.cpp's sequence (tools/server/server-task.cpp): ``response.created`` and
    ``response.in_progress`` (written when the request takes its slot, as vLLM does; llama.cpp writes them
    with the first token), an item added (and a content part for text) before its first delta, the deltas,
    then at the end each item's ``...done`` events and ``response.completed`` with the usage and llama.cpp's
    ``timings`` beside the response. Like llama.cpp, the status is ``completed`` also when ``max_output_tokens``
    cut the answer."""

    api = "responses"

    def __init__(self, request_id: str, model: str, created: int, crlf: bool) -> None:
        super().__init__(request_id, model, crlf)
        self.created = created
        self.message_id, self.reasoning_id = f"msg_{request_id}", f"rs_{request_id}"
        self.call_id = self.call_name = ""
        self.opened: list[str] = []  # the items opened, in order: reasoning, message, function_call
        self.pieces: dict[str, list[str]] = {"reasoning": [], "message": [], "function_call": []}
        self._text = self.fixed("response.output_text.delta", f'"item_id": "{self.message_id}", "delta": ')
        self._reasoning = self.fixed("response.reasoning_text.delta", f'"item_id": "{self.reasoning_id}", "delta": ')

    def _response(self, status: str, output: list, usage: dict | None) -> dict:
        response = {"id": self.request_id, "object": "response", "created_at": self.created, "status": status,
                    "model": self.model, "output": output}
        if usage is not None:
            response["usage"] = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                                 "total_tokens": usage["total_tokens"], "input_tokens_details": {
                                     "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
                                 "output_tokens_details": {"reasoning_tokens": (
                                     usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)}}
        return response

    def role(self, _usage: dict | None) -> bytes:
        response = {"id": self.request_id, "object": "response", "status": "in_progress"}
        return (self.event("response.created", {"response": response})
                + self.event("response.in_progress", {"response": response}))

    def _open(self, kind: str) -> bytes:
        self.opened.append(kind)
        if kind == "reasoning":
            return self.event("response.output_item.added", {"item": {
                "id": self.reasoning_id, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}})
        return (self.event("response.output_item.added", {"item": {
                    "id": self.message_id, "type": "message", "role": "assistant", "status": "in_progress",
                    "content": []}})
                + self.event("response.content_part.added", {"item_id": self.message_id,
                                                             "part": {"type": "output_text", "text": ""}}))

    def content(self, text: str, _usage: dict | None) -> bytes:
        opening = b"" if self.opened and self.opened[-1] == "message" else self._open("message")
        self.pieces["message"].append(text)
        return opening + self._text[0] + encode_basestring_ascii(text).encode() + self._text[1]

    def reasoning(self, text: str, _usage: dict | None) -> bytes:
        opening = b"" if self.opened else self._open("reasoning")
        self.pieces["reasoning"].append(text)
        return opening + self._reasoning[0] + encode_basestring_ascii(text).encode() + self._reasoning[1]

    def tool_header(self, call_id: str, name: str, _usage: dict | None) -> bytes:
        self.opened.append("function_call")
        self.call_id, self.call_name = f"fc_{call_id}", name
        return self.event("response.output_item.added", {"item": {
            "arguments": "", "call_id": self.call_id, "name": name, "type": "function_call", "status": "in_progress"}})

    def tool_arguments(self, fragment: str, _usage: dict | None) -> bytes:
        self.pieces["function_call"].append(fragment)
        return self.event("response.function_call_arguments.delta", {"item_id": self.call_id, "delta": fragment})

    def _items(self) -> tuple[bytes, list]:
        """Each opened item's ``...done`` events and its whole item."""
        events, output = [], []
        for kind in self.opened:
            text = "".join(self.pieces[kind])
            if kind == "reasoning":
                item = {"id": self.reasoning_id, "type": "reasoning", "summary": [],
                        "content": [{"type": "reasoning_text", "text": text}], "status": "completed"}
            elif kind == "message":
                part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
                events += [self.event("response.output_text.done", {"item_id": self.message_id, "text": text}),
                           self.event("response.content_part.done", {"item_id": self.message_id, "part": part})]
                item = {"type": "message", "status": "completed", "id": self.message_id, "content": [part],
                        "role": "assistant"}
            else:
                item = {"type": "function_call", "status": "completed", "arguments": text, "call_id": self.call_id,
                        "name": self.call_name}
            events.append(self.event("response.output_item.done", {"item": item}))
            output.append(item)
        return b"".join(events), output

    def closing(self, _reason: str, _finish_usage: dict | None, usage: dict | None, timings: dict | None,
                done: bool) -> list[bytes]:
        events, output = self._items()
        if done:
            completed = {"response": self._response("completed", output, usage)}
            if timings is not None:
                completed["timings"] = timings
            events += self.event("response.completed", completed)
        return [events]

    def failure(self, message: str) -> list[bytes]:
        return [self.error(message)]

    def error(self, message: str) -> bytes:
        return self.event("error", {"code": "server_error", "message": message, "param": None})

    def malformed(self) -> bytes:
        return self._text[0] + b'"oops' + self.end

    def body(self, answer, _reason: str, usage: dict | None, timings: dict | None) -> dict:
        self.opened = [kind for kind, present in (("reasoning", answer.reasoning_tokens),
                                                  ("message", answer.tool_name is None),
                                                  ("function_call", answer.tool_name is not None)) if present]
        self.pieces = {"reasoning": [answer.reasoning_text], "message": [answer.text], "function_call": [answer.text]}
        self.call_id, self.call_name = f"fc_{answer.tool_call_id}", answer.tool_name or ""
        body = self._response("completed", self._items()[1], usage)
        if usage is not None:
            body["timings"] = timings
        return body


class MessagesEncoder(_TypedEncoder):
    """Anthropic Messages events, in llama.cpp's sequence (tools/server/server-task.cpp): ``message_start`` with
    the prompt's usage (written when the request takes its slot, as vLLM does; llama.cpp writes it with the
    first token), ``content_block_start`` before a block's first delta (thinking, index 0; text or tool_use
    after it), the deltas, then at the end every block's ``content_block_stop``, ``message_delta`` (its
    ``stop_reason``, ``usage.output_tokens``) and ``message_stop``; ``ping`` events with the keepalive fault."""

    api = "messages"
    STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}

    def __init__(self, request_id: str, model: str, crlf: bool) -> None:
        super().__init__(request_id, model, crlf)
        self.blocks = 0  # opened so far; the open one is the last
        self.kind = ""  # the open block's type
        self._fixed: tuple[bytes, bytes] = (b"", b"")  # the open block's delta, around its text

    def _open(self, block: dict, delta: str, key: str) -> bytes:
        self.blocks += 1
        self.kind = block["type"]
        head = f'"index": {self.blocks - 1}, "delta": {{"type": "{delta}", "{key}": '
        self._fixed = self.fixed("content_block_delta", head)
        return self.event("content_block_start", {"index": self.blocks - 1, "content_block": block})

    def role(self, usage: dict | None) -> bytes:
        message = {"id": self.request_id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                   "stop_reason": None, "stop_sequence": None}
        if usage is not None:
            cached = usage["prompt_tokens_details"]["cached_tokens"]
            message["usage"] = {"cache_read_input_tokens": cached, "input_tokens": usage["prompt_tokens"] - cached,
                                "output_tokens": 0}
        return self.event("message_start", {"message": message})

    def content(self, text: str, _usage: dict | None) -> bytes:
        opening = b"" if self.kind == "text" else self._open({"type": "text", "text": ""}, "text_delta", "text")
        return opening + self._fixed[0] + encode_basestring_ascii(text).encode() + self._fixed[1]

    def reasoning(self, text: str, _usage: dict | None) -> bytes:
        opening = b"" if self.kind == "thinking" else self._open({"type": "thinking", "thinking": ""},
                                                                 "thinking_delta", "thinking")
        return opening + self._fixed[0] + encode_basestring_ascii(text).encode() + self._fixed[1]

    def tool_header(self, call_id: str, name: str, _usage: dict | None) -> bytes:
        return self._open({"type": "tool_use", "id": call_id, "name": name, "input": {}}, "input_json_delta",
                          "partial_json")

    def tool_arguments(self, fragment: str, _usage: dict | None) -> bytes:
        return self._fixed[0] + encode_basestring_ascii(fragment).encode() + self._fixed[1]

    def closing(self, reason: str, _finish_usage: dict | None, usage: dict | None, _timings: dict | None,
                done: bool) -> list[bytes]:
        events = b"".join(self.event("content_block_stop", {"index": i}) for i in range(self.blocks))
        delta = {"delta": {"stop_reason": self.STOP_REASONS.get(reason, reason), "stop_sequence": None}}
        if usage is not None:
            delta["usage"] = {"output_tokens": usage["completion_tokens"]}
        events += self.event("message_delta", delta)
        return [events + self.event("message_stop", {}) if done else events]

    def failure(self, message: str) -> list[bytes]:
        return [self.error(message)]

    def error(self, message: str) -> bytes:
        return self.event("error", {"error": {"type": "api_error", "message": message}})

    def malformed(self) -> bytes:
        prefix = self.fixed("content_block_delta", '"index": 0, "delta": {"type": "text_delta", "text": ')[0]
        return prefix + b'"oops' + self.end

    def ping(self) -> bytes:
        return self.event("ping", {})

    def body(self, answer, reason: str, usage: dict | None, _timings: dict | None) -> dict:
        content = []
        if answer.reasoning_tokens:
            content.append({"type": "thinking", "thinking": answer.reasoning_text, "signature": ""})
        if answer.tool_name is None:
            content.append({"type": "text", "text": answer.text})
        else:
            content.append({"type": "tool_use", "id": answer.tool_call_id, "name": answer.tool_name,
                            "input": _object(answer.text)})
        body = {"id": self.request_id, "type": "message", "role": "assistant", "content": content,
                "model": self.model, "stop_reason": self.STOP_REASONS.get(reason, reason), "stop_sequence": None}
        if usage is not None:
            cached = usage["prompt_tokens_details"]["cached_tokens"]
            body["usage"] = {"cache_read_input_tokens": cached, "input_tokens": usage["prompt_tokens"] - cached,
                             "output_tokens": usage["completion_tokens"]}
        return body


def _object(arguments: str) -> dict:
    """A tool call's arguments as an object (those cut short by max_tokens: {})."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
