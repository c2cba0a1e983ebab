"""What the sim answers: a deterministic function of the prompt, cut into streamed events.

- Needle: when the last user message asks about the "code word" and the prompt says
  `code word is WORD`, the answer is `The code word is WORD.`.
- Tools: when tools are given and the last message is the user's, the answer is one tool call
  (a tool named in that message, else one picked by the prompt hash) whose arguments fill the
  tool's required parameters. Its first event carries the name (counted as 1 token), the argument
  text follows in fragments of `tokens_per_event` tokens.
- Otherwise words from a fixed list, seeded by the prompt hash; the natural length lies in
  [answer_tokens_min, answer_tokens_max]. `max_tokens` caps every answer ("length");
  `ignore_eos` makes a text answer exactly `max_tokens` long.
- Thinking (`reasoning_tokens` > 0): that many tokens of reasoning come first, one event per
  `tokens_per_event` tokens, then the answer above, unchanged. `max_tokens` counts the reasoning
  too (as vLLM): what it leaves is the answer's budget; none left, the answer is all reasoning.

How an answer ends, as llama.cpp and vLLM end it (measured on both here:
docs/engines.md#answers-that-end-by-themselves):
- By itself ("stop", "tool_calls"): with an end-of-sequence token, counted in `completion_tokens`
  and generated one token after the last text, which it does not have: no content event carries
  it, the finish chunk is sent when it is generated (`closing_tokens` = 1).
- By a stop string (`stop`): at the token that completes it; the stop string is not sent, its
  tokens are counted. Text that may begin a stop string is held back and sent with the next token
  (one event, several tokens), as llama.cpp does (server-context.cpp, process_token).
- By length: at its last token, whose event the finish chunk follows at once.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import zlib
from dataclasses import dataclass

from simengine.tokenizer import split_pieces

WORDS = (
    "the model answers with plain words drawn from a short fixed list so that every run of the same "
    "prompt streams the same text and the client can count tokens exactly while timing each event "
    "river stone light window garden number signal paper silver orange market winter engine simple "
    "quiet rapid narrow gentle bright distant hollow steady measure follow gather balance compare "
    "however because therefore meanwhile perhaps although during before after above below between"
).split()
SPACED_WORDS = tuple(" " + word for word in WORDS)
NEEDLE_FACT = re.compile(r"code word is ([A-Za-z0-9_-]+)")
SENTENCE_WORDS = 11  # a full stop every so many words keeps the text readable


@dataclass
class Answer:
    events: list[tuple[str, int]]  # (text, tokens) per content event; a tool call's first is its header
    finish_reason: str
    completion_tokens: int
    text: str  # the content, or the tool call's arguments
    tool_name: str | None = None
    tool_call_id: str | None = None
    closing_tokens: int = 0  # generated after the last content event, without text (end-of-sequence, a stop string)
    reasoning_events: int = 0  # the first events are reasoning (delta.reasoning_content)
    reasoning_tokens: int = 0
    reasoning_text: str = ""


@dataclass
class Question:
    """What the answer depends on, taken from a request."""

    prompt_text: str
    last_user_text: str
    last_role: str
    tools: list | None
    max_tokens: int
    ignore_eos: bool
    stop: tuple[str, ...] = ()
    reasoning_tokens: int = 0


def plan_answer(question: Question, tokens_per_event: int, length_range: tuple[int, int]) -> Answer:
    if not question.reasoning_tokens:
        return _plan_reply(question, tokens_per_event, length_range)
    thinking = min(question.reasoning_tokens, question.max_tokens)
    seed = zlib.crc32(question.prompt_text.encode("utf-8", "surrogatepass"))
    pieces = _word_pieces(random.Random(seed ^ 0x5EED), thinking, after=0)
    reasoning = _group([(piece, 1) for piece in pieces], tokens_per_event)
    budget = question.max_tokens - thinking
    if budget:
        reply = _plan_reply(dataclasses.replace(question, max_tokens=budget), tokens_per_event, length_range)
    else:
        reply = Answer([], "length", 0, "")
    return dataclasses.replace(reply, events=reasoning + reply.events,
                               completion_tokens=thinking + reply.completion_tokens, reasoning_events=len(reasoning),
                               reasoning_tokens=thinking, reasoning_text="".join(pieces))


def _plan_reply(question: Question, tokens_per_event: int, length_range: tuple[int, int]) -> Answer:
    seed = zlib.crc32(question.prompt_text.encode("utf-8", "surrogatepass"))
    rng = random.Random(seed)
    if question.tools and question.last_role == "user":
        return _tool_answer(question, rng, seed, tokens_per_event)
    low, high = length_range
    needle = _needle_pieces(question)
    natural = len(needle) if needle else low + seed % (high - low + 1)
    # Like vLLM: ignore_eos runs to max_tokens and reports "length". Ending by itself takes one more
    # token than the text: the end-of-sequence token must fit in max_tokens too.
    ends_itself = natural < question.max_tokens and not question.ignore_eos
    target = question.max_tokens if question.ignore_eos else min(natural, question.max_tokens)
    pieces = (needle + _word_pieces(rng, target - len(needle), after=len(needle)))[:target]
    events, closing, finish = stream_events(pieces, question.stop, ends_itself)
    text = "".join(t for t, _ in events)
    return Answer(_group(events, tokens_per_event), finish, sum(n for _, n in events) + closing, text,
                  closing_tokens=closing)


def stream_events(pieces: list[str], stop: tuple[str, ...], ends_itself: bool) -> tuple[list, int, str]:
    """One-token pieces as llama.cpp streams them: (events as (text, tokens), closing_tokens, finish).

    Unsent text that ends with the beginning of a stop string is held back; a stop string ends
    the answer at the token that completes it, and is never sent."""
    events, unsent, pending = [], "", 0
    for piece in pieces:
        unsent, pending = unsent + piece, pending + 1
        hit = _stop_at(unsent, stop)
        if hit is not None:
            if hit > 0:
                events.append((unsent[:hit], pending))
                pending = 0
            return events, pending, "stop"
        if not _may_begin_a_stop(unsent, stop):
            events.append((unsent, pending))
            unsent, pending = "", 0
    if ends_itself:
        if unsent:  # held-back text leaves with the end-of-sequence token's step
            events.append((unsent, pending + 1))
            return events, 0, "stop"
        return events, 1, "stop"
    if unsent:
        events.append((unsent, pending))
    return events, 0, "length"


def _stop_at(text: str, stop: tuple[str, ...]) -> int | None:
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(found) if found else None


def _may_begin_a_stop(text: str, stop: tuple[str, ...]) -> bool:
    return any(text.endswith(s[:k]) for s in stop for k in range(1, len(s)))


def _needle_pieces(question: Question) -> list[str]:
    if "code word" not in question.last_user_text.lower():  # faster than an IGNORECASE regex on 600 KB
        return []
    match = NEEDLE_FACT.search(question.prompt_text)
    return split_pieces(f"The code word is {match.group(1)}.") if match else []


def _word_pieces(rng: random.Random, count: int, after: int) -> list[str]:
    # One C-level draw for all words: planning runs as each request arrives, often in bursts.
    pieces = rng.choices(SPACED_WORDS, k=count)
    for i in range(SENTENCE_WORDS, count, SENTENCE_WORDS + 1):
        pieces[i] = "."
    if after == 0 and pieces:
        pieces[0] = pieces[0][1:].capitalize()
    return pieces


def _group(events: list[tuple[str, int]], tokens_per_event: int) -> list[tuple[str, int]]:
    """Events merged until each carries tokens_per_event tokens (vLLM's multi-token steps)."""
    if tokens_per_event == 1:
        return events
    grouped: list[tuple[str, int]] = []
    for text, tokens in events:
        if grouped and grouped[-1][1] < tokens_per_event:
            grouped[-1] = (grouped[-1][0] + text, grouped[-1][1] + tokens)
        else:
            grouped.append((text, tokens))
    return grouped


def _tool_answer(question: Question, rng: random.Random, seed: int, tokens_per_event: int) -> Answer:
    functions = [tool.get("function") or {} for tool in question.tools if isinstance(tool, dict)]
    functions = [f for f in functions if f.get("name")] or [{"name": "tool"}]
    named = [f for f in functions if f["name"] in question.last_user_text]
    function = named[0] if named else functions[seed % len(functions)]
    arguments = json.dumps(_fill_arguments(function.get("parameters") or {}, rng))
    budget = max(question.max_tokens - 1, 0)  # the header event is the name's token
    pieces = split_pieces(arguments)
    ends_itself = len(pieces) < budget  # the call, then the end-of-sequence token
    finish, closing = ("tool_calls", 1) if ends_itself else ("length", 0)
    pieces = pieces[:budget]
    events = [("", 1)] + _group([(piece, 1) for piece in pieces], tokens_per_event)
    return Answer(events, finish, 1 + len(pieces) + closing, "".join(pieces), function["name"],
                  f"call_{seed:08x}", closing_tokens=closing)


def _fill_arguments(parameters: dict, rng: random.Random) -> dict:
    properties = parameters.get("properties") or {}
    arguments = {}
    for name in parameters.get("required") or ():
        arguments[name] = _sample_value(properties.get(name) or {}, rng)
    return arguments


def _sample_value(schema: dict, rng: random.Random):
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return rng.randint(1, 9)
    if kind == "number":
        return rng.randint(1, 90) / 10
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_sample_value(schema.get("items") or {}, rng)]
    if kind == "object":
        return _fill_arguments(schema, rng)
    return f"{rng.choice(WORDS)} {rng.choice(WORDS)}"
