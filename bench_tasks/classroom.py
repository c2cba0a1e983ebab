"""The classroom workload as data: a student's conversation with a tutor, and how long they think.

A student holds a conversation on one topic: the whole history is resent each turn (as a chat
page does), a question follows the answer to the one before, and after the topic's last question
the student starts a fresh conversation on the next topic. A share of questions (``paste_share``, 0 by
default) carries a document pasted above it, which stays in the conversation as a chat page keeps
it. Between an answer and the next
question the student thinks for a time drawn uniformly from the think-time range (reading the
answer, typing). Students arrive over a ramp: a student's first question comes after a delay
drawn uniformly from 0 to the top of that range, so a class asks at its steady rate from the
start instead of all at once. A failed answer is asked again after the next think time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

THINK_TIME_S = (10.0, 40.0)
MAX_TOKENS = 256

SYSTEM = ("You are a patient tutor helping a student during a lesson. Answer the question clearly, "
          "in a few sentences, and build on what you said before.")

TOPICS: tuple[tuple[str, ...], ...] = (
    ("What is photosynthesis, in simple words?",
     "Why do plants need light for it?",
     "Where does the oxygen that plants release come from?",
     "What would happen to a plant kept in the dark for a week?",
     "Summarise what we discussed in two sentences."),
    ("How does a for loop work in Python?",
     "What is the difference between a for loop and a while loop?",
     "Show me a loop that adds up the numbers from 1 to 10.",
     "What does the break statement do inside a loop?",
     "Give me a small exercise to practise loops."),
    ("Why did the Roman Empire split into East and West?",
     "Which half lasted longer, and why?",
     "What was Constantinople and why was it important?",
     "How did the fall of the West change daily life in Europe?",
     "List three things we still use today that come from Rome."),
    ("What is a fraction?",
     "How do I add one half and one third?",
     "Why do we need a common denominator?",
     "How do I turn three quarters into a decimal?",
     "Give me two fraction problems to try on my own."),
    ("What causes the seasons on Earth?",
     "Why is it summer in Australia when it is winter in Europe?",
     "Does the distance from the Sun matter for the seasons?",
     "What would the seasons be like if the Earth were not tilted?",
     "Explain the seasons to a ten-year-old in three sentences."),
    ("What is the difference between weather and climate?",
     "How do scientists measure the climate of the past?",
     "What is the greenhouse effect?",
     "Why do some gases trap more heat than others?",
     "What can one school do to use less energy?"),
)


@dataclass(frozen=True)
class ThinkTime:
    """Seconds a student thinks between an answer and the next question: uniform in [min_s, max_s]."""

    min_s: float = THINK_TIME_S[0]
    max_s: float = THINK_TIME_S[1]

    def __post_init__(self) -> None:
        if not 0 <= self.min_s <= self.max_s:
            raise ValueError(f"a think-time range needs 0 <= min <= max, got {self.min_s}-{self.max_s}")

    def text(self) -> str:
        """As --think-time takes it: ``10-40``, or ``2`` for always 2 s."""
        return f"{self.min_s:g}" if self.min_s == self.max_s else f"{self.min_s:g}-{self.max_s:g}"

    def draw(self, rng: random.Random) -> float:
        return rng.uniform(self.min_s, self.max_s)

    def arrival(self, rng: random.Random) -> float:
        return rng.uniform(0.0, self.max_s)


def parse_think_time(text: str) -> ThinkTime:
    """``10-40`` (seconds, a range) or ``2`` (always 2 s)."""
    parts = [p.strip() for p in str(text).split("-")]
    try:
        low, high = (float(parts[0]), float(parts[-1])) if len(parts) in (1, 2) else (None, None)
    except ValueError:
        low = high = None
    if low is None:
        raise ValueError(f"expected a think time like 10-40 or 2 (seconds), got {text!r}")
    return ThinkTime(low, high)


class Student:
    """One student's state: where their conversation is, and how long to wait before the next question."""

    def __init__(self, think: ThinkTime, seed: int, name: str, paste_share: float = 0.0) -> None:
        if not 0.0 <= paste_share <= 1.0:
            raise ValueError(f"a share of questions with a document is between 0 and 1, got {paste_share}")
        self.think = think
        self.name = name
        self.paste_share = paste_share
        self.rng = random.Random(seed)
        self.arrived = False
        self.conversation = 1  # the records' round: a fresh conversation after each topic's last question
        self.topic = seed % len(TOPICS)
        self.history: list[dict] = []

    @property
    def turn(self) -> int:
        """1-based question number within the conversation (the records' turn)."""
        return len(self.history) // 2 + 1

    def pause_s(self) -> float:
        """The wait before the next question: the arrival delay first, then a think time."""
        if not self.arrived:
            self.arrived = True
            return self.think.arrival(self.rng)
        return self.think.draw(self.rng)

    def pastes(self) -> bool:
        """Whether this turn's question carries a document (drawn only when some do: a class without
        pastes thinks exactly as before)."""
        return self.paste_share > 0 and self.rng.random() < self.paste_share

    def messages(self, document: str | None = None, opening: str = "") -> list[dict]:
        """What this turn sends: the tutor's instructions (``opening`` before them: the conversation's, from
        bench_tasks.run_mark, so that no other conversation shares them), the whole conversation so far, the
        question (with ``document`` above it, when the student pastes one)."""
        question = TOPICS[self.topic][self.turn - 1]
        if self.turn == 1:
            question = f"I'm {self.name}. {question}"  # each student's own conversation, not a shared prefix
        if document:
            question = f"{document}\n\n{question}"
        system = f"{opening} {SYSTEM}" if opening else SYSTEM
        return [{"role": "system", "content": system}, *self.history, {"role": "user", "content": question}]

    def answered(self, question: list[dict], answer: str) -> None:
        """The answer came: it joins the history; after the topic's last question a new conversation starts."""
        self.history += [question[-1], {"role": "assistant", "content": answer}]
        if self.turn > len(TOPICS[self.topic]):
            self.history = []
            self.topic = (self.topic + 1) % len(TOPICS)
            self.conversation += 1
