"""The simulated engine's settings: one dataclass, mirrored one-to-one by the command line.

Every field `some_name` is the CLI flag `--some-name`; booleans get `--name/--no-name`.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

# Faults that shape a 200 stream; the default pool for random injection.
STREAM_FAULTS = ("drop", "malformed", "error_event", "stall", "no_done", "no_usage", "keepalive", "crlf", "split",
                 "buffered")
# Faults that replace the whole response (hang: none at all, the connection held open).
RESPONSE_FAULTS = ("http500", "http429", "non_sse", "hang")
FAULT_KINDS = STREAM_FAULTS + RESPONSE_FAULTS
FAULT_MODEL_PREFIX = "fault/"  # asking for model fault/KIND injects KIND, like the X-Sim-Fault header
PREFILL_MODES = ("concurrent", "batched")

HELP = {
    "host": "address to bind (keep 127.0.0.1)",
    "port": "TCP port; 0 picks a free one and reports it on the ready line",
    "model": "model id served by /v1/models",
    "slots": "requests served at once; the rest wait FIFO",
    "prefill_tps": "prompt tokens per second: per slot in prefill mode concurrent, the engine's in batched",
    "prefill_mode": "concurrent: each slot reads its prompt on its own, decoding never waits; batched: one "
                    "compute loop as llama.cpp's and vLLM's chunked prefill, prompts read in chunks of up to "
                    "n_batch tokens (less one per decoding stream) with every decoding stream paused, each "
                    "chunk followed by one decode step",
    "n_batch": "tokens per batch in prefill mode batched (llama.cpp's --batch-size, vLLM's "
               "max_num_batched_tokens): one per decoding stream, the rest prompt tokens",
    "decode_tps": "tokens per second of one request decoding alone",
    "decode_slowdown": "per-request rate = decode_tps / (1 + decode_slowdown * (decoding - 1))",
    "tokens_per_event": "tokens per content event (>1 imitates vLLM's speculative decoding)",
    "draft_tokens": "llama.cpp-style speculative decoding: tokens drafted per step (0: off); each step costs one "
                    "token's time and sends its accepted tokens as separate events, back to back",
    "draft_acceptance": "chance that each drafted token is accepted (in order, until the first rejection)",
    "base_latency_s": "seconds added before prefill",
    "ctx_len": "context size; prompt_tokens + max_tokens beyond it gets HTTP 400",
    "prefix_cache": "reuse earlier prompts' whole blocks as cached tokens",
    "cache_block_tokens": "prefix cache block size in tokens",
    "cache_blocks": "prefix cache capacity in blocks (LRU)",
    "truth_log": "JSONL file: one line of true timings per finished request",
    "fault_rate": "probability of injecting a random fault into a request",
    "fault_kinds": "comma list of kinds for random injection, from " + ",".join(FAULT_KINDS),
    "seed": "seed of the random fault injection",
    "answer_tokens_min": "shortest natural answer in tokens",
    "answer_tokens_max": "longest natural answer in tokens",
    "stall_s": "seconds the stall fault stays silent before closing",
    "never_answer": "the N-th completion request (counted from 1, every API) is never answered: fault hang, "
                    "nothing sent, the connection held open until the client closes it (0: none; POST "
                    "/sim/never-answer chooses one while it runs)",
    "reasoning_tokens": "a thinking model: reasoning tokens (delta.reasoning_content; Responses' reasoning_text, "
                        "Messages' thinking) before each chat answer (0: off); a request with chat_template_kwargs "
                        "enable_thinking false gets none",
    "kv_tokens": "KV cache capacity in tokens, for vllm:kv_cache_usage_perc (tokens held by admitted requests "
                 "over this; admission ignores it)",
}


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port (the CLI defaults to 8000)
    model: str = "sim-model"
    slots: int = 4
    prefill_tps: float = 40000.0
    prefill_mode: str = "concurrent"
    n_batch: int = 2048  # llama.cpp's default --batch-size
    decode_tps: float = 120.0
    decode_slowdown: float = 0.08
    tokens_per_event: int = 1
    draft_tokens: int = 0
    draft_acceptance: float = 0.7
    base_latency_s: float = 0.0
    ctx_len: int = 163840
    prefix_cache: bool = True
    cache_block_tokens: int = 64
    cache_blocks: int = 65536
    truth_log: str | None = None
    fault_rate: float = 0.0
    fault_kinds: str = ",".join(STREAM_FAULTS)
    seed: int = 0
    answer_tokens_min: int = 40
    answer_tokens_max: int = 160
    stall_s: float = 30.0
    never_answer: int = 0
    reasoning_tokens: int = 0
    kv_tokens: int = 262144

    def __post_init__(self) -> None:
        if not isinstance(self.fault_kinds, str):  # accept a list too
            self.fault_kinds = ",".join(self.fault_kinds)
        if self.slots < 1 or self.tokens_per_event < 1 or self.cache_block_tokens < 1:
            raise ValueError("slots, tokens_per_event and cache_block_tokens must be at least 1")
        if self.prefill_tps <= 0 or self.decode_tps <= 0:
            raise ValueError("prefill_tps and decode_tps must be positive")
        if self.draft_tokens < 0 or not 0.0 <= self.draft_acceptance <= 1.0:
            raise ValueError("draft_tokens must be >= 0 and draft_acceptance in [0, 1]")
        if self.draft_tokens and self.tokens_per_event != 1:
            raise ValueError("draft_tokens (llama.cpp-style, one event per token) needs tokens_per_event 1")
        if self.prefill_mode not in PREFILL_MODES:
            raise ValueError(f"prefill_mode must be one of {', '.join(PREFILL_MODES)}")
        if self.n_batch < 1 or self.kv_tokens < 1 or self.reasoning_tokens < 0 or self.never_answer < 0:
            raise ValueError("n_batch and kv_tokens must be at least 1, reasoning_tokens and never_answer at least 0")
        if not 1 <= self.answer_tokens_min <= self.answer_tokens_max:
            raise ValueError("need 1 <= answer_tokens_min <= answer_tokens_max")
        unknown = set(self.fault_kind_list()) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")

    def fault_kind_list(self) -> list[str]:
        return [kind.strip() for kind in self.fault_kinds.split(",") if kind.strip()]

    def to_argv(self) -> list[str]:
        """The CLI flags that rebuild this config in a child process."""
        argv = []
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            flag = "--" + spec.name.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            elif value is not None:
                argv += [flag, str(value)]
        return argv


def build_parser(default_port: int = 8000, prog: str = "python -m simengine") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="llm-bench's simulated engine")
    for spec in dataclasses.fields(SimConfig):
        flag = "--" + spec.name.replace("_", "-")
        default = default_port if spec.name == "port" else spec.default
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=HELP[spec.name])
        else:
            kind = type(default) if default is not None else str
            choices = PREFILL_MODES if spec.name == "prefill_mode" else None
            parser.add_argument(flag, type=kind, default=default, choices=choices,
                                help=f"{HELP[spec.name]} (default {default})")
    return parser
