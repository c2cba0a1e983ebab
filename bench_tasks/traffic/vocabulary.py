"""Words that are one token each on the server under test: texts of an exact token count without counting them.

Counting every synthesized prompt through the server's tokenizer would cost a request per prompt (a
million of them for a production trace), and a client-side tokenizer may not be the server's. So the
server is asked once per run, through the same count the prompt phases use (``tokens.token_counter``:
the engine's /tokenize with the chat template applied, or a probe's ``usage.prompt_tokens``):

1. a one-message prompt with empty content: the chat template's own tokens (``empty_tokens``), and one
   holding only the opener, ``"Text:"`` (``opener_tokens`` more); every synthesized text opens with it,
   so that its first word has a space before it even where a template trims the content;
2. common English words in groups, each group after the opener: a group of n words adding exactly n
   tokens is n words of one token each (no word is less than a token); a group that adds more is split
   in halves until the words of more than one token are left out;
3. two checks that no two words merge into one token: every ordered pair of the chosen words once (a
   de Bruijn sequence of them, V² words in one count), and every word right after the opener and right
   before the template's closing tokens (V user messages in one conversation, against the same
   conversation with the opener alone).

A text of the opener and n of these words is then ``opener_tokens + n`` tokens, and a prompt of one
such user message ``empty_tokens + opener_tokens + n``; ``check_counts`` holds a sample of real
prompts to that before anything is sent. Where the server has no tokenize endpoint, the probe's count
is exact only up to the few tokens its own marker adds (``tokens._probe_count``).

Which words a text holds is a pure function of (a per-invocation mark, a key, the number of words, the
word list): the same key gives the same words within a run (so an engine's prefix cache sees shared
text where a trace says it is shared), another mark gives other words from the first one on.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from functools import cached_property
from operator import itemgetter

from bench_tasks.prompt import CountTokens

OPENER = "Text:"
WANT_WORDS = 64  # enough: an unrelated text's first k words match by chance with probability 64^-k
LEAST_WORDS = 16
GROUP_WORDS = 16
# Common English words, most frequent first; most are one token after a space on any BPE or SentencePiece
# vocabulary of a real model (and 146 of these 158 are on the tests' tiny byte-level BPE of 4096 tokens).
CANDIDATES = tuple("""
the of and to in a is that for it as with was on be by at this are or from an not but have all which one you
they their were there has more can will if would about no so what when out up into who other than them these
its only some could may time also any new two use first like then such under each work program license
software code source terms must without copy version free see same make how well where after most between
over through part because many those right every while being used way both made own given might before should
need long set still end find here order public general following however within whether including others
another again three place state case number point group system data file line text read write word world year
day hand high small large great good old last next early young important few
""".split())


class TokenizerError(Exception):
    """This server's tokenizer does not allow texts of an exact length from common words; the message says why."""


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]  # each one token after a space, and no two merging, on this server
    opener: str  # what every synthesized text opens with
    empty_tokens: int  # a one-message prompt with empty content: the chat template's own tokens
    opener_tokens: int  # what the opener adds to it

    @property
    def overhead_tokens(self) -> int:
        """A one-user-message prompt of opener and n words is ``overhead_tokens + n`` tokens."""
        return self.empty_tokens + self.opener_tokens

    def draw(self, mark: str, key: str, n: int) -> bytes:
        """``n`` words as a byte each (``text``, ``spaced`` read them), the same for the same (mark, key, n):
        another mark gives others from the first word on."""
        return random.Random(f"{mark}\x1f{key}\x1f{n}").randbytes(n)

    def spaced(self, drawn: bytes) -> str:
        """The words ``drawn`` stands for, each with its space before it: one token each."""
        if len(drawn) < 2:  # itemgetter of one index gives the item, not a tuple of it
            return "".join(" " + self._table[byte] for byte in drawn)
        # A byte per word through a 256-word table, picked in C: 2,000 prompts of a real trace (a dozen
        # blocks of 512 words each) took 2.1 s so, 8.9 s with random.choices over the words.
        return " " + " ".join(itemgetter(*drawn)(self._table))

    def text(self, drawn: bytes) -> str:
        """The opener and the words ``drawn`` stands for: ``opener_tokens + len(drawn)`` tokens."""
        return self.opener + self.spaced(drawn)

    @cached_property
    def _table(self) -> tuple[str, ...]:
        return tuple(self.words[i * len(self.words) // 256] for i in range(256))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Vocabulary:
        return cls(**{**data, "words": tuple(data["words"])})


def _with_spaces(words: list[str]) -> str:
    """Each word with its space before it."""
    return " " + " ".join(words) if words else ""


def measure(count_tokens: CountTokens, candidates: tuple[str, ...] = CANDIDATES, want: int = WANT_WORDS,
            opener: str = OPENER) -> Vocabulary:
    """The words of ``candidates`` that are one token each on the server ``count_tokens`` asks (up to
    ``want`` of them), checked not to merge; TokenizerError when fewer than LEAST_WORDS are."""
    def count(content: str) -> int:
        return count_tokens([{"role": "user", "content": content}])

    empty = count("")
    base = count(opener)

    def all_single(group: list[str]) -> bool:
        return count(opener + _with_spaces(group)) - base == len(group)

    words: list[str] = []
    for start in range(0, len(candidates), GROUP_WORDS):
        if len(words) >= want:
            break
        words += _singles(list(candidates[start:start + GROUP_WORDS]), all_single)
    words = words[:want]
    if len(words) < LEAST_WORDS:
        raise TokenizerError(f"only {len(words)} of {len(candidates)} common English words are one token each on "
                             f"this server's tokenizer (at least {LEAST_WORDS} are needed): prompts cannot be made "
                             "to an exact token count here")
    _check_pairs(words, opener, base, count)
    _check_edges(words, opener, count_tokens)
    return Vocabulary(tuple(words), opener, empty, base - empty)


def _singles(group: list[str], all_single) -> list[str]:
    """The words of ``group`` that are one token each, by halving the groups that are not."""
    if all_single(group):
        return group
    if len(group) == 1:
        return []
    middle = len(group) // 2
    return _singles(group[:middle], all_single) + _singles(group[middle:], all_single)


def _check_pairs(words: list[str], opener: str, base: int, count) -> None:
    sequence = [words[i] for i in de_bruijn_pairs(len(words))]
    found = count(opener + _with_spaces(sequence)) - base
    if found != len(sequence):
        raise TokenizerError(f"every pair of {len(words)} one-token words, {len(sequence)} words in all, made "
                             f"{found} tokens on this server's tokenizer: some words merge across their spaces, "
                             "so prompts cannot be made to an exact token count here")


def _check_edges(words: list[str], opener: str, count_tokens: CountTokens) -> None:
    def conversation(contents: list[str]) -> list[dict]:
        messages = []
        for content in contents:
            messages += [{"role": "user", "content": content}, {"role": "assistant", "content": "Yes."}]
        return messages[:-1]

    found = count_tokens(conversation([f"{opener} {word}" for word in words])) \
        - count_tokens(conversation([opener] * len(words)))
    if found != len(words):
        raise TokenizerError(f"{len(words)} one-token words, each alone after {opener!r}, made {found} tokens on "
                             "this server: a word merges with the opener or the chat template, so prompts cannot "
                             "be made to an exact token count here")


def de_bruijn_pairs(k: int) -> list[int]:
    """0..k-1 in an order holding every ordered pair (a, b) once as neighbours: k² + 1 symbols."""
    sequence: list[int] = []
    word = [0, 0, 0]

    def extend(t: int, p: int) -> None:  # the FKM algorithm for the de Bruijn sequence B(k, 2)
        if t > 2:
            if 2 % p == 0:
                sequence.extend(word[1:p + 1])
            return
        word[t] = word[t - p]
        extend(t + 1, p)
        for symbol in range(word[t - p] + 1, k):
            word[t] = symbol
            extend(t + 1, t)

    extend(1, 1)
    return sequence + sequence[:1]  # cyclic: the last pair wraps round to the first symbol


def check_counts(count_tokens: CountTokens, samples: list[tuple[list[dict], int, str]]) -> None:
    """Each (messages, tokens wanted, source) counted by the server; TokenizerError naming those that differ."""
    wrong = []
    for messages, wanted, source in samples:
        found = count_tokens(messages)
        if found != wanted:
            wrong.append(f"{source}: {found} tokens instead of {wanted}")
    if wrong:
        raise TokenizerError("synthesized prompts do not count what they were made to on this server's tokenizer: "
                             + "; ".join(wrong))
