"""Prefix cache: whole blocks of prompt tokens seen before are prefilled for free.

A block is identified by a hash chained over every token before it, so a block only matches when
the entire prefix up to it matches (as in vLLM's block hashing). Bounded LRU over blocks.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    def __init__(self, block_tokens: int, capacity_blocks: int) -> None:
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def block_hashes(self, tokens: list[int]) -> list[int]:
        hashes = []
        previous = 0
        size = self.block_tokens
        for start in range(0, len(tokens) - size + 1, size):
            previous = hash((previous, tuple(tokens[start:start + size])))
            hashes.append(previous)
        return hashes

    def cached_tokens(self, hashes: list[int], prompt_tokens: int) -> int:
        """Tokens of the leading blocks already cached; at least one prompt token is always computed."""
        hits = 0
        for block in hashes:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            hits += 1
        return min(hits * self.block_tokens, (prompt_tokens - 1) // self.block_tokens * self.block_tokens)

    def insert(self, hashes: list[int]) -> None:
        blocks = self._blocks
        for block in hashes:
            blocks[block] = None
            blocks.move_to_end(block)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
