"""A byte-level BPE tokenizer (Qwen2-style pre-tokenizer) trained locally with `tokenizers`, shared by the tiny
llama.cpp GGUF and the tiny vLLM (HF) model, plus a Qwen2.5-style ChatML chat template that renders tools.

Deterministic: same corpus + same pinned `tokenizers` -> same tokenizer.json (checked by tests via the key).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cache import content_key, file_lock, source_of

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# Qwen2's pre-tokenizer split (llama.cpp: tokenizer.ggml.pre = "qwen2" uses the same regex).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2.5-style ChatML with tools (Hermes <tool_call> format), but no default system prompt: a request's
# prompt is exactly what the client sent plus the ChatML framing.
CHATML_TOOLS_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

LICENSES_DIR = Path("/usr/share/common-licenses")


def corpus_files() -> list[Path]:
    """Local English text: Debian's common licenses; else the pinned wheels' own docs and sources."""
    if LICENSES_DIR.is_dir():
        files = sorted(p for p in LICENSES_DIR.iterdir() if p.is_file())
        if files:
            return files
    import gguf
    import tokenizers
    files = []
    for mod in (gguf, tokenizers):
        files += sorted(p for p in Path(mod.__file__).parent.rglob("*") if p.suffix in (".py", ".pyi"))
    return files


def corpus_text() -> str:
    return "\n".join(p.read_text(errors="replace") for p in corpus_files())


def _train(corpus: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # Lines in a fixed order; the trainer breaks ties deterministically.
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    return tok


def tokenizer_key() -> str:
    import tokenizers
    return content_key(source_of(__file__), tokenizers.__version__, corpus_text())


def ensure_tokenizer(cache_dir: Path) -> Path:
    """Path of tokenizer.json (trained once per key, under CACHE/tokenizer-KEY/)."""
    out_dir = Path(cache_dir) / f"tokenizer-{tokenizer_key()}"
    path = out_dir / "tokenizer.json"
    if path.exists():
        return path
    with file_lock(Path(cache_dir) / "locks" / f"{out_dir.name}.lock"):
        if path.exists():
            return path
        out_dir.mkdir(parents=True, exist_ok=True)
        tok = _train(corpus_text())
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(tok.to_str(pretty=False))
        os.replace(tmp, path)
    return path


def vocab_and_merges(tokenizer_json: Path) -> tuple[list[str], list[str]]:
    """(tokens by id, merges as 'a b' strings) from a tokenizer.json."""
    data = json.loads(Path(tokenizer_json).read_text())
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * (max(vocab.values()) + 1)
    for text, idx in vocab.items():
        tokens[idx] = text
    assert all(tokens), "token ids are not contiguous"
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, merges


def textless_token_ids(tokenizer_json: Path) -> list[int]:
    """Tokens without text of their own: special tokens, and lone bytes of a multi-byte character
    (decoded alone: U+FFFD), which servers skip or hold back. Random weights can loop on them and
    answer 16 tokens with no first token to time (seen on vLLM with ignore_eos)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    texts = (tokenizer.decode([i]) for i in range(tokenizer.get_vocab_size()))
    return [i for i, text in enumerate(texts) if not text or "\ufffd" in text]
