"""The conversation of a Responses or Messages request, as Chat Completions' messages and tools.

As llama.cpp and vLLM serve these APIs (tools/server/server-chat.cpp converts both to a chat request),
the sim renders every API's conversation with its one chat template, so the same conversation is the
same prompt, token for token, whichever API carried it:

- Responses: ``instructions`` is a system message first; ``input`` is a string (one user message) or
  items: messages (``role`` user, system, developer or assistant; ``content`` a string or parts with
  ``text``), ``function_call`` (an assistant's tool call, joined to the assistant message before it) and
  ``function_call_output`` (a tool message); ``tools`` of type function, flat (``name``,
  ``description``, ``parameters``); ``max_output_tokens``; ``stop`` (vLLM's and llama.cpp's extension).
- Messages: ``system`` (a string or text blocks); ``messages`` whose ``content`` is a string or blocks:
  ``text``, ``tool_use`` (a tool call, its ``input`` as JSON arguments), ``tool_result`` (a tool message),
  ``thinking`` (left out, as the chat template leaves earlier reasoning out); ``tools`` with
  ``input_schema``; ``max_tokens``; ``stop_sequences``.
"""

from __future__ import annotations

import json


class ConversationError(ValueError):
    """The request's conversation cannot be read (HTTP 400)."""


def from_responses(body: dict) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) of a Responses request."""
    messages: list[dict] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        for item in given:
            if not isinstance(item, dict):
                raise ConversationError("each item of `input` must be an object")
            _add_item(messages, item)
    else:
        raise ConversationError("`input` must be a string or a non-empty list of items")
    tools = [_function(tool, "parameters") for tool in body.get("tools") or []
             if isinstance(tool, dict) and tool.get("type") == "function"]
    return messages, tools or None


def _add_item(messages: list[dict], item: dict) -> None:
    kind = item.get("type", "message")
    if kind == "function_call":
        call = {"id": item.get("call_id", ""), "type": "function",
                "function": {"name": item.get("name", ""), "arguments": item.get("arguments", "")}}
        if messages and messages[-1]["role"] == "assistant":
            messages[-1].setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append({"role": "tool", "tool_call_id": item.get("call_id", ""), "content": _text(item.get("output"))})
    elif kind == "message":
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise ConversationError(f"an input message's role must be user, system, developer or assistant: {role!r}")
        messages.append({"role": "system" if role == "developer" else role, "content": _text(item.get("content"))})
    elif kind != "reasoning":
        raise ConversationError(f"unknown input item type {kind!r}")


def from_messages(body: dict) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) of a Messages request."""
    messages: list[dict] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text(system)})
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns or not all(isinstance(turn, dict) for turn in turns):
        raise ConversationError("`messages` must be a non-empty list of objects")
    for turn in turns:
        _add_turn(messages, turn)
    tools = [_function(tool, "input_schema") for tool in body.get("tools") or [] if isinstance(tool, dict)]
    return messages, tools or None


def _add_turn(messages: list[dict], turn: dict) -> None:
    role, content = turn.get("role"), turn.get("content")
    if role not in ("user", "assistant"):
        raise ConversationError(f"a message's role must be user or assistant: {role!r}")
    if not isinstance(content, list):
        messages.append({"role": role, "content": _text(content)})
        return
    texts, calls = [], []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            calls.append({"id": block.get("id", ""), "type": "function",
                          "function": {"name": block.get("name", ""), "arguments": arguments}})
        elif kind == "tool_result":
            messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""),
                             "content": _text(block.get("content"))})
        elif kind not in ("thinking", "redacted_thinking", "image"):
            raise ConversationError(f"unknown content block type {kind!r}")
    if texts or calls:
        message: dict = {"role": role, "content": "\n".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        messages.append(message)


def _function(tool: dict, schema: str) -> dict:
    """A tool as Chat Completions declares it: the same keys, so the template renders it the same."""
    function = {"name": tool.get("name", "")}
    if "description" in tool:
        function["description"] = tool["description"]
    function["parameters"] = tool.get(schema) or {}
    return {"type": "function", "function": function}


def _text(content) -> str:
    """A string, or the text of parts or blocks (``text`` of each, joined by newlines as the template joins them)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)
