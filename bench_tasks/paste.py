"""The paste workload as data: people chat while one more pastes long documents, back to back.

A paste is a fresh prompt of ``size`` tokens (bench_tasks.prompt: its job's opening begins it, so no
cache holds it) asking for a one-sentence summary, answered in ANSWER_TOKENS tokens; a chat question
is fresh too. A paste is sent once an answer is streaming (``Chats.streaming``), so that the engine
reads the paste while answers stream: that is when a stall shows.
"""

from __future__ import annotations

from bench_tasks.prompt import filler, size_label

SCENARIO = "paste"
CHAT_PHASE = "paste-chat"
ANSWER_TOKENS = 32
# An answer is taken to be streaming once it has been in flight for twice its user's previous first
# token, and this much more: past its prompt's reading, which a paste sent sooner would wait behind.
STREAMING_MARGIN_S = 0.05
WAIT_FOR_STREAMING_S = 30.0  # then the paste goes anyway (at once when the answers are too short to catch)


def document(opening: str, n_words: int, seed: int) -> str:
    """A document a student pastes above a question: fresh (``opening``), ``n_words`` of prose."""
    return f"{opening} Here is a document from our lesson:\n\n{filler(n_words, seed)}"


def paste_phase(size_tokens: int) -> str:
    """``paste-4k``: the pasting user's phase."""
    return f"paste-{size_label(size_tokens)}"


class Chats:
    """The chat answers in flight in this process: when each was sent, and its user's previous first
    token and whole answer."""

    def __init__(self) -> None:
        self.in_flight: dict[object, tuple[float, float | None, float | None]] = {}
        self.closing = False  # the pastes are done: no new question

    def asked(self, user: object, t_sent: float, previous_ttft_s: float | None,
              previous_e2e_s: float | None = None) -> None:
        self.in_flight[user] = (t_sent, previous_ttft_s, previous_e2e_s)

    def answered(self, user: object) -> None:
        self.in_flight.pop(user, None)

    def streaming(self, now: float) -> bool:
        """Some answer is past its first token, as far as its user's previous one tells."""
        return any(ttft is not None and now - sent > _caught_after_s(ttft)
                   for sent, ttft, _ in self.in_flight.values())

    def too_short_to_catch(self) -> bool:
        """Every answer in flight is its user's next after one that ended before it would have been taken
        as streaming: these answers are too short to paste into, and waiting for one is in vain."""
        previous = [(ttft, e2e) for _, ttft, e2e in self.in_flight.values()]
        return bool(previous) and all(ttft is not None and e2e is not None and e2e <= _caught_after_s(ttft)
                                      for ttft, e2e in previous)


def _caught_after_s(ttft_s: float) -> float:
    return 2 * ttft_s + STREAMING_MARGIN_S
