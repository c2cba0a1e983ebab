"""The chat workload: three short questions, answered one at a time."""

from __future__ import annotations

from collections.abc import Sequence

QUESTIONS: tuple[str, ...] = (
    "In three sentences, why is the sky blue?",
    "Write a short Python function that checks whether a string is a palindrome, and explain it briefly.",
    "Give me five tips for writing clear technical documentation.",
)
MAX_TOKENS = 256


def messages(question: str, opening: str = "") -> list[dict]:
    """The question as one user message, ``opening`` (its job's, bench_tasks.run_mark) before it: a prefix
    cache then holds no copy of it from an earlier run or another job, so each is read afresh, as a
    person's new question is read (measured on llama.cpp with SmolLM2: a repeated chat question's first
    token came in 0.009 s instead of 0.07 s, and a burst's third round read its cached prompts at a fifth
    of the first round's slowest first token: docs/engines.md#llamacpp-prefix-cache)."""
    return [{"role": "user", "content": f"{opening} {question}" if opening else question}]


def nth_question(n: int, questions: Sequence[str] = ()) -> tuple[str, int]:
    """The ``n``-th question asked (from 0) and the pass it belongs to (from 1): ``questions`` (the
    user's ``--question``) in turn, else QUESTIONS."""
    questions = questions or QUESTIONS
    return questions[n % len(questions)], n // len(questions) + 1
