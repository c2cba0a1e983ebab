"""Prompt files and ShareGPT conversations: checked whole in one pass, then read again one item at a time.

A file of prompts holds one request per item: ``{"prompt": "..."}`` (sent as one user message) or
``{"messages": [...]}`` (OpenAI chat messages, sent as they are), each with an optional
``max_tokens``: the file's answer length, to be sent with ``ignore_eos`` where the engine takes it, so
that the answers are as long as the file says. A ShareGPT file holds conversations,
``{"conversations": [{"from": "human" | "gpt" | "system", "value": "..."}]}`` (and an optional
``id``), as a JSON array or one a line; a conversation is replayed turn by turn (``Conversation.replay``).

Which of the two a file is, its first item says; every later item must be of the same kind. A field
this reader does not know is a problem, not something quietly dropped: a misspelt ``max_token`` would
otherwise change what is measured without a word.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from bench_tasks.traffic.items import (Problem, Problems, TrafficError, positive_whole, read_items, short,
                                       unknown_fields)

PROMPT_FIELDS = ("prompt", "messages", "max_tokens")
CONVERSATION_FIELDS = ("id", "conversations")
TURN_FIELDS = ("from", "value")
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool")
TRACE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
PROMPTS, CONVERSATIONS = "prompts", "conversations"


@dataclass(frozen=True, slots=True)
class PromptRequest:
    source: str  # file:line
    messages: list[dict]
    max_tokens: int | None = None  # the file's answer length (send with ignore_eos); None: the run's own


@dataclass(frozen=True, slots=True)
class Turn:
    question: str
    answer: str | None  # the file's answer to it (the gpt turn after it), None when the file has none


@dataclass(frozen=True, slots=True)
class Conversation:
    source: str  # file:line where the conversation starts
    turns: tuple[Turn, ...]
    system: str | None = None

    def replay(self, file_answers: bool = False) -> ConversationReplay:
        return ConversationReplay(self, file_answers)


class ConversationReplay:
    """One conversation sent turn by turn, the whole history each time, as a chat page does.

    The user's code asks ``next_messages()`` (None when the conversation is over), sends them, and
    gives the answer back with ``answered(text)``. The history then holds the model's own answer, or
    with ``file_answers`` the file's (so that every run sends the same prompts, whatever the model
    said). A failed request (``answered(None)``) ends a conversation of the model's own answers, which
    cannot go on without one; with the file's answers it goes on.
    """

    def __init__(self, conversation: Conversation, file_answers: bool) -> None:
        self.conversation, self.file_answers = conversation, file_answers
        self.messages: list[dict] = [{"role": "system", "content": conversation.system}] \
            if conversation.system is not None else []
        self.turn = 0  # turns sent so far; the turn being answered, from 1
        self._waiting = False
        self._over = False

    @property
    def finished(self) -> bool:
        """No turn left to send: every one answered, or the conversation ended by a failed one."""
        return not self._waiting and (self._over or self.turn == len(self.conversation.turns))

    def next_messages(self) -> list[dict] | None:
        if self._waiting:
            raise RuntimeError("answered() must give the answer to the turn sent before the next one is asked")
        if self._over or self.turn == len(self.conversation.turns):
            return None
        self.messages.append({"role": "user", "content": self.conversation.turns[self.turn].question})
        self.turn += 1
        self._waiting = True
        return list(self.messages)

    def answered(self, text: str | None) -> None:
        """The model's answer to the turn just sent; None when its request failed."""
        if not self._waiting:
            raise RuntimeError("answered() without a turn sent")
        self._waiting = False
        answer = self.conversation.turns[self.turn - 1].answer if self.file_answers else text
        if text is None and not self.file_answers:
            self._over = True
        elif answer is not None:
            self.messages.append({"role": "assistant", "content": answer})


class Dataset:
    """A prompt file or a ShareGPT file, checked whole by ``open`` (TrafficError: every problem, by
    line), then read again, one item at a time, by ``items()`` as often as a run needs."""

    def __init__(self, path: str, kind: str, items: int, requests: int) -> None:
        self.path, self.kind = path, kind
        self.item_count = items  # prompts, or conversations
        self.request_count = requests  # prompts, or the conversations' user turns

    @classmethod
    def open(cls, path: str) -> Dataset:
        path = str(path)
        problems, kind, items, requests = Problems(path), None, 0, 0
        for line, obj in _objects(path, problems):
            try:
                kind = kind or _kind(obj)
                parsed = _PARSERS[kind](obj, f"{path}:{line}")
            except Problem as problem:
                problems.add(line, _with_hint(str(problem), obj, kind))
                if kind is None:
                    break  # what the file is, nothing tells: every line would say the same
                continue
            items += 1
            requests += len(parsed.turns) if kind == CONVERSATIONS else 1
        problems.raise_any()
        if not items:
            raise TrafficError(path, [f"{path}: there is no request in it"])
        return cls(path, kind, items, requests)

    def items(self) -> Iterator[PromptRequest | Conversation]:
        """The file's prompts or conversations, in order; TrafficError if the file changed since ``open``."""
        problems = Problems(self.path, after="the file changed after it was checked")
        for line, obj in _objects(self.path, problems):
            if problems.total:
                break
            try:
                yield _PARSERS[self.kind](obj, f"{self.path}:{line}")
            except Problem as problem:
                problems.add(line, str(problem))
                break
        problems.raise_any()


class Rereading:
    """A Dataset read in order, and again from its start each time it runs out: ``passes`` says how many times
    its reading began (1 on the first item; the open loop's parts and a class's lessons read a file so)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.passes = 0
        self._items: Iterator[tuple[int, PromptRequest | Conversation]] = iter(())

    def next(self) -> tuple[int, PromptRequest | Conversation]:
        """The next item and its place in the file (from 0)."""
        taken = next(self._items, None)
        if taken is None:
            self.passes += 1
            self._items = enumerate(self.dataset.items())
            taken = next(self._items)
        return taken


def _objects(path: str, problems: Problems) -> Iterator[tuple[int, dict]]:
    """The file's JSON objects with their lines; anything else goes to ``problems``."""
    for item in read_items(path):
        if item.error:
            problems.add(item.line, item.error)
        elif not isinstance(item.value, dict):
            problems.add(item.line, f"not a JSON object but {type(item.value).__name__} {short(item.value)}")
        else:
            yield item.line, item.value


def _kind(obj: dict) -> str:
    """What the first object says the file is."""
    kind = _own_kind(obj)
    if kind:
        return kind
    if obj.keys() & set(TRACE_FIELDS):
        raise Problem("a Mooncake trace line (timestamp, input_length, hash_ids): a trace is replayed on its "
                      "timestamps with prompts made to its lengths, not sent as a file of prompts")
    raise Problem(f'neither a prompt ({{"prompt": ...}} or {{"messages": [...]}}) nor a ShareGPT conversation '
                  f'({{"conversations": [...]}}); its fields: {", ".join(map(str, obj)) or "none"}')


def _own_kind(obj: dict) -> str | None:
    if "conversations" in obj:
        return CONVERSATIONS
    if "prompt" in obj or "messages" in obj:
        return PROMPTS
    return None


def _with_hint(problem: str, obj: dict, kind: str | None) -> str:
    own = _own_kind(obj)
    if kind and own and own != kind:
        return f"{problem}; this line is one of {own}, but the file's first item made it a file of {kind}"
    return problem


def _prompt(obj: dict, source: str) -> PromptRequest:
    unknown_fields(obj, PROMPT_FIELDS)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None:
        positive_whole(max_tokens, "max_tokens")
    if ("prompt" in obj) == ("messages" in obj):
        raise Problem('give either "prompt" or "messages", not both')
    if "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str):
            raise Problem(f'"prompt" must be text, not {type(prompt).__name__}')
        if not prompt.strip():
            raise Problem("empty prompt")
        return PromptRequest(source, [{"role": "user", "content": prompt}], max_tokens)
    return PromptRequest(source, _messages(obj["messages"]), max_tokens)


def _messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise Problem('"messages" must be a non-empty list of {"role": ..., "content": ...} objects')
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise Problem(f"message {number} is not an object")
        unknown_fields(message, MESSAGE_FIELDS, f"message {number} has")
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise Problem(f"message {number} has role {role!r}; a role is one of {', '.join(MESSAGE_ROLES)}")
        content = message.get("content")
        if content is None and not (role == "assistant" and message.get("tool_calls")):
            raise Problem(f"message {number} ({role}) has no content")
        if content is not None and not _is_text(content):
            raise Problem(f"message {number} ({role}): content must be text, or a list of text parts")
        if role == "user" and not _text_of(content).strip():
            raise Problem(f"message {number} (user) is empty")
    if not any(message["role"] == "user" for message in messages):
        raise Problem("no user message: nothing asks the model anything")
    return messages


def answer_limit(file_tokens: int | None, max_tokens: int, ignore_eos: bool) -> tuple[int, bool]:
    """(max_tokens, ignore_eos) of a request read from a file: the file's answer length, asked for with ignore_eos
    so that the answer is that long where the engine takes it; without one, the run's own."""
    return (file_tokens, True) if file_tokens is not None else (max_tokens, ignore_eos)


def prepended(message: dict, text: str) -> dict:
    """``message`` (a copy) with ``text`` before its content: text, or a first text part of a list of parts."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": text}, *content]}
    return {**message, "content": text + (content or "")}


def _is_text(content) -> bool:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) for part in content)


def _text_of(content) -> str:
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def _conversation(obj: dict, source: str) -> Conversation:
    unknown_fields(obj, CONVERSATION_FIELDS)
    turns = obj.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise Problem('"conversations" must be a non-empty list of {"from": ..., "value": ...} turns')
    system, pairs = None, []
    for number, turn in enumerate(turns, 1):
        role, value = _turn(turn, number)
        if role == "system":
            if number != 1:
                raise Problem(f"turn {number} is a system turn: only the first turn may be one")
            system = value
        elif role == "human":
            if pairs and pairs[-1][1] is None:
                raise Problem(f"turn {number} is from human after a human turn: turns alternate human, gpt")
            if not value.strip():
                raise Problem(f"turn {number} (human) is empty")
            pairs.append([value, None])
        elif not pairs:
            raise Problem(f"turn {number} is from gpt before any human turn: a conversation starts with a human turn")
        elif pairs[-1][1] is not None:
            raise Problem(f"turn {number} is from gpt after a gpt turn: turns alternate human, gpt")
        else:
            pairs[-1][1] = value
    if not pairs:
        raise Problem("no human turn: nothing asks the model anything")
    return Conversation(source, tuple(Turn(question, answer) for question, answer in pairs), system)


def _turn(turn, number: int) -> tuple[str, str]:
    if not isinstance(turn, dict):
        raise Problem(f"turn {number} is not an object")
    unknown_fields(turn, TURN_FIELDS, f"turn {number} has")
    role, value = turn.get("from"), turn.get("value")
    if role not in SHAREGPT_ROLES:
        raise Problem(f'turn {number} is from {role!r}; a turn is from "human", "gpt" or "system"')
    if not isinstance(value, str):
        raise Problem(f'turn {number}: "value" must be text, not {type(value).__name__}')
    return role, value


_PARSERS = {PROMPTS: _prompt, CONVERSATIONS: _conversation}
