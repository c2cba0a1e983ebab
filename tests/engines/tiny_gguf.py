"""ensure_tiny_gguf(cache_dir): a tiny random-weight llama-architecture GGUF for llama.cpp.

Byte-level BPE vocab 4096 (tokenizer.py, trained locally), 4 layers, hidden 256, 4 heads (2 KV heads, GQA),
FFN 768, context 32768, f16 matrices (f32 norms), Qwen2.5-style ChatML template with tools; ~10 MB, ~2 s.
Deterministic: numpy seeded; the file name carries a key over generator sources + pinned versions + tokenizer.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .cache import content_key, file_lock, source_of
from .tokenizer import (CHATML_TOOLS_TEMPLATE, EOS_TOKEN, PAD_TOKEN, SPECIAL_TOKENS, ensure_tokenizer,
                        textless_token_ids, vocab_and_merges)

SEED = 20240611
N_LAYER = 4
N_EMBD = 256
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 768
N_CTX = 32768
ROPE_THETA = 1_000_000.0
RMS_EPS = 1e-6
MODEL_NAME = "tiny-random-llama"


def _key(tokenizer_json: Path) -> str:
    from importlib.metadata import version
    return content_key(source_of(__file__, str(Path(__file__).with_name("tokenizer.py"))), version("gguf"),
                       np.__version__, tokenizer_json.read_bytes())


def ensure_tiny_gguf(cache_dir: Path) -> Path:
    """Path of the tiny GGUF under CACHE_DIR (generated once per key)."""
    cache_dir = Path(cache_dir)
    tokenizer_json = ensure_tokenizer(cache_dir)
    path = cache_dir / "models" / f"{MODEL_NAME}-{_key(tokenizer_json)}.f16.gguf"
    if path.exists():
        return path
    with file_lock(cache_dir / "locks" / f"{path.name}.lock"):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
            try:
                _write(tmp, tokenizer_json)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    return path


def _write(path: Path, tokenizer_json: Path) -> None:
    import gguf

    tokens, merges = vocab_and_merges(tokenizer_json)
    n_vocab = len(tokens)
    token_types = [gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens]

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(MODEL_NAME)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(n_vocab)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(PAD_TOKEN))
    w.add_eos_token_id(tokens.index(EOS_TOKEN))
    w.add_eot_token_id(tokens.index(EOS_TOKEN))
    w.add_pad_token_id(tokens.index(PAD_TOKEN))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TOOLS_TEMPLATE)

    rng = np.random.default_rng(SEED)

    def mat(rows: int, cols: int) -> np.ndarray:  # numpy (out, in) == ggml ne = [in, out]
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    head_dim = N_EMBD // N_HEAD
    w.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(N_HEAD * head_dim, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(N_HEAD_KV * head_dim, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(N_HEAD_KV * head_dim, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(N_EMBD, N_HEAD * head_dim))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", _visible_answers(mat(n_vocab, N_EMBD), textless_token_ids(tokenizer_json)))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _visible_answers(output: np.ndarray, textless: list[int]) -> np.ndarray:
    """Output rows of the tokens without text of their own become 0, and one visible token's row the
    negative of another's, so for every hidden state some visible token scores above them (see
    tokenizer.textless_token_ids; _make_hf_model.py does the same for vLLM)."""
    skipped = set(textless)
    first, second = [i for i in range(output.shape[0]) if i not in skipped][:2]
    output[textless] = 0
    output[second] = -output[first]
    return output
