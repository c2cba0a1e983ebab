"""One request in each API a coding agent may speak: Chat Completions, Responses, Messages.

``build(api, ...)`` says a conversation (Chat Completions' messages: a system prompt, user turns,
assistant turns with tool calls, tool results), its tools and its limits in the API's own request
shape, and returns where it goes, its body and the decoder that reads its stream
(bench_tasks/decoders.py). The workloads keep their conversations (the agent's ``Session``) in Chat
Completions' form; the other forms are made from it here, every turn anew:

- Responses (``/v1/responses``): the leading system prompt as ``instructions``; user turns as input
  messages, assistant text as ``message`` items, each tool call as a ``function_call`` item and each
  tool result as a ``function_call_output`` item (joined by ``call_id``); tools flattened
  (``{"type": "function", "name", "description", "parameters"}``, without ``strict``: vLLM writes the
  key into the prompt, 36 tokens more for the agent's four tools, docs/engines.md#vllm-responses-stream);
  ``max_output_tokens``; ``stop`` (not OpenAI's, but vLLM and llama.cpp take it); ``store: false``
  (nothing kept on the server).
- Messages (``/v1/messages``): system prompts as ``system``; turns alternating ``user`` and
  ``assistant``, an assistant's tool calls as ``tool_use`` blocks (``input``: the arguments as an
  object) and the tool results as ``tool_result`` blocks of the next user turn; tools as
  ``{"name", "description", "input_schema"}``; ``max_tokens``; ``stop_sequences``.

Every body streams, at temperature 0, with what the engine profile adds for that API (its thinking
switch) and ``ignore_eos`` where the profile says the engine takes it on that path. Both APIs stream
their usage without being asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bench_tasks.decoders import ChatDecoder, Decoder, MessagesDecoder, ResponsesDecoder
from bench_tasks.engine import Profile
from bench_tasks.payload import CHAT_PATH, chat_body, finish_body

CHAT, RESPONSES, MESSAGES = "chat", "responses", "messages"
APIS = (CHAT, RESPONSES, MESSAGES)
PATHS = {CHAT: CHAT_PATH, RESPONSES: "/v1/responses", MESSAGES: "/v1/messages"}


@dataclass
class Request:
    """One request as an API says it: where it goes, its body, and the decoder of its stream (one per request)."""

    api: str
    path: str
    body: dict
    decoder: Decoder


def build(api: str, model: str, messages: list[dict], max_tokens: int, *, profile: Profile, thinking: bool = False,
          tools: list[dict] | None = None, stop: list[str] | None = None, ignore_eos: bool = False) -> Request:
    """The request for ``api``; ``thinking``: let a thinking model think (the profile's switch is not sent)."""
    if api not in APIS:
        raise ValueError(f"unknown API {api!r}; choose one of: {', '.join(APIS)}")
    extras = profile.extras(thinking_off=not thinking, api=api)
    ignore_eos = ignore_eos and profile.takes_ignore_eos(api)
    if api == CHAT:
        body, decoder = chat_body(model, messages, max_tokens, ignore_eos=ignore_eos, tools=tools, stop=stop,
                                  extras=extras), ChatDecoder()
    elif api == RESPONSES:
        body, decoder = responses_body(model, messages, max_tokens, ignore_eos=ignore_eos, tools=tools, stop=stop,
                                       extras=extras), ResponsesDecoder(max_output_tokens=max_tokens)
    else:
        body, decoder = messages_body(model, messages, max_tokens, ignore_eos=ignore_eos, tools=tools, stop=stop,
                                      extras=extras), MessagesDecoder()
    return Request(api, PATHS[api], body, decoder)


def responses_body(model: str, messages: list[dict], max_tokens: int, *, ignore_eos: bool = False,
                   tools: list[dict] | None = None, stop: list[str] | None = None, extras: dict | None = None) -> dict:
    instructions, items = responses_input(messages)
    body: dict = {"model": model, "input": items, "max_output_tokens": max_tokens, "temperature": 0,
                  "stream": True, "store": False}
    if instructions:
        body["instructions"] = instructions
    if tools:
        body["tools"] = [{"type": "function", **_declared(f), "parameters": f.get("parameters") or {}}
                         for f in _functions(tools)]
    if stop:
        body["stop"] = list(stop)
    return finish_body(body, ignore_eos, extras)


def messages_body(model: str, messages: list[dict], max_tokens: int, *, ignore_eos: bool = False,
                  tools: list[dict] | None = None, stop: list[str] | None = None, extras: dict | None = None) -> dict:
    system, turns = messages_turns(messages)
    body: dict = {"model": model, "messages": turns, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [{**_declared(f), "input_schema": f.get("parameters") or {"type": "object"}}
                         for f in _functions(tools)]
    if stop:
        body["stop_sequences"] = list(stop)
    return finish_body(body, ignore_eos, extras)


def responses_input(messages: list[dict]) -> tuple[str, list[dict]]:
    """(instructions, input items) of a Chat Completions conversation."""
    instructions: list[str] = []
    items: list[dict] = []
    for message in messages:
        role, text = message.get("role", "user"), _text(message.get("content"))
        if role == "system" and not items:
            instructions.append(text)
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id", ""), "output": text})
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if text or not calls:
                items.append({"type": "message", "role": "assistant", "content": text})
            items += [{"type": "function_call", "call_id": call.get("id", ""), "name": call["function"]["name"],
                       "arguments": call["function"].get("arguments") or "{}"} for call in calls]
        else:
            items.append({"role": role, "content": text})
    return "\n\n".join(instructions), items


def messages_turns(messages: list[dict]) -> tuple[str, list[dict]]:
    """(system, turns) of a Chat Completions conversation: the turns alternate user and assistant, so a
    tool result joins the user turn that follows the call, and consecutive messages of one role join."""
    system: list[str] = []
    turns: list[dict] = []
    for message in messages:
        role, text = message.get("role", "user"), _text(message.get("content"))
        if role == "system":
            system.append(text)
            continue
        if role == "tool":
            role, blocks = "user", [{"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""),
                                     "content": text}]
        else:
            role = "assistant" if role == "assistant" else "user"
            blocks = [{"type": "text", "text": text}] if text else []
            blocks += [{"type": "tool_use", "id": call.get("id", ""), "name": call["function"]["name"],
                        "input": _arguments_object(call["function"].get("arguments"))}
                       for call in message.get("tool_calls") or []]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:  # one text block is said as plain text, as the other APIs say it
        blocks = turn["content"]
        if not blocks or (len(blocks) == 1 and blocks[0]["type"] == "text"):
            turn["content"] = blocks[0]["text"] if blocks else ""
    return "\n\n".join(system), turns


def _functions(tools: list[dict]) -> list[dict]:
    return [tool["function"] for tool in tools if tool.get("type", "function") == "function"]


def _declared(function: dict) -> dict:
    """A tool's name, and its description where it has one (an empty one would be another prompt)."""
    return {key: function[key] for key in ("name", "description") if key in function}


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # content parts: their text
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _arguments_object(arguments) -> dict:
    """A tool call's arguments as the object Messages wants; anything else (invalid JSON) as {}."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
