"""What each API's stream events mean: one small decoder per API, for the Recorder (bench_tasks/stream.py).

The Recorder frames the server-sent events, stamps them and keeps the rules (first token, event times,
bunching, usage, the closing token, stalls, uncertainty) once; a decoder maps each event of its API to
the Recorder's few calls:

- ``rec.token(text, answer, tools, usage)``: an event that carries generated text, answer text (``answer``
  true) or reasoning, or a tool call's name or arguments (``tools``: fragments in Chat Completions'
  shape, ``[{"index", "id", "function": {"name", "arguments"}}]``, joined by ``assemble_tool_calls``);
  ``usage``: the event's own usage, where the server streams one per event;
- ``rec.tool_fragment(tools)``: a tool call's fragment without text (an id), kept for the assembly;
- ``rec.close(finish_reason, had_text)``: the event that says how the answer ended, in Chat Completions'
  vocabulary (the maps below); ``rec.tokens_ended()``: an event before it that says the tokens have
  ended (its time closes the answer when no token came after it);
- ``rec.usage`` (in Chat Completions' shape: ``prompt_tokens``, ``completion_tokens``,
  ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``),
  ``rec.timings`` (llama.cpp's), ``rec.response_id``, ``rec.done`` (the API's own end came) and
  ``rec.fail(error, detail)`` (returns False: read no further).

``on_event(rec, name, data)`` (an event's name, ``message`` when it has none, and its data) returns False when
the stream has said its last word: its end, or an error.

- Chat Completions (and legacy Completions), ``ChatDecoder``: ``data:`` JSON chunks with ``choices`` (a
  ``delta`` with ``content``, ``reasoning_content`` or ``reasoning``, ``tool_calls``; ``finish_reason``),
  ``usage`` on the final chunk (or on every chunk: vLLM's ``continuous_usage_stats``), llama.cpp's
  ``timings``; the end is ``data: [DONE]``; ``{"error": ...}`` is an error.
- Responses, ``ResponsesDecoder``: typed events, each named by its ``event:`` line (and its data's
  ``type``). Text in ``response.output_text.delta`` (``response.refusal.delta``), reasoning in
  ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta``, a tool call opened by
  ``response.output_item.added`` (a ``function_call`` item with its name) and its arguments in
  ``response.function_call_arguments.delta``; the end is ``response.completed`` or
  ``response.incomplete``, whose ``response`` carries the status and ``usage`` (``input_tokens``,
  ``output_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``);
  ``response.failed`` and ``error`` are errors. The ``...done`` events say the tokens have ended (vLLM
  sends ``response.completed`` after them, milliseconds later now and then: measured 11 ms); the other
  events (``response.created`` aside, for the id) carry nothing to measure. Neither is parsed.
- Messages, ``MessagesDecoder``: typed events. ``message_start`` carries the prompt's usage
  (``input_tokens``, the tokens not read from the cache, beside ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens``: the prompt is their sum); ``content_block_start`` opens a block
  (``text``, ``thinking``, ``tool_use`` with its name), ``content_block_delta`` carries ``text_delta``,
  ``thinking_delta`` or ``input_json_delta``; ``message_delta`` carries ``stop_reason`` and
  ``usage.output_tokens``; the end is ``message_stop``; ``error`` is an error; ``content_block_stop``
  says a block's tokens have ended; ``ping`` and it are not parsed.

A tool call's opening event, which carries its name, counts as tool-call text on every API, as its Chat
Completions chunk does. An event whose ``event:`` line is missing is read by its data's ``type``.
"""

from __future__ import annotations

import json

import orjson

from bench_tasks.errors import MALFORMED_EVENT, STREAM_ERROR

# How each API says an answer ended, in Chat Completions' words (docs/reference.md#the-finish-reason-of-each-api).
MESSAGES_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                         "tool_use": "tool_calls", "refusal": "content_filter",
                         "model_context_window_exceeded": "length"}
RESPONSES_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


class ChatDecoder:
    """OpenAI Chat Completions chunks (and legacy Completions' ``text`` choices)."""

    api = "chat"
    end_event = "data: [DONE]"

    def on_event(self, rec, _name: str, data: str) -> bool:
        if data == "[DONE]":
            rec.done = True
            return False
        if not data:  # dispatched by the specification, but nothing in it
            return True
        try:
            obj = orjson.loads(data)  # a fourth of json.loads's time: this runs for every event
        except ValueError:
            return rec.fail(MALFORMED_EVENT, data[:200])
        if not isinstance(obj, dict):
            return rec.fail(MALFORMED_EVENT, data[:200])
        if obj.get("error") is not None:
            return rec.fail(STREAM_ERROR, json.dumps(obj["error"])[:300])
        usage, choices = obj.get("usage"), obj.get("choices")
        if (usage and not isinstance(usage, dict)) or (choices and not isinstance(choices, list)):
            return rec.fail(MALFORMED_EVENT, data[:200])
        if usage:
            rec.usage = usage
        if not rec.response_id and obj.get("id"):
            rec.response_id = str(obj["id"])
        try:  # free when nothing raises: the shapes are checked only when a server sends nonsense
            for choice in choices or ():
                delta = choice.get("delta")
                if delta is None:  # /v1/completions
                    answer = text = choice.get("text")
                    tool_calls = None
                else:
                    answer = delta.get("content")
                    text = answer or delta.get("reasoning_content") or delta.get("reasoning")
                    tool_calls = delta.get("tool_calls")
                if text and not isinstance(text, str):
                    raise TypeError("text that is not a string")
                if text or (tool_calls and _has_tool_text(tool_calls)):
                    rec.token(text, answer or tool_calls, tool_calls, usage)
                elif tool_calls:  # e.g. an id/type-only first fragment: keep it for assembly
                    rec.tool_fragment(tool_calls)
                if choice.get("finish_reason"):
                    rec.close(choice["finish_reason"], bool(text or tool_calls))
        except (AttributeError, TypeError):  # a choice, delta or tool call that is not an object
            return rec.fail(MALFORMED_EVENT, data[:200])
        if obj.get("timings"):
            rec.timings = obj["timings"]
        return True


class _TypedDecoder:
    """Typed events (Responses, Messages): dispatched on the event's name, parsed only when read."""

    handlers: dict[str, str] = {}  # event name -> method name
    end_marks: frozenset = frozenset()  # events that say the tokens have ended: their name is enough

    def on_event(self, rec, name: str, data: str) -> bool:
        if not data:
            return True
        handler = self.handlers.get(name)
        if handler is None and name != "message":  # an event with nothing to measure: not parsed
            if name in self.end_marks:
                rec.tokens_ended()
            return True
        try:
            obj = orjson.loads(data)
        except ValueError:
            if data == "[DONE]":  # Chat Completions' end, after (or instead of) this API's own
                return False
            return rec.fail(MALFORMED_EVENT, data[:200])
        if not isinstance(obj, dict):
            return rec.fail(MALFORMED_EVENT, data[:200])
        if handler is None:  # no `event:` line: the data's type names it
            handler = self.handlers.get(obj.get("type"))
            if handler is None:
                if obj.get("type") in self.end_marks:
                    rec.tokens_ended()
                return True
        try:
            return getattr(self, handler)(rec, obj)
        except (AttributeError, TypeError, KeyError):  # an event of the wrong shape
            return rec.fail(MALFORMED_EVENT, data[:200])

    def error(self, rec, obj: dict) -> bool:
        return rec.fail(STREAM_ERROR, json.dumps(obj.get("error") or obj)[:300])


class ResponsesDecoder(_TypedDecoder):
    """OpenAI Responses events (``/v1/responses``).

    ``max_output_tokens``: what the request asked. llama.cpp ends every answer with status
    ``completed``, also one cut by that limit (docs/engines.md#llamacpp-responses-stream): a completed
    answer that used all of it is called ``length``."""

    api = "responses"
    end_event = "response.completed"
    handlers = {
        "response.created": "created",
        "response.output_text.delta": "text", "response.refusal.delta": "text",
        "response.reasoning_text.delta": "reasoning", "response.reasoning_summary_text.delta": "reasoning",
        "response.output_item.added": "item_added",
        "response.function_call_arguments.delta": "arguments",
        "response.completed": "ended", "response.incomplete": "ended",
        "response.failed": "failed", "error": "error",
    }
    end_marks = frozenset(("response.output_text.done", "response.refusal.done", "response.reasoning_text.done",
                           "response.function_call_arguments.done", "response.content_part.done",
                           "response.output_item.done"))

    def __init__(self, max_output_tokens: int | None = None) -> None:
        self.max_output_tokens = max_output_tokens
        self.calls: dict[str, int] = {}  # a function call's item id and call id -> its index

    def created(self, rec, obj: dict) -> bool:
        rec.response_id = rec.response_id or str(obj["response"].get("id") or "")
        return True

    def text(self, rec, obj: dict) -> bool:
        return _text(rec, obj["delta"], True)

    def reasoning(self, rec, obj: dict) -> bool:
        return _text(rec, obj["delta"], False)

    def item_added(self, rec, obj: dict) -> bool:
        item = obj["item"]
        if item.get("type") != "function_call":
            return True
        index = len(set(self.calls.values()))
        for key in ("id", "call_id"):
            if item.get(key):
                self.calls[item[key]] = index
        fragment = [{"index": index, "id": item.get("call_id") or item.get("id") or "",
                     "function": {"name": item.get("name") or "", "arguments": item.get("arguments") or ""}}]
        if item.get("name") or item.get("arguments"):
            rec.token(None, True, fragment)
        else:
            rec.tool_fragment(fragment)
        return True

    def arguments(self, rec, obj: dict) -> bool:
        delta = obj["delta"]
        if delta:
            if not isinstance(delta, str):
                raise TypeError("arguments that are not a string")
            index = self.calls.get(obj.get("item_id"), max(self.calls.values(), default=0))
            rec.token(None, True, [{"index": index, "function": {"arguments": delta}}])
        return True

    def ended(self, rec, obj: dict) -> bool:
        response = obj["response"]
        usage = response.get("usage")
        if usage:
            rec.usage = responses_usage(usage)
        timings = obj.get("timings") or response.get("timings")  # llama.cpp: beside the response
        if timings:
            rec.timings = timings
        rec.response_id = rec.response_id or str(response.get("id") or "")
        rec.close(self.finish_reason(response, usage or {}), False)
        rec.done = True
        return False

    def failed(self, rec, obj: dict) -> bool:
        response = obj.get("response") or {}
        return rec.fail(STREAM_ERROR, json.dumps(response.get("error") or obj)[:300])

    def finish_reason(self, response: dict, usage: dict) -> str:
        if response.get("status") == "incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason")
            return RESPONSES_INCOMPLETE_REASONS.get(reason, reason or "incomplete")
        output_tokens = usage.get("output_tokens")
        if self.max_output_tokens and output_tokens is not None and output_tokens >= self.max_output_tokens:
            return "length"
        return "tool_calls" if self.calls else "stop"


class MessagesDecoder(_TypedDecoder):
    """Anthropic Messages events (``/v1/messages``)."""

    api = "messages"
    end_event = "message_stop"
    handlers = {
        "message_start": "started", "content_block_start": "block_started", "content_block_delta": "delta",
        "message_delta": "message_delta", "message_stop": "stopped", "error": "error",
    }
    end_marks = frozenset(("content_block_stop",))
    INPUT_KEYS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")

    def __init__(self) -> None:
        self.blocks: dict[int, int] = {}  # a tool_use block's index -> its tool call's index
        self.input_usage: dict = {}

    def started(self, rec, obj: dict) -> bool:
        message = obj["message"]
        rec.response_id = rec.response_id or str(message.get("id") or "")
        # Its output_tokens is 0, before any token: the answer's count comes with message_delta.
        rec.usage = messages_usage(self._note_input(message.get("usage")), None)
        return True

    def block_started(self, rec, obj: dict) -> bool:
        block = obj["content_block"]
        kind = block.get("type")
        if kind == "text":
            return _text(rec, block.get("text"), True)
        if kind == "thinking":
            return _text(rec, block.get("thinking"), False)
        if kind == "tool_use":
            index = self.blocks[obj.get("index")] = len(self.blocks)
            arguments = json.dumps(block["input"]) if block.get("input") else ""
            fragment = [{"index": index, "id": block.get("id") or "",
                         "function": {"name": block.get("name") or "", "arguments": arguments}}]
            if block.get("name") or arguments:
                rec.token(None, True, fragment)
            else:
                rec.tool_fragment(fragment)
        return True

    def delta(self, rec, obj: dict) -> bool:
        delta = obj["delta"]
        kind = delta.get("type")
        if kind == "text_delta":
            return _text(rec, delta["text"], True)
        if kind == "thinking_delta":
            return _text(rec, delta["thinking"], False)
        if kind == "input_json_delta":
            partial = delta["partial_json"]
            if partial:
                if not isinstance(partial, str):
                    raise TypeError("arguments that are not a string")
                index = self.blocks.get(obj.get("index"), len(self.blocks) - 1)
                rec.token(None, True, [{"index": index, "function": {"arguments": partial}}])
        return True

    def message_delta(self, rec, obj: dict) -> bool:
        usage = obj.get("usage") or {}
        rec.usage = messages_usage(self._note_input(usage), usage.get("output_tokens"))
        reason = (obj.get("delta") or {}).get("stop_reason")
        if reason:
            rec.close(MESSAGES_STOP_REASONS.get(reason, reason), False)
        return True

    def stopped(self, rec, _obj: dict) -> bool:
        rec.done = True
        return False

    def _note_input(self, usage: dict | None) -> dict:
        """The prompt's counts, from whichever event gave them last (llama.cpp: message_start only)."""
        for key in self.INPUT_KEYS:
            if (usage or {}).get(key) is not None:
                self.input_usage[key] = usage[key]
        return self.input_usage


Decoder = ChatDecoder | ResponsesDecoder | MessagesDecoder  # what a request's stream is read with


def messages_usage(input_usage: dict, output_tokens: int | None) -> dict:
    """Messages' counts in Chat Completions' shape: the prompt is the tokens read plus those from the cache."""
    usage: dict = {}
    if input_usage.get("input_tokens") is not None:
        usage["prompt_tokens"] = sum(input_usage.get(key) or 0 for key in MessagesDecoder.INPUT_KEYS)
    if input_usage.get("cache_read_input_tokens") is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": input_usage["cache_read_input_tokens"]}
    if output_tokens is not None:
        usage["completion_tokens"] = output_tokens
    return usage


def responses_usage(usage: dict) -> dict:
    """Responses' counts in Chat Completions' shape."""
    converted: dict = {"prompt_tokens": usage.get("input_tokens")}
    if usage.get("output_tokens") is not None:
        converted["completion_tokens"] = usage["output_tokens"]
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        converted["prompt_tokens_details"] = {"cached_tokens": cached}
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        converted["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return converted


def _text(rec, text, answer: bool) -> bool:
    if text:
        if not isinstance(text, str):
            raise TypeError("text that is not a string")
        rec.token(text, answer)
    return True


def _has_tool_text(tool_calls: list) -> bool:
    for call in tool_calls:
        function = call.get("function") or {}
        if function.get("name") or function.get("arguments"):
            return True
    return False
