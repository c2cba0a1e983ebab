"""The chat workload: three short questions, answered one at a time."""

from __future__ import annotations

QUESTIONS: tuple[str, ...] = (
    "In three sentences, why is the sky blue?",
    "Write a short Python function that checks whether a string is a palindrome, and explain it briefly.",
    "Give me five tips for writing clear technical documentation.",
)
MAX_TOKENS = 256


def messages(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]
