"""Reading records into a DataFrame: the only file input of the analysis.

A run directory holds ``requests.csv`` when the run finished, else the ``records.jsonl`` it was
writing (a killed run), else the workers' own ``worker-*.jsonl`` copies. Types follow the Record,
and an empty cell stays missing (NaN / <NA>), never 0.

Nothing is dropped in silence: a row that cannot be read (a CSV line with the wrong number of
cells, a JSONL line that is not a JSON object), a value that does not fit its column's type (read
as missing), an unknown column (kept) or a missing one (added, empty) is described in a list of
problems returned alongside the records.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd

from bench_tasks.record import COLUMNS, FIELD_TYPES
from bench_tasks import run_failure
from bench_tasks import slo as slos
from bench_tasks.records_file import CAPACITY_JSONL, METRICS_JSONL, RECORDS_JSONL, REQUESTS_CSV, WORKER_JSONL_GLOB

SETTINGS_JSON = "settings.json"
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
_SHOWN_LINES = 5  # a problem names at most this many lines


class RunDirError(Exception):
    pass


def load_run(directory: str | Path) -> tuple[pd.DataFrame, dict]:
    """Records of one run directory and facts about them.

    info: ``source`` (file names read), ``complete`` (False when there is no requests.csv: a
    killed or still running run), ``bad_lines`` (rows that could not be read) and ``problems``
    (one sentence each).
    """
    directory = Path(directory)
    csv_path = directory / REQUESTS_CSV
    if csv_path.exists():
        raw, problems, bad = _read_csv(csv_path)
        source, complete = REQUESTS_CSV, True
    else:
        paths = [directory / RECORDS_JSONL] if (directory / RECORDS_JSONL).exists() else \
            sorted(directory.glob(WORKER_JSONL_GLOB))
        if not paths:
            raise RunDirError(f"{directory} holds no requests.csv or records: is it an llm-bench output directory?")
        raw, problems, bad = _read_jsonl_files(paths)
        source, complete = ", ".join(p.name for p in paths), False
    problems += column_problems(raw) + value_problems(raw)
    frame = typed(raw.drop(columns=["_source", "_line"]))
    return frame, {"source": source, "complete": complete, "bad_lines": bad, "problems": problems}


def load_runs(directories, labels=None) -> tuple[pd.DataFrame, list[str]]:
    """Records of several directories in one frame, and the problems met reading them.

    Each row's ``setup`` is its own ``setup`` cell when set, else the label given for its
    directory, else the directory's name. Directories that end up with the same label are one
    run seen from several client machines: their rows are merged (each keeps its
    ``client_host``). Added columns: ``run_dir`` and ``run_complete`` (False: no requests.csv).
    Rows found twice (a master's records and a worker's copy) are kept once, and said so.
    """
    frames, problems = [], []
    for i, directory in enumerate(directories):
        frame, info = load_run(directory)
        label = _label(directory, labels[i] if labels and i < len(labels) else None)
        problems += [f"{directory}: {p}" for p in info["problems"]]
        frames.append(frame.assign(setup=frame["setup"].where(frame["setup"] != "", label),
                                   run_dir=str(directory), run_complete=info["complete"]))
    if not frames:
        return typed(pd.DataFrame(columns=list(COLUMNS))).assign(run_dir="", run_complete=True), problems
    merged = _without_duplicates(pd.concat(frames, ignore_index=True), problems)
    return merged, problems + _shared_hosts(merged)


def load_metrics(directory: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """``DIR/metrics.jsonl`` as one row per series reading: phase, when, t, series, value."""
    path = Path(directory) / METRICS_JSONL
    rows, problems = [], []
    if path.exists():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                rows += [{"phase": entry["phase"], "when": entry["when"], "t": float(entry["t"]),
                          "series": name, "value": float(value)} for name, value in entry["metrics"].items()]
            except (ValueError, KeyError, TypeError, AttributeError):
                problems.append(f"{METRICS_JSONL} line {number}: not a metrics reading; skipped")
    return pd.DataFrame(rows, columns=["phase", "when", "t", "series", "value"]), problems


def load_metric_names(directory: str | Path) -> dict:
    """What the engine profile said its series are (``names`` of ``DIR/metrics.jsonl``), or {}."""
    path = Path(directory) / METRICS_JSONL
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                names = json.loads(line).get("names")
            except (ValueError, AttributeError):
                continue
            if isinstance(names, dict):
                return names
    return {}


def load_settings(directory: str | Path) -> dict:
    """``DIR/settings.json`` (what was run, against which host, when), or {} when absent."""
    try:
        return json.loads((Path(directory) / SETTINGS_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def load_slo(directory: str | Path) -> tuple[slos.Slo | None, list[str]]:
    """The SLO a capacity search judged its steps by (``DIR/capacity.jsonl``), or None when the
    directory holds no search; problems met reading it."""
    path = Path(directory) / CAPACITY_JSONL
    if not path.exists():
        return None, []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
            if event.get("event") == "search":
                return slos.parse(event["slo"]), []
        except (ValueError, KeyError, AttributeError) as exc:
            return None, [f"{CAPACITY_JSONL}: its SLO cannot be read ({exc}); the capacity tables are left out"]
    return None, [f"{CAPACITY_JSONL}: no search line; the capacity tables are left out"]


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Strings from CSV/JSON to the Record's types; empty, or not of the column's type, means missing."""
    frame = frame.copy()
    for column in COLUMNS:
        if column not in frame:
            frame[column] = ""
        kind = FIELD_TYPES[column]
        values = frame[column].replace("", None)
        if "bool" in kind:
            frame[column] = values.map(_to_bool).astype("boolean")
        elif "int" in kind:
            numbers = pd.to_numeric(values, errors="coerce")
            frame[column] = numbers.where(numbers % 1 == 0).astype("Int64")
        elif "float" in kind:
            frame[column] = pd.to_numeric(values, errors="coerce").astype("Float64")
        else:
            frame[column] = frame[column].fillna("").astype(str)
    return frame[list(COLUMNS) + [c for c in frame.columns if c not in COLUMNS]]


def column_problems(raw: pd.DataFrame) -> list[str]:
    known = set(COLUMNS) | {"_source", "_line"}
    unknown = [c for c in raw.columns if c not in known]
    missing = [c for c in COLUMNS if c not in raw.columns]
    problems = [f"unknown column {c!r}: kept, not analysed" for c in unknown]
    if missing:
        problems.append(f"missing columns (read as empty): {', '.join(missing)}")
    return problems


def value_problems(raw: pd.DataFrame) -> list[str]:
    """Cells that do not fit their column's type: they are read as missing, and said so here."""
    problems = []
    for column in (c for c in COLUMNS if c in raw.columns):
        cells = raw[column].fillna("").astype(str).str.strip()
        bad = (cells != "") & ~cells.map(lambda cell: _fits(cell, FIELD_TYPES[column]))
        if bad.any():
            where = _where(raw[bad])
            problems.append(f"column {column}: {int(bad.sum())} value(s) not of type {FIELD_TYPES[column]} "
                            f"({where}), read as missing")
    return problems


def _fits(cell: str, kind: str) -> bool:
    if "bool" in kind:
        return cell.lower() in _TRUE + _FALSE
    if "int" in kind or "float" in kind:
        try:
            number = float(cell)
        except ValueError:
            return False
        return "float" in kind or number.is_integer()
    return True


def _where(rows: pd.DataFrame) -> str:
    shown = [f"{s} line {n}" for s, n in zip(rows["_source"], rows["_line"])][:_SHOWN_LINES]
    more = len(rows) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _read_csv(path: Path) -> tuple[pd.DataFrame, list[str], int]:
    rows, problems = [], []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                problems.append(f"{path.name} line {line}: {len(row)} cells where the header has "
                                f"{len(header)}; row skipped")
                continue
            rows.append({**dict(zip(header, row)), "_source": path.name, "_line": line})
    return pd.DataFrame(rows, columns=[*header, "_source", "_line"]), problems, len(problems)


def _read_jsonl_files(paths: list[Path]) -> tuple[pd.DataFrame, list[str], int]:
    rows, problems = [], []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    row = None
                if not isinstance(row, dict):
                    problems.append(f"{path.name} line {number}: not a JSON object (cut by a kill?); skipped")
                    continue
                rows.append({**{k: _cell(v) for k, v in row.items()}, "_source": path.name, "_line": number})
    columns = list(dict.fromkeys([*COLUMNS, *(k for row in rows for k in row)]))
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype(object).where(frame.notna(), ""), problems, len(problems)


def _cell(value) -> str:
    """A JSON value as the CSV would hold it: None is an empty cell."""
    if value is None:
        return ""
    return str(value)


def _to_bool(value):
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return pd.NA
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else pd.NA


def _label(directory, given: str | None) -> str:
    return given or Path(directory).name or Path(directory).resolve().name


def _without_duplicates(merged: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    twice = merged.duplicated(subset=list(COLUMNS))
    if twice.any():
        problems.append(f"{int(twice.sum())} record(s) found in more than one directory; each kept once")
    return merged[~twice].reset_index(drop=True)


def _shared_hosts(merged: pd.DataFrame) -> list[str]:
    """Directories merged under one label should be different client machines of one run."""
    problems = []
    for (setup, host), group in merged.groupby(["setup", "client_host"], sort=False):
        dirs = group["run_dir"].unique()
        if len(dirs) > 1:
            problems.append(f"setup {setup!r}: client {host!r} appears in {', '.join(dirs)}: merged as one run; "
                            "if these are separate runs, give them different labels")
    return problems


def load_failure(directory: str | Path) -> dict | None:
    """What ended the run early (``DIR/failure.json``: cause, where, during), or None when it did not
    fail. A run that failed is incomplete even when its requests.csv was written."""
    return run_failure.read(Path(directory))
