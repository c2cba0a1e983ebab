"""Short column keys for setups (A, B, C, ...) and the legend that spells each one out.

Pure: the setups' labels, header facts and ``settings.json`` contents in, a DataFrame out. What a
legend line says about the server comes from what the run saved of it: the served model's entry
in ``/v1/models`` (``owned_by``, ``max_model_len``, llama.cpp's ``meta``) and llama.cpp's ``/props``.
"""

from __future__ import annotations

import string
from pathlib import PurePath

import pandas as pd

from bench_tasks.formatting import MISSING

LEGEND_COLUMNS = ["key", "setup", "engine", "model", "api", "server"]


def setup_keys(labels: list[str]) -> dict[str, str]:
    """label -> key: A to Z, then AA, AB, ... as spreadsheet columns go."""
    def key(i: int) -> str:
        letters = ""
        i += 1
        while i:
            i, rest = divmod(i - 1, 26)
            letters = string.ascii_uppercase[rest] + letters
        return letters

    return {label: key(i) for i, label in enumerate(labels)}


def _model_entry(settings: dict, model: str) -> dict:
    entries = [e for e in (settings.get("models") or {}).get("data") or [] if isinstance(e, dict)]
    return next((e for e in entries if e.get("id") == model), entries[0] if entries else {})


def _parameters(count) -> str:
    return f"{count / 1e9:.1f}B parameters" if count >= 1e9 else f"{count / 1e6:.0f}M parameters"


def server_settings(settings: dict, model: str) -> str:
    """What the server said about itself, in words; empty when the run saved nothing of it."""
    entry, props = _model_entry(settings, model), settings.get("props") or {}
    meta = entry.get("meta") or {}
    context = entry.get("max_model_len") or meta.get("n_ctx") or \
        (props.get("default_generation_settings") or {}).get("n_ctx")
    parts = [f"owned by {entry['owned_by']}" if entry.get("owned_by") else "",
             _parameters(meta["n_params"]) if isinstance(meta.get("n_params"), (int, float)) else "",
             str(meta.get("ftype") or props.get("model_ftype") or ""),
             f"context {context}" if context else "",
             f"{props['total_slots']} slots" if props.get("total_slots") else "",
             f"file {PurePath(props['model_path']).name}" if props.get("model_path") else "",
             f"build {props['build_info']}" if props.get("build_info") else "",
             f"at {settings['host']}" if settings.get("host") else ""]
    return ", ".join(p for p in parts if p)


def legend(keys: dict[str, str], facts: dict[str, dict], settings: dict[str, dict]) -> pd.DataFrame:
    """One line per setup: its key, its label (``--setup``), engine profile, model, API and server settings."""
    lines = [{"key": key, "setup": label, "engine": facts[label]["engine"], "model": facts[label]["model"],
              "api": facts[label].get("api", ""),
              "server": server_settings(settings.get(label, {}), facts[label]["model"])}
             for label, key in keys.items()]
    return pd.DataFrame(lines, columns=LEGEND_COLUMNS)


def legend_items(table: pd.DataFrame) -> list[str]:
    """The legend as sentences: ``**A**: label (engine X, model Y, API Z; server settings)``."""
    items = []
    for line in table.to_dict("records"):
        said = [f"engine {line['engine']}" if line["engine"] else "", f"model {line['model']}" if line["model"] else "",
                f"API {line['api']}" if line["api"] else ""]
        text = ", ".join(s for s in said if s)
        if line["server"]:
            text += f"; {line['server']}"
        items.append(f"**{line['key']}**: {line['setup'] or MISSING}" + (f" ({text})" if text else ""))
    return items
