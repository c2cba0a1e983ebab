"""Mooncake traces: checked in one pass, replayed on their timestamps with prompts made to their lengths.

The format, as kvcache-ai/Mooncake documents it (FAST25-release/README.md): JSON lines of
``{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}``, the
timestamp relative to the trace's start in milliseconds, ``hash_ids`` the prompt's blocks of 512
tokens (``--block-tokens``), the last one partial: two requests with the same first k ids share their
first k blocks (a hash id names a block with everything before it). The file holds no text.

A request's prompt is synthesized (``TracePrompts``) to exactly its ``input_length`` tokens of the
server's tokenizer, chat template included, from the one-token words of a ``Vocabulary``: each
block's words are a pure function of (the invocation's mark, its hash id, the block size, the words),
so requests sharing a hash id share that block's text exactly, and nothing is shared with an earlier
invocation. The trace's own reuse (``SharedBlocks``, ``reuse``) is counted from the hash ids alone:
what a perfect prefix cache could have served, for the report to set beside what the engine says it did.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from bench_tasks.prompt import CountTokens
from bench_tasks.traffic.items import (Problem, Problems, TrafficError, positive_whole, read_items, short,
                                       unknown_fields)
from bench_tasks.traffic.vocabulary import Vocabulary, check_counts

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_NUMBER = (int, float)
BLOCK_TOKENS = 512  # Mooncake's block: FAST25-release/README.md, "The block size is 512 tokens"
BITMAP_IDS = 1 << 28  # hash ids below this are remembered in a bitmap (32 MiB at most), the others in a set


@dataclass(frozen=True, slots=True)
class TraceRequest:
    source: str  # file:line
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    due_s: float  # when to send it: seconds after the trace's first request, divided by the speed
    shared_blocks: int  # its first blocks an earlier request of the trace holds too
    shared_tokens: int  # their tokens: what a prefix cache could serve (at most input_length)


@dataclass(frozen=True)
class TraceSummary:
    requests: int
    first_timestamp_ms: float
    span_s: float  # from the first request's timestamp to the last one's
    input_tokens: int
    output_tokens: int
    shortest: tuple[int, int]  # (input_length, line) of the shortest prompt
    longest: tuple[int, int]


@dataclass
class TraceReuse:
    """The trace's own reuse, from its hash ids: what a prefix cache holding every earlier request could serve."""
    requests: int = 0
    blocks: int = 0
    shared_blocks: int = 0
    input_tokens: int = 0
    shared_tokens: int = 0

    def add(self, request: TraceRequest) -> None:
        self.requests += 1
        self.blocks += len(request.hash_ids)
        self.shared_blocks += request.shared_blocks
        self.input_tokens += request.input_length
        self.shared_tokens += request.shared_tokens

    @property
    def shared_block_share(self) -> float | None:
        """Of all the requests' blocks, the share an earlier request held."""
        return self.shared_blocks / self.blocks if self.blocks else None

    @property
    def shared_token_share(self) -> float | None:
        """Of all input tokens, the share a prefix cache holding every earlier request could serve."""
        return self.shared_tokens / self.input_tokens if self.input_tokens else None


def reuse(requests: Iterable[TraceRequest]) -> TraceReuse:
    """The trace's own reuse over ``requests`` (all of a trace's, or those a run sent)."""
    total = TraceReuse()
    for request in requests:
        total.add(request)
    return total


class SharedBlocks:
    """The hash ids earlier requests held; per request, how many of its first blocks they held.

    A Mooncake trace numbers its hash ids as they first appear, from 0 (the FAST'25 conversation trace:
    182,790 of them for 12,031 requests; a million lines, some 15 million): while a trace does, the ids
    held are a range, and a request's count takes a few list operations in C. Otherwise they go to a
    bitmap, 2 MiB for 15 million ids where a set of ints would take a gigabyte (ids from BITMAP_IDS on:
    a set).
    """

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._low = self._next = None  # while the ids held are range(_low, _next)
        self._bits = bytearray()
        self._others: set[int] = set()

    def add(self, hash_ids: list[int], input_length: int) -> tuple[int, int]:
        """(shared blocks, shared tokens) of a request, which then counts as held."""
        if not hash_ids:
            return 0, 0
        shared = self._add_in_order(hash_ids)
        if shared is None:
            shared = self._add_any(hash_ids)
        return shared, min(shared * self.block_tokens, input_length)

    def _add_in_order(self, hash_ids: list[int]) -> int | None:
        """Its shared blocks if the ids held stay a range; None (and the bitmap takes over) otherwise."""
        if self._low is None and self._next is None:  # the first request
            if hash_ids == list(range(hash_ids[0], hash_ids[0] + len(hash_ids))):
                self._low, self._next = hash_ids[0], hash_ids[0] + len(hash_ids)
                return 0
            self._next = 0  # not in order from the start
            return None
        if self._low is None:
            return None
        low, new = self._low, self._next
        shared = hash_ids.index(new) if new in hash_ids else len(hash_ids)
        if (shared and (min(hash_ids[:shared]) < low or max(hash_ids[:shared]) >= new)) or \
                hash_ids[shared:] != list(range(new, new + len(hash_ids) - shared)):
            self._to_bitmap()
            return None
        self._next = new + len(hash_ids) - shared
        return shared

    def _to_bitmap(self) -> None:
        low, new = self._low, self._next
        self._low = None
        if new > low:
            self._grow(min(new, BITMAP_IDS) - 1)
            for block in range(low, min(new, BITMAP_IDS)):
                self._bits[block >> 3] |= 1 << (block & 7)
            self._others.update(range(max(low, BITMAP_IDS), new))

    def _grow(self, top: int) -> None:
        bits = self._bits
        if (top >> 3) >= len(bits):
            bits.extend(bytes(max(len(bits), (top >> 3) + 1 - len(bits))))  # doubles: a million lines, 25 times

    def _add_any(self, hash_ids: list[int]) -> int:
        top = max(hash_ids)
        if top >= BITMAP_IDS:
            shared = 0
            for block in hash_ids:
                if not self._held(block):
                    break
                shared += 1
            for block in hash_ids[shared:]:
                self._others.add(block) if block >= BITMAP_IDS else self._hold(block)
            return shared
        self._grow(top)
        bits, shared = self._bits, 0
        for block in hash_ids:  # the bitmap's own loops: kept bare
            if not bits[block >> 3] & (1 << (block & 7)):
                break
            shared += 1
        for block in hash_ids[shared:]:
            bits[block >> 3] |= 1 << (block & 7)
        return shared

    def _hold(self, block: int) -> None:
        self._grow(block)
        self._bits[block >> 3] |= 1 << (block & 7)

    def _held(self, block: int) -> bool:
        if block >= BITMAP_IDS:
            return block in self._others
        return (block >> 3) < len(self._bits) and bool(self._bits[block >> 3] & (1 << (block & 7)))


class Trace:
    """A Mooncake trace, checked whole by ``open`` (TrafficError: every problem, by line), then read
    again, request by request, by ``requests()``."""

    def __init__(self, path: str, block_tokens: int, summary: TraceSummary) -> None:
        self.path, self.block_tokens, self.summary = path, block_tokens, summary

    @classmethod
    def open(cls, path: str, block_tokens: int = BLOCK_TOKENS, min_input_tokens: int = 1) -> Trace:
        """``min_input_tokens``: the shortest prompt this server can be sent (a synthesized prompt holds
        the chat template's tokens and the opener: ``Vocabulary.overhead_tokens + 1``)."""
        path = str(path)
        if type(block_tokens) is not int or block_tokens < 1:
            raise ValueError(f"--block-tokens must be a whole number of at least 1, got {block_tokens!r}")
        problems = Problems(path)
        count = input_tokens = output_tokens = 0
        first, last, last_line = None, 0.0, 0
        shortest = longest = (0, 0)
        # One pass of a million lines must take seconds: the loop holds only what the summary needs (the
        # trace's reuse is counted as it is replayed, TraceRequest.shared_tokens).
        for line, (timestamp, input_length, output_length, _) in _lines(path, problems, block_tokens):
            if timestamp < last:
                problems.add(line, _backwards(timestamp, last, last_line))
                continue
            if input_length < min_input_tokens:
                problems.add(line, f"input_length {input_length} is shorter than this server's chat template and "
                                   f"the prompt's opener ({min_input_tokens - 1} tokens): no prompt can be that short")
            if first is None:
                first, shortest = timestamp, (input_length, line)
            last, last_line = timestamp, line
            count += 1
            input_tokens += input_length
            output_tokens += output_length
            if input_length < shortest[0]:
                shortest = (input_length, line)
            if input_length > longest[0]:
                longest = (input_length, line)
        problems.raise_any()
        if not count:
            raise TrafficError(path, [f"{path}: there is no request in it"])
        summary = TraceSummary(count, first, (last - first) / 1000, input_tokens, output_tokens, shortest, longest)
        return cls(path, block_tokens, summary)

    def requests(self, speed: float = 1.0) -> Iterator[TraceRequest]:
        """The requests in order, each due ``(timestamp - first timestamp) / 1000 / speed`` seconds after
        the replay starts; TrafficError if the file changed since ``open``."""
        if type(speed) not in (int, float) or not math.isfinite(speed) or speed <= 0:
            raise ValueError(f"--speed must be a number above 0, got {speed!r}")
        problems = Problems(self.path, after="the file changed after it was checked")
        shared = SharedBlocks(self.block_tokens)
        first = last = self.summary.first_timestamp_ms
        count, last_line = 0, 0
        for line, (timestamp, input_length, output_length, hash_ids) in _lines(self.path, problems,
                                                                             self.block_tokens):
            if problems.total:
                break
            if timestamp < last:
                problems.add(line, _backwards(timestamp, last, last_line))
                break
            last, last_line, count = timestamp, line, count + 1
            blocks, tokens = shared.add(hash_ids, input_length)
            yield TraceRequest(f"{self.path}:{line}", timestamp, input_length, output_length, tuple(hash_ids),
                               (timestamp - first) / 1000 / speed, blocks, tokens)
        if not problems.total and count != self.summary.requests:
            problems.add(None, f"it holds {count} requests, not the {self.summary.requests} it held")
        problems.raise_any()


def _backwards(timestamp: float, last: float, last_line: int) -> str:
    return (f"timestamp {_number(timestamp)} goes back from {_number(last)} (line {last_line}): a trace lists its "
            "requests in the order they came")


def _lines(path: str, problems: Problems, block_tokens: int) -> Iterator[tuple[int, tuple]]:
    """(line, (timestamp, input_length, output_length, hash_ids)) of each good line; the others to ``problems``."""
    for item in read_items(path):
        if item.error:
            problems.add(item.line, item.error)
            continue
        try:
            yield item.line, _fields(item.value, block_tokens)
        except Problem as problem:
            problems.add(item.line, str(problem))


def _fields(obj, block_tokens: int) -> tuple:
    """(timestamp, input_length, output_length, hash_ids) of a line, or the Problem with it. A million of
    these make a trace's check: each test is the cheapest that holds (timed on a 2-core machine)."""
    try:
        if type(obj) is not dict or len(obj) != 4:
            raise KeyError
        timestamp, input_length, output_length, hash_ids = \
            obj["timestamp"], obj["input_length"], obj["output_length"], obj["hash_ids"]
    except KeyError:
        if type(obj) is not dict:
            raise Problem(f"not a JSON object but {type(obj).__name__}") from None
        unknown_fields(obj, FIELDS, "a Mooncake request has")
        raise Problem(f"no {' and no '.join(f for f in FIELDS if f not in obj)}") from None
    if type(timestamp) not in _NUMBER or not 0 <= timestamp < math.inf:
        raise Problem(f"timestamp must be a number of milliseconds from 0 on, not {short(timestamp)}")
    if type(input_length) is not int or input_length < 1:
        positive_whole(input_length, "input_length")
    if type(output_length) is not int or output_length < 1:
        positive_whole(output_length, "output_length")
    try:  # one C call: a list of whole numbers from 0 on (JSON's true and false pass, as 1 and 0: harmless)
        array("Q", hash_ids)
    except (TypeError, OverflowError):
        raise Problem(f"hash_ids must be a list of whole numbers from 0 on, not {short(hash_ids)}") from None
    if len(hash_ids) != -(-input_length // block_tokens):  # (JSON gives no other iterable array() takes)
        raise Problem(f"{len(hash_ids)} hash ids, but input_length {input_length} makes "
                      f"{-(-input_length // block_tokens)} blocks of {block_tokens} tokens (--block-tokens)")
    return timestamp, input_length, output_length, hash_ids


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


class TracePrompts:
    """Chat messages of exactly a trace request's ``input_length`` tokens on the server a Vocabulary was
    measured on, blocks of the same hash id holding the same words.

    The prompt is one user message: the opener, then words. Token positions count from the prompt's
    start, the chat template's own tokens and the opener taken as the first ones (``overhead_tokens``):
    the word at position p is word ``p % block_tokens`` of the block ``hash_ids[p // block_tokens]``.
    Requests whose first k hash ids are the same thus send the same first ``k * block_tokens - T``
    tokens, T being the template's closing tokens after the content (a handful), which a one-message
    prompt ends with (so it cannot share them).
    """

    def __init__(self, vocabulary: Vocabulary, mark: str, block_tokens: int = BLOCK_TOKENS,
                 cached_blocks: int = 8192) -> None:
        self.vocabulary, self.mark, self.block_tokens = vocabulary, mark, block_tokens
        self._block_words = lru_cache(maxsize=cached_blocks)(self._draw)  # a byte a word: 5 MiB at most

    def _draw(self, hash_id: int) -> bytes:
        return self.vocabulary.draw(self.mark, f"block {hash_id}", self.block_tokens)

    def content(self, input_length: int, hash_ids) -> str:
        block, start = self.block_tokens, self.vocabulary.overhead_tokens
        if input_length <= start:
            raise ValueError(f"a prompt of {input_length} tokens is not longer than this server's chat template "
                             f"and opener ({start} tokens)")
        parts = [self.vocabulary.opener]
        for index in range(start // block, (input_length - 1) // block + 1):
            begins = index * block  # the block's first position
            low, high = max(start, begins) - begins, min(input_length, begins + block) - begins
            parts.append(self.vocabulary.spaced(self._block_words(hash_ids[index])[low:high]))
        return "".join(parts)

    def messages(self, request: TraceRequest) -> list[dict]:
        return [{"role": "user", "content": self.content(request.input_length, request.hash_ids)}]

    def check(self, count_tokens: CountTokens, requests: Iterable[TraceRequest]) -> None:
        """Count ``requests``' prompts on the server (a few, before the replay): TokenizerError if any is
        not exactly its input_length."""
        check_counts(count_tokens, [(self.messages(r), r.input_length, r.source) for r in requests])
