"""The sim's deterministic tokenizer and its fixed ChatML chat template.

Tokens: every run of word characters (`\\w+`) is one token, every other non-space character is
one token; whitespace is never a token. So "Hello, world!" is 4 tokens. A token's id is a stable
hash of its text, 48 bits wide: as with a real tokenizer, two different words are two different ids (a
vocabulary of 32,000 hashed ids gave two of a run's 8-hex-digit codes one id every few hundred codes, and the
prefix cache then served one prompt from another's blocks). `/tokenize` and `usage.prompt_tokens` both come
from `tokenize()`.

Chat template (ChatML, rendered to text, then tokenized):

    [<|im_start|>system\\n# Tools\\n{tools as JSON, sorted keys}<|im_end|>\\n]   only when tools are given
    <|im_start|>{role}\\n{content}{tool calls}<|im_end|>\\n                       one per message
    <|im_start|>assistant\\n                                                   the generation prompt

where content given as a list of parts keeps its text parts joined with "\\n", and each tool call of
an assistant message is rendered as "\\n<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>".
"""

from __future__ import annotations

import hashlib
import json
import re

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
# The same tokens, each keeping the whitespace before it, so pieces concatenate back to the text.
PIECE_PATTERN = re.compile(r"\s*(?:\w+|[^\w\s])")
ID_BYTES = 6  # 48 bits: exact in any JSON reader's double, and no two of a run's words share one by chance
_ids: dict[str, int] = {}  # memo: prompts repeat words, and a hash per token would dominate


def tokenize(text: str) -> list[int]:
    pieces = TOKEN_PATTERN.findall(text)
    tokens = list(map(_ids.get, pieces))  # C-level loop; a 160K-token prompt blocks the loop ~40 ms
    if None in tokens:
        tokens = [_ids.get(piece) or _new_id(piece) for piece in pieces]
    return tokens


def _new_id(piece: str) -> int:
    digest = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=ID_BYTES).digest()
    token = _ids[piece] = int.from_bytes(digest, "big")
    return token


def split_pieces(text: str) -> list[str]:
    """The text cut into one-token pieces (leading whitespace attached), for streaming it."""
    return PIECE_PATTERN.findall(text)


def message_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def render_tool_calls(tool_calls) -> str:
    rendered = []
    for call in tool_calls or ():
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        arguments = function.get("arguments", "")
        body = json.dumps({"name": function.get("name", ""), "arguments": arguments})
        rendered.append(f"\n<tool_call>\n{body}\n</tool_call>")
    return "".join(rendered)


def render_chat(messages: list, tools: list | None) -> str:
    parts = []
    if tools:
        parts.append("<|im_start|>system\n# Tools\n" + json.dumps(tools, sort_keys=True) + "<|im_end|>\n")
    for message in messages:
        if not isinstance(message, dict):
            raise ValueError("each message must be an object")
        content = message_text(message.get("content")) + render_tool_calls(message.get("tool_calls"))
        parts.append(f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)
