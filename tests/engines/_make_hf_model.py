"""Runs INSIDE the vLLM venv: write a tiny random-weight LlamaForCausalLM (float32) + PreTrainedTokenizerFast.

    python _make_hf_model.py OUT_DIR TOKENIZER_JSON CONFIG_JSON_FILE
"""

import json
import sys
from pathlib import Path


def main() -> None:
    out_dir, tokenizer_json, cfg = Path(sys.argv[1]), sys.argv[2], json.loads(Path(sys.argv[3]).read_text())
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json, eos_token=cfg["eos_token"],
                                  pad_token=cfg["pad_token"], model_max_length=cfg["max_position_embeddings"],
                                  chat_template=cfg["chat_template"])
    tok.add_bos_token = False
    eos_id = tok.convert_tokens_to_ids(cfg["eos_token"])
    pad_id = tok.convert_tokens_to_ids(cfg["pad_token"])
    torch.manual_seed(cfg["seed"])
    config = LlamaConfig(vocab_size=len(tok), hidden_size=cfg["hidden_size"],
                         intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                         num_attention_heads=cfg["num_attention_heads"],
                         num_key_value_heads=cfg["num_key_value_heads"],
                         max_position_embeddings=cfg["max_position_embeddings"], rope_theta=cfg["rope_theta"],
                         rms_norm_eps=cfg["rms_norm_eps"], tie_word_embeddings=False, initializer_range=0.02,
                         bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id)
    config.dtype = torch.float32
    model = LlamaForCausalLM(config).to(torch.float32)
    keep_answers_visible(model.lm_head.weight, cfg["textless_token_ids"])
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = pad_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    print(json.dumps({"vocab_size": len(tok), "params": sum(p.numel() for p in model.parameters())}))


def keep_answers_visible(head, textless: list[int]) -> None:
    """Output rows of the tokens without text of their own become 0, and one visible token's row the
    negative of another's, so for every hidden state some visible token scores above them (see
    tokenizer.textless_token_ids)."""
    import torch

    skipped = set(textless)
    first, second = [i for i in range(head.shape[0]) if i not in skipped][:2]
    with torch.no_grad():
        head[textless] = 0.0
        head[second] = -head[first]


if __name__ == "__main__":
    main()
