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
"""

from __future__ import annotations

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


@dataclass
class Question:
    """What the answer depends on, taken from a request."""

    prompt_text: str
    last_user_text: str
    last_role: str
    tools: list | None
    max_tokens: int
    ignore_eos: bool


def plan_answer(question: Question, tokens_per_event: int, length_range: tuple[int, int]) -> Answer:
    seed = zlib.crc32(question.prompt_text.encode("utf-8", "surrogatepass"))
    rng = random.Random(seed)
    if question.tools and question.last_role == "user":
        return _tool_answer(question, rng, seed, tokens_per_event)
    low, high = length_range
    needle = _needle_pieces(question)
    natural = len(needle) if needle else low + seed % (high - low + 1)
    # Like vLLM: ignore_eos runs to max_tokens and reports "length".
    target = question.max_tokens if question.ignore_eos else min(natural, question.max_tokens)
    finish = "stop" if natural <= question.max_tokens and not question.ignore_eos else "length"
    pieces = (needle + _word_pieces(rng, target - len(needle), after=len(needle)))[:target]
    return Answer(_group(pieces, tokens_per_event), finish, len(pieces), "".join(pieces))


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


def _group(pieces: list[str], tokens_per_event: int) -> list[tuple[str, int]]:
    if tokens_per_event == 1:
        return [(piece, 1) for piece in pieces]
    return [("".join(pieces[i:i + tokens_per_event]), len(pieces[i:i + tokens_per_event]))
            for i in range(0, len(pieces), tokens_per_event)]


def _tool_answer(question: Question, rng: random.Random, seed: int, tokens_per_event: int) -> Answer:
    functions = [tool.get("function") or {} for tool in question.tools if isinstance(tool, dict)]
    functions = [f for f in functions if f.get("name")] or [{"name": "tool"}]
    named = [f for f in functions if f["name"] in question.last_user_text]
    function = named[0] if named else functions[seed % len(functions)]
    arguments = json.dumps(_fill_arguments(function.get("parameters") or {}, rng))
    budget = max(question.max_tokens - 1, 0)  # the header event is the name's token
    pieces = split_pieces(arguments)
    finish = "tool_calls" if len(pieces) <= budget else "length"
    pieces = pieces[:budget]
    events = [("", 1)] + _group(pieces, tokens_per_event)
    return Answer(events, finish, 1 + len(pieces), "".join(pieces), function["name"], f"call_{seed:08x}")


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
