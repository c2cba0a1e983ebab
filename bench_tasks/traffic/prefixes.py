"""``--prefix-tokens N --prefixes K``: requests in K groups, each group's opening with a prefix of exactly N tokens.

Request n (from 0) belongs to group ``n % K``; its first message's content opens with the group's
prefix, then a blank line, then what it held. A prefix is the opener and words of a Vocabulary, so it
is exactly N tokens of the server's tokenizer (the chat template's own tokens are not among them, and
requests share those whatever their group); its words are a pure function of (the invocation's mark,
the group, N, the words), so no prefix is served from an earlier invocation's cache, and a request
whose group an earlier one sent shares its prefix with it: what a prefix cache can buy.

What a request shares is judged by what was sent, in the order it was sent, in one rule for every
loop: the closed loop's users (whose n-th request may go before the (n-K)-th) and the open loop's
parts (each reads the file from its start, and its first requests share what an earlier part sent).
One SharedPrefixes per Locust process: each process counts what it sent (another process may have
sent a group's prefix first; the cache check allows every request its prefix whatever it claims).
"""

from __future__ import annotations

from functools import lru_cache

from bench_tasks.traffic.dataset import prepended
from bench_tasks.traffic.vocabulary import Vocabulary

SEPARATOR = "\n\n"


class SharedPrefixes:
    def __init__(self, vocabulary: Vocabulary, mark: str, prefix_tokens: int, groups: int) -> None:
        if type(groups) is not int or groups < 1:
            raise ValueError(f"--prefixes must be a whole number of at least 1, got {groups!r}")
        words = prefix_tokens - vocabulary.opener_tokens if type(prefix_tokens) is int else 0
        if words < 1:
            raise ValueError(f"--prefix-tokens must be more than {vocabulary.opener_tokens}, the tokens a prefix "
                             f"opens with on this server's tokenizer (got {prefix_tokens!r})")
        self.vocabulary, self.mark = vocabulary, mark
        self.prefix_tokens, self.groups, self._words = prefix_tokens, groups, words
        self.text = lru_cache(maxsize=64)(self._text)  # group -> its prefix
        self._sent: set[int] = set()  # the groups a request has been sent with

    def _text(self, group: int) -> str:
        return self.vocabulary.text(self.vocabulary.draw(self.mark, f"prefix {group}", self._words))

    def group(self, n: int) -> int:
        return n % self.groups

    def sent(self, messages: list[dict], n: int) -> tuple[list[dict], int]:
        """Request n's messages opened by its group's prefix, to be sent now, and the prefix tokens it shares
        with an earlier request: all of them when a request of its group was sent before it, else none."""
        group = self.group(n)
        shared = self.prefix_tokens if group in self._sent else 0
        self._sent.add(group)
        return self.messages(messages, n), shared

    def messages(self, messages: list[dict], n: int) -> list[dict]:
        """``messages`` with request n's group prefix opening the first one's content."""
        return [prepended(messages[0], self.text(self.group(n)) + SEPARATOR), *messages[1:]]
