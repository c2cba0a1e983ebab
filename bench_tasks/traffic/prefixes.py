"""``--prefix-tokens N --prefixes K``: requests in K groups, each group's opening with a prefix of exactly N tokens.

Request n (from 0) belongs to group ``n % K``; its first message's content opens with the group's
prefix, then a blank line, then what it held. A prefix is the opener and words of a Vocabulary, so it
is exactly N tokens of the server's tokenizer (the chat template's own tokens are not among them, and
requests share those whatever their group); its words are a pure function of (the invocation's mark,
the group, N, the words), so no prefix is served from an earlier invocation's cache, and the requests
after the first K share theirs with an earlier one: what a prefix cache can buy.
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

    def _text(self, group: int) -> str:
        return self.vocabulary.text(self.vocabulary.draw(self.mark, f"prefix {group}", self._words))

    def group(self, n: int) -> int:
        return n % self.groups

    def shared_tokens(self, n: int) -> int:
        """Tokens of request n's prompt an earlier request of its group sent too (the prefix's, after the first)."""
        return self.prefix_tokens if n >= self.groups else 0

    def sent(self, messages: list[dict], n: int, groups_sent: set[int]) -> tuple[list[dict], int]:
        """Request n's messages opened by its group's prefix, and the prefix tokens it shares: all of them when a
        request of its group is in ``groups_sent`` (which it then joins), as in an open loop whose requests are
        numbered by their part (each part's first ones share the prefixes an earlier part sent)."""
        group = self.group(n)
        shared = self.prefix_tokens if group in groups_sent else 0
        groups_sent.add(group)
        return self.messages(messages, n), shared

    def messages(self, messages: list[dict], n: int) -> list[dict]:
        """``messages`` with request n's group prefix opening the first one's content."""
        return [prepended(messages[0], self.text(self.group(n)) + SEPARATOR), *messages[1:]]
