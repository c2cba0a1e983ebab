"""Needle in a haystack: a code word hidden at a depth of a long prompt, asked back at the end.

Each (size, depth) cell gets its own haystack text and its own code word, so one cell's answer
can never leak into another's (nor be served from another's cache).
"""

from __future__ import annotations

import random

from bench_tasks.prompt import filler

QUESTION = "What is the code word mentioned in the notes above? Answer with the code word only."
_CODE_ROOTS = ("falcon", "cobalt", "juniper", "saffron", "glacier", "meridian", "tundra", "quartz", "harbor")


def code_word(seed: int) -> str:
    rng = random.Random(f"code-{seed}")
    return f"{rng.choice(_CODE_ROOTS)}-{rng.randint(1000, 9999)}"


def needle_messages(n_words: int, depth: float, word: str, seed: int, marker: str) -> list[dict]:
    """Filler with 'The code word is WORD.' inserted after ``depth`` of the filler's sentences."""
    sentences = filler(n_words, seed).split(". ")
    at = min(len(sentences), max(0, round(depth * len(sentences))))
    sentences.insert(at, f"The code word is {word}")
    haystack = ". ".join(sentences)
    text = f"{marker} Read these notes carefully.\n\n{haystack}\n\n{QUESTION}"
    return [{"role": "user", "content": text}]


def found(answer: str, word: str) -> bool:
    """Found means the exact code word appears in the answer (case-sensitive, whole)."""
    return word in answer
