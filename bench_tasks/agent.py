"""The coding-agent session: six turns, four tools, the whole growing conversation resent each turn.

A turn is one request. When the model calls a tool, the call is validated (a known tool name,
JSON-object arguments) and the script's result for that tool is appended; when it answers in
text, the script's next user message follows. For a deterministic server the session is
deterministic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

TURNS = 6
MAX_TOKENS = 256


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS: list[dict] = [
    _tool("read_file", "Read a file of the repository.", {"path": {"type": "string"}}, ["path"]),
    _tool("search", "Search the repository for a string.", {"query": {"type": "string"}}, ["query"]),
    _tool("edit_file", "Replace text in a file.",
          {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}, ["path", "old", "new"]),
    _tool("run_tests", "Run the test suite, or one test file.", {"path": {"type": "string"}}, []),
]
TOOL_NAMES = frozenset(t["function"]["name"] for t in TOOLS)


def tools(opening: str) -> list[dict]:
    """TOOLS with ``opening`` before the first tool's description: a template that renders the tools before
    the system message (the simulated engine's) would otherwise begin every session with the same text."""
    first = TOOLS[0]["function"]
    return [{"type": "function", "function": {**first, "description": f"{opening} {first['description']}"}},
            *TOOLS[1:]]

SYSTEM = ("You are a coding agent working in a Python repository. Use the tools to inspect and change code. "
          "Call one tool at a time; answer in text when the task is done.")

USER_MESSAGES = (
    "The test tests/test_stats.py::test_median fails. Use read_file to look at stats.py and find out why.",
    "Now use search to find every caller of median in the repository.",
    "Fix the bug with edit_file, then use run_tests to check the whole suite.",
    "Summarise what you changed and why, in three sentences.",
    "Is there any other function in stats.py with the same mistake? Check with read_file.",
    "Write the commit message for this change.",
)

_STATS_PY = '''def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    # bug: even-length lists must average the two middle values
    return ordered[middle]


def spread(values):
    return max(values) - min(values)
'''

TOOL_RESULTS = {
    "read_file": _STATS_PY * 3,
    "search": "stats.py:5: def median(values):\nreport.py:12: mid = median(latencies)\n"
              "report.py:30: return median(rates)\ntests/test_stats.py:8: assert median([1, 2, 3, 4]) == 2.5\n",
    "edit_file": "Edited stats.py: 1 replacement.",
    "run_tests": "============ 14 passed in 0.31s ============",
}


@dataclass
class Session:
    """The conversation so far and the tools it declares; ``next_user`` is the index of the script's next user
    message."""

    messages: list[dict] = field(default_factory=list)
    next_user: int = 0
    tools: list[dict] = field(default_factory=lambda: list(TOOLS))

    @classmethod
    def start(cls, opening: str) -> "Session":
        """``opening`` (bench_tasks.run_mark) opens the system prompt and the tools (``tools``), so no session
        is served from another's cache."""
        return cls(messages=[{"role": "system", "content": f"{opening} {SYSTEM}"}], tools=tools(opening))

    def turn_messages(self) -> list[dict]:
        """Messages to send for the next turn: a pending tool result, or the script's next question."""
        if self.messages[-1]["role"] in ("system", "assistant"):
            self.messages.append({"role": "user", "content": USER_MESSAGES[self.next_user % len(USER_MESSAGES)]})
            self.next_user += 1
        return self.messages

    def answered(self, text: str, tool_calls: list[dict]) -> tuple[str | None, bool | None]:
        """Append the model's answer; returns (tool name, call valid) or (None, None) for text."""
        if not tool_calls:
            self.messages.append({"role": "assistant", "content": text})
            return None, None
        call = tool_calls[0]
        valid = validate(call)
        call_id = call.get("id") or f"call_{len(self.messages)}"
        self.messages.append({"role": "assistant", "content": text or None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"] if valid else "{}"}}]})
        result = TOOL_RESULTS.get(call["name"], f"error: unknown tool {call['name']!r}")
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        return call["name"], valid


def validate(call: dict) -> bool:
    """A valid call names a declared tool and carries a JSON object as arguments."""
    if call.get("name") not in TOOL_NAMES:
        return False
    try:
        return isinstance(json.loads(call.get("arguments") or ""), dict)
    except ValueError:
        return False
