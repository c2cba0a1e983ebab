"""Files of the user's traffic, in the formats as their projects document them, written by the tests (never
committed): prompt files (vLLM's custom dataset, ``{"prompt"}`` lines; OpenAI chat ``messages``), ShareGPT
conversations (``conversations`` of ``from``/``value`` turns, as vLLM's benchmark reads them) and Mooncake
traces (kvcache-ai/Mooncake FAST25-release/README.md: ``timestamp`` in ms, ``input_length``,
``output_length``, ``hash_ids`` of 512-token blocks)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

# The two requests of the README's "Trace Format": they share their first 12 hash ids, 6144 tokens.
MOONCAKE_README_EXAMPLE = (
    {"timestamp": 27482, "input_length": 6955, "output_length": 52,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]},
    {"timestamp": 30535, "input_length": 6472, "output_length": 26,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]},
)


def write_jsonl(path: Path, rows: Iterable) -> Path:
    """One JSON value a line (``str`` rows are written as they are: a malformed line on purpose)."""
    with open(path, "wb") as file:
        for row in rows:
            file.write((row.encode() if isinstance(row, str) else orjson.dumps(row)) + b"\n")
    return path


def write_json_array(path: Path, items: Iterable, indent: int | None = 2) -> Path:
    """A JSON array written item by item, as ShareGPT's dumps are (``indent=2``: an item spans lines)."""
    with open(path, "w", encoding="utf-8") as file:
        file.write("[")
        for number, item in enumerate(items):
            text = json.dumps(item, indent=indent, ensure_ascii=False)
            file.write(("," if number else "") + "\n" + text)
        file.write("\n]\n")
    return path


def sharegpt(number: int, turns: int = 2, system: str | None = None) -> dict:
    """A ShareGPT conversation: ``turns`` questions each with its answer."""
    conversation = [{"from": "system", "value": system}] if system is not None else []
    for turn in range(1, turns + 1):
        conversation += [{"from": "human", "value": f"Question {turn} of conversation {number}: why is the sky blue?"},
                         {"from": "gpt", "value": f"Answer {turn} of conversation {number}: Rayleigh scattering."}]
    return {"id": f"conv-{number}", "conversations": conversation}


def mooncake_rows(requests: int, seed: int = 1, block_tokens: int = 512, max_input: int = 64000,
                  rate_per_s: float = 5.0, ids_in_order: bool = True) -> Iterator[dict]:
    """A production-like trace: Poisson arrivals; a fifth of the requests open a conversation after one of
    20 shared system prompts (1-4 blocks), the others continue an open conversation (its full blocks
    again, then more). Hash ids are numbered as they first appear, from 0, as Mooncake remaps them
    (``ids_in_order=False``: the system prompts' ids first, so that later ones come out of order).
    Streamed: a million lines cost nothing to hold."""
    rng = random.Random(seed)
    next_id, timestamp = 0, 0.0
    systems: list[list[int] | int] = [rng.randint(1, 4) for _ in range(20)]  # a block count until first used
    if not ids_in_order:
        for number, blocks in enumerate(systems):
            systems[number], next_id = list(range(next_id, next_id + blocks)), next_id + blocks
    open_conversations: list[tuple[list[int], int]] = []  # (hash ids, input_length) of the last request
    for _ in range(requests):
        timestamp += rng.expovariate(rate_per_s) * 1000
        if open_conversations and rng.random() < 0.8:
            slot = rng.randrange(len(open_conversations))
            ids, length = open_conversations[slot]
            prefix = ids[:length // block_tokens]  # a partial last block is never shared
            length = min(max_input, length + rng.randint(100, 3000))
        else:
            slot, system = None, rng.randrange(len(systems))
            if isinstance(systems[system], int):
                systems[system], next_id = list(range(next_id, next_id + systems[system])), next_id + systems[system]
            prefix = list(systems[system])
            length = len(prefix) * block_tokens + rng.randint(50, 4000)
        blocks = -(-length // block_tokens)
        prefix = prefix[:blocks]
        ids = prefix + list(range(next_id, next_id + blocks - len(prefix)))
        next_id += blocks - len(prefix)
        if slot is None:
            open_conversations.append((ids, length))
            if len(open_conversations) > 500:
                open_conversations.pop(rng.randrange(len(open_conversations)))
        elif length >= max_input:
            open_conversations.pop(slot)
        else:
            open_conversations[slot] = (ids, length)
        yield {"timestamp": int(timestamp), "input_length": length, "output_length": rng.randint(1, 800),
               "hash_ids": ids}
