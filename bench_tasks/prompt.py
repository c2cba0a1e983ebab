"""Long prompts of an exact token length: fresh prompts and needle haystacks are built here.

Lengths are calibrated against the server under test with an injected ``count_tokens(messages)``
(its /tokenize endpoint, or a probe's usage.prompt_tokens), because every model tokenizes
differently. "Fresh" means no prefix of the prompt can be in the server's cache: the job's opening
(bench_tasks.run_mark) begins it, and the cached_tokens the server reports are checked
(bench_tasks.cache_share).
"""

from __future__ import annotations

import random
from collections.abc import Callable

CountTokens = Callable[[list[dict]], int]

_WORDS = (
    "the system reads each request and writes an answer after the model has seen every token of the prompt "
    "a server keeps its cache warm while students send questions about physics history music and code "
    "engineers measure latency throughput memory bandwidth and the cost of long context windows on one card "
    "river mountain forest library window garden bridge engine signal market planet harbor lantern quiet "
    "careful rapid gentle bright narrow ancient modern simple complex steady sudden distant local hidden"
).split()

SIZE_SUFFIXES = {"k": 1024}


def parse_size(text: str) -> int:
    """'4k' -> 4096 tokens, '1500' -> 1500."""
    text = text.strip().lower()
    if text.endswith("k"):
        return int(float(text[:-1]) * 1024)
    return int(text)


def size_label(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def filler(n_words: int, seed: int) -> str:
    """Deterministic prose-like text: sentences of 8-16 words from a fixed vocabulary."""
    rng = random.Random(seed)
    sentences, left = [], n_words
    while left > 0:
        length = min(left, rng.randint(8, 16))
        words = [rng.choice(_WORDS) for _ in range(length)]
        sentences.append(" ".join(words).capitalize() + ".")
        left -= length
    return " ".join(sentences)


def calibrate(build: Callable[[int], list[dict]], count_tokens: CountTokens, target_tokens: int,
              tolerance: float = 0.005, max_rounds: int = 6) -> tuple[list[dict], int]:
    """Find the filler size whose messages count ``target_tokens`` (within ``tolerance``).

    ``build(n_words)`` makes the messages; the token count is assumed roughly linear in n_words,
    so a few secant steps converge.
    """
    n_words = max(1, int(target_tokens * 0.7))
    messages = build(n_words)
    tokens = count_tokens(messages)
    for _ in range(max_rounds):
        if abs(tokens - target_tokens) <= tolerance * target_tokens:
            break
        per_word = max(tokens / n_words, 1e-3)
        n_words = max(1, n_words + round((target_tokens - tokens) / per_word))
        messages = build(n_words)
        tokens = count_tokens(messages)
    return messages, tokens


def fresh_prompt(opening: str, n_words: int, seed: int) -> list[dict]:
    text = f"{opening} Read the following notes and summarise them in one sentence.\n\n{filler(n_words, seed)}"
    return [{"role": "user", "content": text}]

