"""What a request may share with what the server read before, and the check of what its cache served it.

A request may legitimately be served from a prefix cache (its ``shareable_tokens``):

- the opening every prompt of the run shares: the chat template's opening, the bracket and the run's
  mark (bench_tasks.run_mark), measured once per run from two prompts that differ from their job's code
  on (``measure``), plus the tokens its own code may share by chance with another's
  (``run_mark.CHANCE_TOKENS``);
- in a conversation (the agent, a classroom student), what it resends of its own earlier requests: at
  most their prompts and answers (``Conversation``);
- whatever a caller says it may share (a trace's requests share the blocks their hash ids name): the
  rule takes the number, however it was found.

Anything the server reports cached beyond that (``cached_tokens``, whichever API filled it) was served
from an earlier run's cache or from another job's: the request is flagged ``cache_hit``. A request whose
cached tokens the server did not report, or whose share is unknown, cannot be checked (``is_hit`` None).
"""

from __future__ import annotations

from collections.abc import Callable

from bench_tasks import agent, run_mark
from bench_tasks.record import Record, add_flag

CACHE_HIT = "cache_hit"
# The three ways an invented prompt begins: a user's message (chat, burst, prompt, needle, paste), a system
# message (a classroom student's conversation), a system message and tools (the agent). Templates render
# them differently before the first text (a default system prompt; the tools first), so each has its share.
USER, SYSTEM, TOOLS = "user", "system", "tools"
SHAPES = (USER, SYSTEM, TOOLS)

TokenIds = Callable[[list[dict], "list[dict] | None"], list[int]]
CachedAfter = Callable[[list[dict], "list[dict] | None"], "int | None"]


def shape(messages: list[dict], tools: list[dict] | None = None) -> str:
    if tools:
        return TOOLS
    return SYSTEM if messages and messages[0].get("role") == "system" else USER


def probe(kind: str, mark: str, job_code: str) -> tuple[list[dict], list[dict] | None]:
    """A short prompt of shape ``kind`` opened as a job's would be, with ``job_code`` as its code."""
    opening = run_mark.bracket(mark, job_code)
    if kind == USER:
        return [{"role": "user", "content": f"{opening} Say hello."}], None
    messages = [{"role": "system", "content": f"{opening} {agent.SYSTEM}"}, {"role": "user", "content": "Say hello."}]
    return messages, (agent.tools(opening) if kind == TOOLS else None)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def measure(kind: str, mark: str, token_ids: TokenIds | None = None, cached_after: CachedAfter | None = None,
            codes: tuple[str, str] | None = None) -> int | None:
    """The tokens a prompt of shape ``kind`` may share with any other prompt of the run: the common prefix of
    two such prompts' token ids (``token_ids``: the server's tokenizer, its template applied), else what the
    server's cache served the second of two such requests (``cached_after`` sends one and returns its cached
    tokens; a cache of blocks rounds it down, llama.cpp's slots may give 0), plus the chance tokens of a
    job's code. None when neither can say (no tokenizer, and no cached tokens reported). ``codes``: the two
    probes' (default: run_mark.probe_codes())."""
    first, second = (probe(kind, mark, c) for c in codes or run_mark.probe_codes())
    if token_ids is not None:
        shared = common_prefix(token_ids(*first), token_ids(*second))
    elif cached_after is not None:
        if cached_after(*first) is None:
            return None
        shared = cached_after(*second)
        if shared is None:
            return None
    else:
        return None
    return shared + run_mark.CHANCE_TOKENS


def is_hit(cached_tokens, shareable_tokens) -> bool | None:
    """Served beyond its share: True or False; None when it cannot be told (either figure unknown)."""
    if _unknown(cached_tokens) or _unknown(shareable_tokens):
        return None
    return cached_tokens > shareable_tokens


def _unknown(value) -> bool:
    return value is None or value != value  # None, or NaN from a table


def check(record: Record) -> None:
    """Flag ``record`` ``cache_hit`` when the server served it from a cache beyond its ``shareable_tokens``."""
    if is_hit(record.cached_tokens, record.shareable_tokens):
        add_flag(record, CACHE_HIT)


class Conversation:
    """What a conversation's next request may share: its opening, and what its earlier requests sent and were
    answered (the server may keep a request's prompt and its answer's tokens: llama.cpp's slot does, vLLM its
    full blocks). After a failed request whose prompt the server did not count, the next one resends that
    prompt, all of which it may share."""

    def __init__(self) -> None:
        self.sent_tokens = 0  # prompt and answer of its longest request so far
        self.resending = False  # its last request failed: the next one sends the same prompt again

    def judge(self, record: Record, _recorder=None) -> None:
        """Set ``record``'s share (its opening's already there) and note what it sent: a judge for the stream."""
        if self.resending and record.prompt_tokens is not None:
            record.shareable_tokens = record.prompt_tokens
        elif self.sent_tokens:  # its first request held the opening: what it sent covers it
            record.shareable_tokens = max(record.shareable_tokens or 0, self.sent_tokens)
        self.resending = not record.ok and record.prompt_tokens is None
        sent = (record.prompt_tokens or 0) + (record.completion_tokens or 0)
        self.sent_tokens = max(self.sent_tokens, sent)
