"""A file of prompts or conversations sent by a run's users, one request at a time: ``DatasetFeed`` for the users
of ``run chat --dataset``, ``ArrivalFeed`` for the open loop's arrivals (``run rate``, ``sweep --dataset``).

The users of a process share one ``DatasetFeed``: each asks ``next(user)`` for its next request and gives
the answer back with ``answered(user, text)``. A prompt file's requests go out in the file's order, each
once; a ShareGPT conversation is held by the user that took it, turn after turn (the model's own answers
in its history, or with ``file_answers`` the file's), and a user whose conversation is over takes the
next one. ``limit`` (``--requests``) caps the requests sent; a conversation cut by it, or ended by a
failed turn, is not sent further. The run is over (``over``) when nothing is left to send and every
request sent was answered.

Every request opens with the run's mark and the code of its item and process (``run_mark.opening``: a
conversation's turns share their conversation's), as every invented prompt does, so that a file sent twice
is served afresh the second time (each Locust process of a distributed run sends the file on its own: its
copy is its own, never served from another's cache); with ``prefixes`` (``--prefix-tokens N --prefixes K``) each item's group prefix
comes before it, so that the items of a group share exactly those N tokens and nothing more. Pure: no
Locust, no network.

``ArrivalFeed``: the open loop's arrivals are due whatever the server does, so what each one sends is
asked for when it is due (``next(part)``), never held by a user. Every part of the run (a rate's window, its
settle and its drain; a flood of ``--rates auto``) reads the file from its first item, so that every rate's
window sends the same requests and rates differ only by the rate; a part that needs more requests than the
file holds reads it again from its start (a new pass). A conversation's next turn goes with the first
arrival after its last answer came back, the model's own answer in its history (``file_answers``: the
file's); an arrival that finds no conversation waiting for its next turn opens the part's next one. Each
text opens with a code naming its part, pass and item (and the process: each Locust process reads the file
on its own), so nothing the run sends twice is served from the first sending's cache; only the shared
prefixes are shared, across the whole run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from bench_tasks import cache_share, run_mark
from bench_tasks.traffic.dataset import (CONVERSATIONS, ConversationReplay, Dataset, PromptRequest, Rereading,
                                        prepended)
from bench_tasks.traffic.prefixes import SharedPrefixes

IDENTITY = "dataset"  # the code of item n is run_mark.code(mark, IDENTITY, n)


@dataclass(frozen=True)
class Ask:
    """One request of the file, ready to send."""

    item: int  # the file's item it comes from (from 0): its code and its prefix group
    source: str  # file:line
    messages: list[dict]
    max_tokens: int | None  # the file's answer length (sent with ignore_eos), None: the run's own
    turn: int | None = None  # a conversation's turn, from 1
    shared_tokens: int | None = None  # the tokens of its prefix an earlier request sent (None: no prefix)
    held: Held | None = None  # ArrivalFeed: the conversation it is a turn of

    @property
    def judge(self):
        """What a conversation's turn may share of its earlier turns (cache_share), or None for a single request."""
        return None if self.held is None else self.held.shares.judge


def opened(messages: list[dict], opening: str) -> list[dict]:
    """``messages`` with ``opening`` before the first one's content (the caller's list left as it was)."""
    return [prepended(messages[0], opening + " "), *messages[1:]]


class DatasetFeed:
    def __init__(self, dataset: Dataset, mark: str, limit: int | None = None, file_answers: bool = False,
                 prefixes: SharedPrefixes | None = None, process: int = 0) -> None:
        self.dataset, self.mark, self.limit = dataset, mark, limit
        self.file_answers, self.prefixes, self.process = file_answers, prefixes, process
        self._items = enumerate(dataset.items())
        self._exhausted = False
        self._held: dict[Hashable, tuple[int, ConversationReplay]] = {}  # user -> (item, its conversation)
        self.sent = 0
        self.in_flight = 0

    @property
    def conversations(self) -> bool:
        return self.dataset.kind == CONVERSATIONS

    def next(self, user: Hashable) -> Ask | None:
        """The user's next request; None when it has nothing more to send (the limit, or the file's end)."""
        if self.limit is not None and self.sent >= self.limit:
            self._held.pop(user, None)
            return None
        ask = self._next_turn(user) if self.conversations else self._next_prompt()
        if ask is not None:
            self.sent += 1
            self.in_flight += 1
        return ask

    def answered(self, user: Hashable, text: str | None) -> None:
        """The answer to the user's last request (None: it failed)."""
        self.in_flight -= 1
        held = self._held.get(user)
        if held is not None:
            held[1].answered(text)
            if held[1].finished:
                del self._held[user]

    @property
    def over(self) -> bool:
        """Nothing left to send, and every request sent answered."""
        left = self.limit is None or self.sent < self.limit
        return self.in_flight == 0 and (not left or (self._exhausted and not self._held))

    def _take(self) -> tuple[int, PromptRequest | object] | None:
        if self._exhausted:
            return None
        taken = next(self._items, None)
        self._exhausted = taken is None
        return taken

    def _next_prompt(self) -> Ask | None:
        taken = self._take()
        if taken is None:
            return None
        item, prompt = taken
        return self._ask(item, prompt.source, prompt.messages, prompt.max_tokens, None)

    def _next_turn(self, user: Hashable) -> Ask | None:
        while True:
            held = self._held.get(user)
            if held is None:
                taken = self._take()
                if taken is None:
                    return None
                held = self._held[user] = (taken[0], taken[1].replay(self.file_answers))
            item, replay = held
            messages = replay.next_messages()
            if messages is not None:
                return self._ask(item, replay.conversation.source, messages, None, replay.turn)
            del self._held[user]

    def _ask(self, item: int, source: str, messages: list[dict], max_tokens: int | None, turn: int | None) -> Ask:
        messages = opened(messages, run_mark.opening(self.mark, IDENTITY, self.process, item))
        shared = None
        if self.prefixes is not None:
            messages, shared = self.prefixes.sent(messages, item)  # a later turn resends what its first sent
        return Ask(item, source, messages, max_tokens, turn, shared)


@dataclass
class Held:
    """A conversation of an ArrivalFeed's part: its replay, and what its turns sent (for the cache check)."""

    part: str
    item: int
    opening: str
    replay: ConversationReplay
    shares: cache_share.Conversation


class _Part:
    """What one part of the open loop has read of the file (its place, its pass), its conversations waiting."""

    def __init__(self, dataset: Dataset) -> None:
        self.file = Rereading(dataset)
        self.ready: deque[Held] = deque()  # conversations whose last answer came back, the longest waiting first


class ArrivalFeed:
    def __init__(self, dataset: Dataset, mark: str, file_answers: bool = False,
                 prefixes: SharedPrefixes | None = None, process: int = 0) -> None:
        self.dataset, self.mark, self.file_answers = dataset, mark, file_answers
        self.prefixes, self.process = prefixes, process
        self._parts: dict[str, _Part] = {}

    def next(self, part: str) -> Ask:
        """What the arrival of ``part`` (its phase: ``rate-4``, ``settle-rate-4``, ``flood-2``) sends."""
        reading = self._parts.get(part)
        if reading is None:
            reading = self._parts[part] = _Part(self.dataset)
        if reading.ready:
            return self._turn(reading.ready.popleft())
        item, found = reading.file.next()  # at the file's end, read again: a new pass, with codes of its own
        opening = run_mark.opening(self.mark, IDENTITY, part, self.process, reading.file.passes, item)
        if self.dataset.kind == CONVERSATIONS:
            return self._turn(Held(part, item, opening, found.replay(self.file_answers), cache_share.Conversation()))
        return self._ask(item, found.source, opened(found.messages, opening), found.max_tokens, None)

    def answered(self, ask: Ask, text: str | None) -> None:
        """The answer to ``ask`` (None: it failed): a conversation's next turn may go with the next arrival."""
        held = ask.held
        if held is None:
            return
        held.replay.answered(text)
        if not held.replay.finished:
            self._parts[held.part].ready.append(held)

    def _turn(self, held: Held) -> Ask:
        messages = held.replay.next_messages()
        return self._ask(held.item, held.replay.conversation.source, opened(messages, held.opening), None,
                         held.replay.turn, held)

    def _ask(self, item: int, source: str, messages: list[dict], max_tokens: int | None, turn: int | None,
             held: Held | None = None) -> Ask:
        shared = None
        if self.prefixes is not None:
            messages, shared = self.prefixes.sent(messages, item)
        return Ask(item, source, messages, max_tokens, turn, shared, held)
