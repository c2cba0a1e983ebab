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

A student's conversations are ``Lesson``s: by default the built-in topics below, one after the other
from the student's own; with a teacher's file (``--dataset``: ``FileLessons``), the file's, the class
taking them in the file's order and from its start again when it runs out. A ShareGPT conversation is a
lesson of its human turns (its system turn, if any, instead of the tutor's instructions); a
``{"prompt"}`` line a lesson of one question; a ``{"messages"}`` line a lesson of one request, sent as
it is. The student's own answers make the history, as with the built-in topics.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from bench_tasks.traffic.dataset import Conversation, Dataset, Rereading, prepended
from bench_tasks.traffic.feed import opened

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
class Lesson:
    """A conversation a student holds: its questions, asked in turn, after the tutor's instructions."""

    questions: tuple[str, ...] = ()
    system: str = SYSTEM
    source: str | None = None  # file:line of a teacher's file (None: a built-in topic)
    max_tokens: int | None = None  # the file's answer length (with ignore_eos); None: the run's own
    messages: tuple[dict, ...] = ()  # a {"messages"} line's: one request, sent as it is

    @property
    def turns(self) -> int:
        return 1 if self.messages else len(self.questions)


def built_in(first: int) -> Iterator[Lesson]:
    """The built-in topics, round and round from topic ``first``."""
    topic = first % len(TOPICS)
    while True:
        yield Lesson(TOPICS[topic])
        topic = (topic + 1) % len(TOPICS)


class FileLessons:
    """A teacher's file (a prompt file or ShareGPT conversations, checked whole by Dataset.open) as lessons
    for the class, in the file's order, again from its start when it runs out (``passes``)."""

    def __init__(self, dataset: Dataset) -> None:
        self._reading = Rereading(dataset)

    @property
    def passes(self) -> int:
        return self._reading.passes

    def __iter__(self) -> Iterator[Lesson]:
        return self

    def __next__(self) -> Lesson:
        _, item = self._reading.next()
        if isinstance(item, Conversation):
            return Lesson(tuple(turn.question for turn in item.turns),
                          SYSTEM if item.system is None else item.system, item.source)
        first = item.messages[0]
        if len(item.messages) == 1 and first["role"] == "user" and isinstance(first["content"], str):
            return Lesson((first["content"],), source=item.source, max_tokens=item.max_tokens)
        return Lesson(source=item.source, max_tokens=item.max_tokens, messages=tuple(item.messages))


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

    def __init__(self, think: ThinkTime, seed: int, name: str, paste_share: float = 0.0,
                 lessons: Iterator[Lesson] | None = None) -> None:
        if not 0.0 <= paste_share <= 1.0:
            raise ValueError(f"a share of questions with a document is between 0 and 1, got {paste_share}")
        self.think = think
        self.name = name
        self.paste_share = paste_share
        self.rng = random.Random(seed)
        self.arrived = False
        self.conversation = 1  # the records' round: a fresh conversation after each lesson's last question
        self.lessons = built_in(seed) if lessons is None else lessons  # a class's file: shared by its students
        self.lesson = next(self.lessons)
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
        question (with ``document`` above it, when the student pastes one). A lesson of one request sent as it
        is: its messages, ``opening`` before the first one's content (a document above its last message's)."""
        if self.lesson.messages:
            messages = opened(list(self.lesson.messages), opening) if opening else list(self.lesson.messages)
            return _pasted(messages, document)
        question = self.lesson.questions[self.turn - 1]
        if self.turn == 1 and self.lesson.source is None:
            question = f"I'm {self.name}. {question}"  # each student's own conversation, not a shared prefix
        if document:
            question = f"{document}\n\n{question}"
        system = f"{opening} {self.lesson.system}" if opening else self.lesson.system
        return [{"role": "system", "content": system}, *self.history, {"role": "user", "content": question}]

    def answered(self, question: list[dict], answer: str) -> None:
        """The answer came: it joins the history; after the lesson's last question a new conversation starts."""
        self.history += [question[-1], {"role": "assistant", "content": answer}]
        if self.turn > self.lesson.turns:
            self.history = []
            self.lesson = next(self.lessons)
            self.conversation += 1


def _pasted(messages: list[dict], document: str | None) -> list[dict]:
    """``messages`` with ``document`` above the last one's text (a request sent as it is, with a paste)."""
    return [*messages[:-1], prepended(messages[-1], document + "\n\n")] if document else messages
