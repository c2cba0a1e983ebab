"""Reading records into a DataFrame: the only file input of the analysis.

A run directory holds ``requests.csv`` when the run finished, else the ``records.jsonl`` it was
writing (a killed run), else the workers' own ``worker-*.jsonl`` copies. Types follow the Record,
and an empty cell stays missing (NaN / <NA>), never 0.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench_tasks.record import COLUMNS, FIELD_TYPES
from bench_tasks.records_file import RECORDS_JSONL, REQUESTS_CSV, WORKER_JSONL_GLOB, read_jsonl


class RunDirError(Exception):
    pass


def load_run(directory: str | Path) -> tuple[pd.DataFrame, dict]:
    """Records of one run directory and facts about how complete they are."""
    directory = Path(directory)
    csv_path = directory / REQUESTS_CSV
    if csv_path.exists():
        frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
        info = {"source": REQUESTS_CSV, "complete": True, "bad_lines": 0}
        return typed(frame), info
    jsonl = [directory / RECORDS_JSONL] if (directory / RECORDS_JSONL).exists() else \
        sorted(directory.glob(WORKER_JSONL_GLOB))
    if not jsonl:
        raise RunDirError(f"{directory} holds no requests.csv or records: is it an llm-bench output directory?")
    rows, bad = [], 0
    for path in jsonl:
        more, more_bad = read_jsonl(path)
        rows += more
        bad += more_bad
    info = {"source": ", ".join(p.name for p in jsonl), "complete": False, "bad_lines": bad}
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return typed(frame.astype(object).where(frame.notna(), "")), info


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Strings from CSV/JSON to the Record's types; empty means missing."""
    frame = frame.copy()
    for column in COLUMNS:
        if column not in frame:
            frame[column] = ""
        kind = FIELD_TYPES[column]
        values = frame[column].replace("", None)
        if "bool" in kind:
            frame[column] = values.map(_to_bool).astype("boolean")
        elif "int" in kind:
            frame[column] = pd.to_numeric(values, errors="coerce").astype("Int64")
        elif "float" in kind:
            frame[column] = pd.to_numeric(values, errors="coerce").astype("Float64")
        else:
            frame[column] = frame[column].fillna("").astype(str)
    return frame[list(COLUMNS) + [c for c in frame.columns if c not in COLUMNS]]


def _to_bool(value):
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return pd.NA
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1", "yes")
