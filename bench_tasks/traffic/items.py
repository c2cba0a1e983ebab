"""A JSON file's items, one at a time, each with the line it starts on; and the error that lists a file's problems.

Two forms: JSON lines (one item a line; blank lines skipped), or one JSON array (a file whose first
character, after white space, is ``[``), read a chunk at a time and decoded item by item, so that a
file of any size costs one item and one chunk of memory. A line that is not JSON is an item with an
``error``, and the lines after it are read on; in an array a syntax error ends the reading (nothing
after it can be told apart), and says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import NamedTuple

import orjson

MAX_LISTED = 20  # problems listed in a TrafficError; the rest are counted
CHUNK_CHARS = 1 << 20
MAX_ITEM_CHARS = 64 << 20  # an array item longer than this is taken for a string that never ends
_WHITE = re.compile(r"[ \t\r\n]*")
# A decoding error this close to the end of what was read may be the chunk's cut, not the file's fault.
_CUT_MARGIN = 16


class TrafficError(Exception):
    """A file of traffic that cannot be sent as it is: its problems as ``file:line: what`` (the first
    MAX_LISTED of them; ``total`` counts them all). Raised before anything is sent."""

    def __init__(self, path: str, problems: list[str], total: int | None = None) -> None:
        self.path, self.problems = path, problems
        self.total = len(problems) if total is None else total
        super().__init__(self._message())

    def _message(self) -> str:
        if self.total == 1:
            return self.problems[0]
        lines = [f"{self.path} cannot be sent as it is ({self.total} problems):"]
        lines += [f"  {problem}" for problem in self.problems]
        if self.total > len(self.problems):
            lines.append(f"  ... and {self.total - len(self.problems)} more")
        return "\n".join(lines)


class Problems:
    """A file's problems as a pass finds them: the first MAX_LISTED kept, all counted."""

    def __init__(self, path: str, after: str = "") -> None:
        self.path, self.listed, self.total = path, [], 0
        self.after = f"; {after}" if after else ""  # said after each problem

    def add(self, line: int | None, what: str) -> None:
        self.total += 1
        if len(self.listed) < MAX_LISTED:
            where = f"{self.path}:{line}" if line else self.path
            self.listed.append(f"{where}: {what}{self.after}")

    def raise_any(self) -> None:
        if self.total:
            raise TrafficError(self.path, self.listed, self.total)


class Problem(Exception):
    """What is wrong with one item (its line is added by whoever reads it)."""


class Item(NamedTuple):  # a tuple: made a million times for a trace's check, a dataclass cost a third of it
    line: int
    value: object = None
    error: str = ""  # why the item is not JSON; value is None then


def read_items(path: str, chunk_chars: int = CHUNK_CHARS) -> Iterator[Item]:
    """The items of ``path``, JSON lines or one JSON array (by its first character); TrafficError when
    the file cannot be read at all (missing, a folder, empty)."""
    first = _first_character(path)
    if first == "[":
        yield from _array_items(path, chunk_chars)
    else:
        yield from _line_items(path)


def _first_character(path: str) -> str:
    try:
        with open(path, "rb") as file:
            while chunk := file.read(4096):
                text = chunk.lstrip(b" \t\r\n").removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
                if text:
                    return chr(text[0])
    except OSError as exc:
        raise TrafficError(path, [f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    raise TrafficError(path, [f"{path}: is empty: there is no request in it"])


def _line_items(path: str) -> Iterator[Item]:
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            if not raw.strip():
                continue
            try:
                yield Item(number, orjson.loads(raw))
            except orjson.JSONDecodeError as exc:
                yield Item(number, error=f"not JSON ({exc.msg} at column {exc.colno})")


def _array_items(path: str, chunk_chars: int) -> Iterator[Item]:
    with open(path, encoding="utf-8-sig") as file:
        text = _Text(file, chunk_chars)
        try:
            yield from text.array_items()
        except UnicodeDecodeError as exc:
            yield Item(text.line_at(text.pos), error=f"not UTF-8 text ({exc.reason})")


class _Text:
    """An array's text from ``pos`` on, a chunk at a time; lines counted as the reading goes."""

    def __init__(self, file, chunk_chars: int) -> None:
        self.file, self.chunk_chars = file, chunk_chars
        self.buf, self.pos, self.eof = "", 0, False
        self.line, self.counted = 1, 0  # the line number at buf[counted]

    def line_at(self, index: int) -> int:
        """The line of ``buf[index]`` (indices asked in increasing order)."""
        self.line += self.buf.count("\n", self.counted, index)
        self.counted = index
        return self.line

    def read_more(self, chars: int) -> None:
        more = self.file.read(chars)
        self.eof = not more
        self.buf += more

    def skip_white(self) -> bool:
        """Move past white space; False at the end of the file."""
        while True:
            self.pos = _WHITE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return True
            if self.eof:
                return False
            self._drop_read()
            self.read_more(self.chunk_chars)

    def _drop_read(self) -> None:
        """Forget what was read already (between items only)."""
        self.line_at(self.pos)
        self.buf, self.counted, self.pos = self.buf[self.pos:], 0, 0

    def array_items(self) -> Iterator[Item]:
        self.skip_white()
        self.pos += 1  # the "[" read_items saw
        first = True
        while True:
            if not self.skip_white():
                yield Item(self.line_at(self.pos), error="the array never closes (no ']' at the end of the file)")
                return
            char = self.buf[self.pos]
            if char == "]":
                self.pos += 1
                if self.skip_white():
                    yield Item(self.line_at(self.pos), error="text after the array's closing ']'")
                return
            if not first:
                if char != ",":
                    yield Item(self.line_at(self.pos), error=f"expected ',' or ']' after an item, found {char!r}")
                    return
                self.pos += 1
                if not self.skip_white():
                    continue  # reported as an array that never closes
            item = self._decode()
            yield item
            if item.error:
                return
            first = False
            if self.pos > self.chunk_chars:
                self._drop_read()

    def _decode(self) -> Item:
        start = self.pos
        while True:
            try:
                value, self.pos = _DECODER.raw_decode(self.buf, start)
                return Item(self.line_at(start), value)
            except json.JSONDecodeError as exc:
                if self.eof or not _maybe_cut(exc, len(self.buf)):
                    return Item(self.line_at(exc.pos), error=f"not JSON ({_said(exc.msg)})")
                if len(self.buf) - start > MAX_ITEM_CHARS:
                    return Item(self.line_at(start), error=f"an item longer than {MAX_ITEM_CHARS >> 20} MiB, or a "
                                                           f"string that never ends ({exc.msg})")
                self.read_more(max(self.chunk_chars, len(self.buf) - start))  # doubles: parsing again stays linear


_DECODER = json.JSONDecoder()


def _said(message: str) -> str:
    """The json module's message, without the "at" it would follow with a position (the line says where)."""
    return "a string that never ends" if message.startswith("Unterminated string") else message.removesuffix(" at")


def _maybe_cut(exc: json.JSONDecodeError, length: int) -> bool:
    """Could more text make this parse? A string still open, or an error at the very end of the text."""
    return exc.msg.startswith("Unterminated string") or exc.pos >= length - _CUT_MARGIN


def unknown_fields(obj: dict, known: tuple[str, ...], who: str = "") -> None:
    unknown = [key for key in obj if key not in known]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        raise Problem(f"{who + ' ' if who else ''}unknown field{'s' if len(unknown) > 1 else ''} {names} "
                      f"(known: {', '.join(known)})")


def positive_whole(value, name: str) -> int:
    """``value`` as a whole number of at least 1 (a bool is not one), else a Problem naming it."""
    if type(value) is not int:
        raise Problem(f"{name} must be a whole number, not {short(value)}")
    if value < 0:
        raise Problem(f"{name} {value} is negative")
    if value == 0:
        raise Problem(f"{name} is 0: it must be at least 1")
    return value


def short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
