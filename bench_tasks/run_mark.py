"""The mark of one invocation: a short random id that opens every prompt the tool invents.

A prefix cache serves a request the tokens it shares, from its start, with a prompt the server read
before, for as long as the server keeps them (llama.cpp keeps a slot's last prompt until the slot is
reused, minutes or days later: docs/engines.md#llamacpp-prefix-cache). So every invented prompt opens
with ``[MARK CODE]``: MARK is drawn once per invocation (8 hex digits from ``secrets``), CODE is a hash
of (MARK, the job's identity). No prompt of a new run shares more than the chat template's opening and
the bracket with an earlier run's; within a run no two jobs share more than that and the mark. A
conversation's own later turns resend its first one, so they share what they should.

Every text is a pure function of (MARK, the job's identity): ``--repeat-mark MARK`` sends an earlier
run's texts again, on purpose, to measure a warm cache.
"""

from __future__ import annotations

import hashlib
import secrets

MARK_HEX = 8
CODE_HEX = 8
# Two jobs' codes are different hashes, which may still begin with the same characters. A token holds
# at least one byte of text, so what they share by chance is at most one token per byte of the code
# they share, and of the space before it: the cache check allows it (bench_tasks.cache_share).
CHANCE_TOKENS = CODE_HEX + 1


def draw() -> str:
    """A new invocation's mark."""
    return secrets.token_hex(MARK_HEX // 2)


def parse(text: str) -> str:
    """A mark as given (``--repeat-mark``): 8 hex digits; ValueError in one line otherwise."""
    mark = str(text).strip().lower()
    if len(mark) != MARK_HEX or any(c not in "0123456789abcdef" for c in mark):
        raise ValueError(f"expected a run mark of {MARK_HEX} hex digits (as settings.json and the records "
                         f"keep it), got {text!r}")
    return mark


def code(mark: str, *identity) -> str:
    """The job's code: a hash of the mark and its identity (e.g. ``"burst-4", 2, 3``: phase, round, index)."""
    text = "\x1f".join(str(part) for part in (mark, *identity))
    return hashlib.sha256(text.encode()).hexdigest()[:CODE_HEX]


def opening(mark: str, *identity) -> str:
    """What opens the job's prompt: ``[MARK CODE]``."""
    return bracket(mark, code(mark, *identity))


def bracket(mark: str, job_code: str) -> str:
    return f"[{mark} {job_code}]"


def probe_codes() -> tuple[str, str]:
    """Two codes that differ from their first character on: prompts opened by them share exactly what every
    prompt of a run shares (the template's opening, the bracket and the mark), which the cache check measures.
    Drawn afresh each time, so that no measurement's prompts are another's (a second worker's, or a shape
    the template renders as another) and served from its cache."""
    tail = secrets.token_hex(CODE_HEX)
    return "0" + tail[:CODE_HEX - 1], "f" + tail[CODE_HEX - 1:2 * CODE_HEX - 2]
