"""Needle in a haystack: a code word hidden at a depth of a long prompt, asked back at the end.

Each (size, depth) cell gets its own haystack text and its own code word, so one cell's answer
can never leak into another's (nor be served from another's cache).
"""

from __future__ import annotations

import random

from bench_tasks.prompt import filler

QUESTION = "What is the secret code word? Answer with the code word only."
_CODE_ROOTS = ("falcon", "cobalt", "juniper", "saffron", "glacier", "meridian", "tundra", "quartz", "harbor")


def code_word(seed: int) -> str:
    """One word, upper case and digits (e.g. HARBOR7440): a small model can copy it back whole,
    where it splits a hyphenated or lower-case one (measured on SmolLM2-135M)."""
    rng = random.Random(f"code-{seed}")
    return f"{rng.choice(_CODE_ROOTS).upper()}{rng.randint(1000, 9999)}"


def needle_messages(n_words: int, depth: float, word: str, seed: int, opening: str) -> list[dict]:
    """Filler with the needle as a paragraph of its own after ``depth`` of the filler's sentences."""
    sentences = filler(n_words, seed).split(". ")
    at = min(len(sentences), max(0, round(depth * len(sentences))))
    before, after = ". ".join(sentences[:at]), ". ".join(sentences[at:])
    haystack = f"{before}.\n\nThe secret code word is {word}.\n\n{after}" if before else \
        f"The secret code word is {word}.\n\n{after}"
    text = f"{opening} Read these notes carefully.\n\n{haystack}\n\n{QUESTION}"
    return [{"role": "user", "content": text}]


def found(answer: str, word: str) -> bool:
    """Found means the exact code word appears in the answer (case-sensitive, whole)."""
    return word in answer
