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
import warnings
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
from pandas.api.types import infer_dtype

from bench_tasks.apis import CHAT
from bench_tasks.record import COLUMNS, FIELD_TYPES
from bench_tasks import run_failure
from bench_tasks import slo as slos
from bench_tasks.metrics import GAUGE_KEYS
from bench_tasks.records_file import (CAPACITY_JSONL, ENGINE_SERIES_JSONL, LOST_WORKERS_JSONL, MASTER_FILES,
                                      METRICS_JSONL, PROGRESS_JSONL, RECORDS_JSONL, REQUESTS_CSV, SETTINGS_JSON,
                                      SWEEP_JSONL, WORKER_JSONL_GLOB)

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
_SHOWN_LINES = 5  # a problem names at most this many lines
CHUNK_ROWS = 20_000  # rows read and typed at a time
CSV_BLOCK_BYTES = 8 << 20  # bytes of requests.csv read at a time to count its commas


class RunDirError(Exception):
    pass


def load_run(directory: str | Path) -> tuple[pd.DataFrame, dict]:
    """Records of one run directory and facts about them.

    info: ``source`` (file names read), ``complete`` (False when there is no requests.csv: a
    killed or still running run), ``bad_lines`` (rows that could not be read), ``problems`` (one
    sentence each), ``files`` (each file read: the rows read from it), ``from_master`` (rows of
    ``requests.csv`` or the master's ``records.jsonl``; None without either) and ``only_in_workers``
    (records found only in the workers' own files; None when none was read).

    Without requests.csv, the master's (or a local run's) ``records.jsonl`` and the workers' own
    ``worker-*.jsonl`` are read together: a record in several of them (a master's record and its
    worker's copy, or two copies of one worker's file) is kept once.
    """
    directory = Path(directory)
    csv_path = directory / REQUESTS_CSV
    reading = _Reading()
    if csv_path.exists():
        try:
            _read_sound_csv(csv_path, reading)
        except _Damaged:
            reading = _Reading()
            _read_csv(csv_path, reading)
        frame, problems = reading.result()
        return frame, {"source": REQUESTS_CSV, "complete": True, "bad_lines": reading.bad_lines,
                       "problems": problems, "files": {REQUESTS_CSV: len(frame)}, "from_master": len(frame),
                       "only_in_workers": None}
    master = [directory / RECORDS_JSONL] if (directory / RECORDS_JSONL).exists() else []
    workers = sorted(directory.glob(WORKER_JSONL_GLOB))
    if not master and not workers:
        raise RunDirError(f"{directory} holds no requests.csv or records: is it an llm-bench output directory?")
    rows = []
    for path in master + workers:
        before = reading.rows()
        _read_jsonl(path, reading)
        rows.append(reading.rows() - before)
    frame, problems = reading.result()
    part = np.repeat(np.arange(len(rows)), rows)
    in_workers = part >= len(master)
    kept = np.ones(len(frame), dtype=bool)
    kept[in_workers] = _once(frame[in_workers], part[in_workers])
    repeated = int((~kept).sum())
    if repeated:
        problems.append(f"{repeated} record(s) found in more than one worker's file; each kept once")
    kept_in_workers = int(kept[in_workers].sum())
    if master:  # the master's records are copies of the workers': where both are here, one is kept
        kept[kept] = _once(frame[kept], in_workers[kept].astype(int))
    only_in_workers = kept_in_workers - (len(frame) - repeated - int(kept.sum()))
    info = {"source": ", ".join(p.name for p in master + workers), "complete": False, "bad_lines": reading.bad_lines,
            "problems": problems, "files": {p.name: n for p, n in zip(master + workers, rows)},
            "from_master": rows[0] if master else None, "only_in_workers": only_in_workers if workers else None}
    return frame[kept].reset_index(drop=True), info


def load_runs(directories, labels=None) -> tuple[pd.DataFrame, list[str]]:
    """Records of several directories in one frame, and the problems met reading them (``merge_runs``)."""
    return merge_runs([(directory, *load_run(directory)) for directory in directories], labels)


def merge_runs(runs, labels=None) -> tuple[pd.DataFrame, list[str]]:
    """Several runs' records (each: its directory, and its records and info as ``load_run`` gives them) in
    one frame, and the problems met reading them.

    Each row's ``setup`` is its own ``setup`` cell when set, else the label given for its
    directory, else the directory's name, with the API it spoke when not chat (``setup_names``).
    Directories that end up with the same label are one run seen from several client machines: their
    rows are merged (each keeps its ``client_host``). Added columns: ``run_dir`` and ``run_complete``
    (False: no requests.csv). Rows found twice (a master's records and a worker's copy) are kept once, and said so.
    """
    frames, problems = [], []
    for i, (directory, frame, info) in enumerate(runs):
        label = _label(directory, labels[i] if labels and i < len(labels) else None)
        problems += [f"{directory}: {p}" for p in info["problems"]]
        frames.append(frame.assign(setup=setup_names(frame, label), run_dir=str(directory),
                                   run_complete=info["complete"]))
    if not frames:
        return typed(pd.DataFrame(columns=list(COLUMNS))).assign(run_dir="", run_complete=True), problems
    merged = pd.concat(frames, ignore_index=True)
    kept = _once(merged, np.repeat(np.arange(len(frames)), [len(frame) for frame in frames]))
    if not kept.all():
        problems.append(f"{int((~kept).sum())} record(s) found in more than one directory; each kept once")
    merged = merged[kept].reset_index(drop=True)
    return merged, problems + _shared_hosts(merged)


def load_metrics(directory: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """``DIR/metrics.jsonl`` as one row per series reading: phase, when, t, series, value."""
    path = Path(directory) / METRICS_JSONL
    rows, problems, empty, failed = [], [], 0, []
    if path.exists():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if "error" in entry:  # a reading that failed (locustfiles/engine_counters.py)
                    failed.append(f"{entry['when']} {entry['phase']} ({entry['error']})")
                    continue
                rows += [{"phase": entry["phase"], "when": entry["when"], "t": float(entry["t"]),
                          "series": name, "value": float(value)} for name, value in entry["metrics"].items()]
                empty += not entry["metrics"]
            except (ValueError, KeyError, TypeError, AttributeError):
                problems.append(f"{METRICS_JSONL} line {number}: not a metrics reading; skipped")
    if empty:  # the endpoint answered, but not in Prometheus' text format, or without the profile's series
        problems.append(f"{METRICS_JSONL}: {empty} reading(s) of the engine's /metrics held none of the series "
                        "its profile names; the engine's own counters are left out of the report")
    if failed:  # the phase's engine figures are missing, not zero
        problems.append(_unread_metrics(failed, any_read=bool(rows) or empty > 0))
    return pd.DataFrame(rows, columns=["phase", "when", "t", "series", "value"]), problems


def _unread_metrics(failed: list[str], any_read: bool) -> str:
    if not any_read:  # e.g. llama.cpp started without --metrics: one line, not one per phase
        return (f"{METRICS_JSONL}: the engine's /metrics could not be read ({len(failed)} tries; the first: "
                f"{failed[0]}): the report has no engine figures")
    return (f"{METRICS_JSONL}: the engine's /metrics could not be read {'; '.join(failed)}: those phases have "
            "no engine figures")


SERIES_COLUMNS = ["t", "t_wall", "read_s", "runner", *GAUGE_KEYS]


def load_engine_series(directory: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """``DIR/engine_series.jsonl``: the engine's gauges read every second (SERIES_COLUMNS; a gauge the
    engine does not serve is missing), and the problems met reading it."""
    path = Path(directory) / ENGINE_SERIES_JSONL
    rows, problems = [], []
    if path.exists():
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            row = _json_object(line) if line.strip() else None
            if row is None or not isinstance(row.get("t"), (int, float)):
                if line.strip():
                    problems.append(f"{ENGINE_SERIES_JSONL} line {number}: not a reading; skipped")
                continue
            rows.append({column: row.get(column) for column in SERIES_COLUMNS})
    frame = pd.DataFrame(rows, columns=SERIES_COLUMNS)
    numbers = [c for c in SERIES_COLUMNS if c != "runner"]
    frame[numbers] = frame[numbers].apply(pd.to_numeric, errors="coerce").astype(float)
    return frame, problems


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


LOST_COLUMNS = ["worker", "client_host", "client_pid", "lost_at", "phase", "in_flight_jobs", "in_flight",
                "records_finished", "records_received"]


def load_lost_workers(directory: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """``DIR/lost-workers.jsonl`` (distributed runs): one row per worker the master lost, in
    LOST_COLUMNS (a field an older file lacks is missing); problems met reading it."""
    path = Path(directory) / LOST_WORKERS_JSONL
    rows, problems = [], []
    if path.exists():
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            row = _json_object(line)
            if row is None or "worker" not in row:
                problems.append(f"{LOST_WORKERS_JSONL} line {number}: not a lost worker; skipped")
                continue
            rows.append({column: row.get(column) for column in LOST_COLUMNS})
    return pd.DataFrame(rows, columns=LOST_COLUMNS), problems


def master_files(directory: str | Path) -> frozenset[str]:
    """Which of the files only the master (or a local run) writes are in ``directory`` (MASTER_FILES)."""
    return frozenset(name for name in MASTER_FILES if (Path(directory) / name).is_file())


def load_progress(directory: str | Path) -> dict | None:
    """``DIR/progress.jsonl``'s plan: ``phases`` (each planned phase and the measured records it will write)
    and ``opened`` (the phases that began); None without the file."""
    path = Path(directory) / PROGRESS_JSONL
    if not path.exists():
        return None
    plan = {"phases": [], "opened": []}
    for line in path.read_bytes().splitlines():
        event = _json_object(line) if line.strip() else None
        kind = event.get("event") if event else None
        if kind == "suite" and isinstance(event.get("phases"), list):
            plan["phases"] = [(str(p.get("phase")), int(p.get("expected_records") or 0))
                              for p in event["phases"] if isinstance(p, dict)]
        elif kind == "phase":
            plan["opened"].append(str(event.get("phase")))
    return plan


def load_settings(directory: str | Path) -> dict:
    """``DIR/settings.json`` (what was run, against which host, when), or {} when absent."""
    try:
        return json.loads((Path(directory) / SETTINGS_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def load_slo(directory: str | Path) -> tuple[slos.Slo | None, list[str]]:
    """The SLO a capacity search judged its steps by (``DIR/capacity.jsonl``) or a sweep its rates
    (``DIR/sweep.jsonl``, an SLO of ``null`` when it was given none), or None when the directory holds
    neither; problems met reading it."""
    for name, first in ((CAPACITY_JSONL, "search"), (SWEEP_JSONL, "sweep")):
        path = Path(directory) / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
                if event.get("event") == first:
                    return (slos.parse(event["slo"]) if event["slo"] else None), []
            except (ValueError, KeyError, AttributeError) as exc:
                return None, [f"{name}: its SLO cannot be read ({exc}); the tables judged by it are left out"]
        return None, [f"{name}: no {first} line; the tables judged by its SLO are left out"]
    return None, []


def load_overdue(directory: str | Path) -> dict[str, int]:
    """Each judged window's overdue answers, by phase: the search's own count (``step`` lines of
    ``DIR/capacity.jsonl``), which the records cannot tell. A window missing here (no search, or a search
    from before the count) has it missing, never 0."""
    path, overdue = Path(directory) / CAPACITY_JSONL, {}
    for line in path.read_bytes().splitlines() if path.exists() else ():
        event = _json_object(line) if line.strip() else None
        if event and event.get("event") == "step" and isinstance(event.get("overdue"), int):
            overdue[str(event.get("phase"))] = event["overdue"]
    return overdue


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells as read (text from CSV, JSON values) to the Record's types; empty, or not of the column's
    type, means missing. Columns the Record lacks are added (empty); others are kept, as text."""
    return _typed_chunk(frame)[0]


def column_problems(columns, header: bool = True) -> list[str]:
    """Unknown columns (kept), and with ``header`` (a CSV's) the Record's columns it lacks."""
    unknown = [c for c in columns if c not in COLUMNS]
    missing = [c for c in COLUMNS if c not in columns] if header else []
    problems = [f"unknown column {c!r}: kept, not analysed" for c in unknown]
    if missing:
        problems.append(f"missing columns (read as empty): {', '.join(missing)}")
    return problems


class _Reading:
    """Records read a chunk at a time (CHUNK_ROWS rows of JSONL, CSV_BLOCK_BYTES of CSV): each chunk
    is typed at once, so the text of one chunk is held, never the whole file's; what did not fit is
    tallied across chunks."""

    def __init__(self) -> None:
        self.frames: list[pd.DataFrame] = []
        self.read_problems: list[str] = []
        self.bad_lines = 0
        self.columns: dict[str, None] = {}  # every column met, in order
        self.header: list[str] | None = None  # a CSV's header: its missing columns are a problem
        self.bad_values: dict[str, list] = {}  # column -> [count, the first _SHOWN_LINES places]

    def rows(self) -> int:
        """Rows kept so far."""
        return sum(len(frame) for frame in self.frames)

    def bad_line(self, problem: str) -> None:
        self.read_problems.append(problem)
        self.bad_lines += 1

    def add(self, raw: pd.DataFrame, source: str, lines: list[int]) -> None:
        """One chunk: its cells as read, the file they came from and each row's line number."""
        frame, bad = _typed_chunk(raw)
        for column, mask in bad.items():
            tally = self.bad_values.setdefault(column, [0, []])
            where = np.flatnonzero(mask.to_numpy())
            tally[0] += len(where)
            tally[1] += [f"{source} line {lines[i]}" for i in where[:_SHOWN_LINES - len(tally[1])]]
        self.keep(raw.columns, frame)

    def keep(self, columns, frame: pd.DataFrame) -> None:
        """A chunk typed, every value of it fitting its column."""
        self.columns.update(dict.fromkeys(columns))
        self.frames.append(frame)

    def result(self) -> tuple[pd.DataFrame, list[str]]:
        columns = list(self.columns) if self.header is None else self.header
        frames = self.frames or [typed(pd.DataFrame(columns=columns))]
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        extra = [c for c in frame.columns if c not in COLUMNS]
        if extra:  # a column some chunks lacked is empty there, as in the CSV
            frame[extra] = frame[extra].fillna("")
        problems = self.read_problems + column_problems(columns, header=self.header is not None)
        for column in (c for c in COLUMNS if c in self.bad_values):
            count, shown = self.bad_values[column]
            more = f" and {count - len(shown)} more" if count > len(shown) else ""
            problems.append(f"column {column}: {count} value(s) not of type {FIELD_TYPES[column]} "
                            f"({', '.join(shown)}{more}), read as missing")
        return frame, problems


def _typed_chunk(raw: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.Series]]:
    """The Record's columns in their types (added when absent) and the other columns as text; with,
    per column, where a value was there but did not fit its type."""
    columns, bad = {}, {}
    for column in COLUMNS:
        if column in raw:
            columns[column], misfit = _column(raw[column].reset_index(drop=True), FIELD_TYPES[column])
            if misfit is not None and misfit.any():
                bad[column] = misfit
        else:
            columns[column] = _column(pd.Series([None] * len(raw), dtype=object), FIELD_TYPES[column])[0]
    for column in (c for c in raw.columns if c not in COLUMNS):
        columns[column] = _text(raw[column].reset_index(drop=True))
    return pd.DataFrame(columns, index=pd.RangeIndex(len(raw))), bad


def _column(values: pd.Series, kind: str) -> tuple[pd.Series, pd.Series | None]:
    """One column as read in its Record type, and where a value did not fit (None: all did).

    Vectorised for what a run writes (numbers, true/false, text); only the few cells that do not
    parse at once are looked at one by one, with the rules of ``_fits`` and ``_to_bool``."""
    inferred = infer_dtype(values, skipna=True)
    if "bool" in kind:
        return _booleans(values, inferred)
    if "int" in kind or "float" in kind:
        return _numbers(values, inferred, kind)
    return _interned(_text(values, inferred).astype(str)), None


def _numbers(values: pd.Series, inferred: str, kind: str) -> tuple[pd.Series, pd.Series | None]:
    whole = "int" in kind
    if inferred in ("integer", "floating", "mixed-integer-float", "empty"):  # JSON numbers (or nothing)
        numbers, misfit = pd.to_numeric(values, errors="coerce").astype(float), None
    else:
        text = _text(values, inferred)
        numbers = pd.to_numeric(text, errors="coerce").astype(float)
        odd = numbers.isna() & (text != "")
        misfit = odd.copy()
        misfit[odd] = text[odd].map(lambda cell: bool(cell.strip()) and not _fits(cell.strip(), kind))
    if whole:
        fraction = numbers.notna() & (numbers % 1 != 0)  # 2.5, inf: not an int
        misfit = fraction if misfit is None else misfit | fraction
        return numbers.where(~fraction).astype("Int64"), misfit
    return numbers.astype("Float64"), misfit


_BOOL_CELLS = {cell: True for cell in ("True", "true", "1", "yes")} | \
    {cell: False for cell in ("False", "false", "0", "no")}


def _booleans(values: pd.Series, inferred: str) -> tuple[pd.Series, pd.Series | None]:
    if inferred in ("boolean", "empty"):  # JSON true/false (or nothing)
        return values.astype(object).where(values.notna(), None).astype("boolean"), None
    text = _text(values, inferred)
    known = text.map(_BOOL_CELLS).astype(object)
    odd = known.isna() & (text != "")
    known[odd] = text[odd].map(_to_bool)
    misfit = odd & known.isna()
    misfit[misfit] = text[misfit].str.strip() != ""
    return known.where(known.notna(), None).astype("boolean"), misfit


def _text(values: pd.Series, inferred: str | None = None) -> pd.Series:
    """Cells as the CSV would hold them: text, and None an empty cell."""
    inferred = inferred or infer_dtype(values, skipna=True)
    if inferred == "string":
        return values.astype(object).where(values.notna(), "")
    if inferred == "empty":
        return pd.Series("", index=values.index, dtype=object)
    return values.map(_cell, na_action=None).astype(object)


def _interned(text: pd.Series) -> pd.Series:
    """The same text, each distinct value held once: a phase name is not kept 100,000 times."""
    codes, uniques = pd.factorize(text)
    return pd.Series(uniques.take(codes), index=text.index, dtype=text.dtype)


def _fits(cell: str, kind: str) -> bool:
    """A number cell as Python reads it: any float, or for an int column a whole one."""
    try:
        number = float(cell)
    except ValueError:
        return False
    return "float" in kind or number.is_integer()


class _Damaged(Exception):
    """The file is not as csv.writer writes it (a row of the wrong width, a value not of its type, a quote
    never closed): the csv module reads it instead, naming the lines of what is wrong."""


def _read_sound_csv(path: Path, reading: _Reading) -> None:
    """A CSV as csv.writer writes it, read by pandas' C parser CHUNK_ROWS rows at a time.

    The C parser skips a row with too many cells (it warns) and pads one with too few, and cannot say
    on which line a value that does not fit its type stands: any of those raises _Damaged. A short row
    is seen by its commas: a file whose every record has the header's width holds the header's commas
    once per record, and those inside its cells; fewer means a row was cut short."""
    with open(path, "rb") as f:
        first = f.readline()
    header = first.decode("utf-8").rstrip("\r\n").split(",")
    if b'"' in first or first.startswith(b"\xef\xbb\xbf") or len(set(header)) < len(header) or header == [""]:
        raise _Damaged  # a header csv.writer does not write: read as the csv module reads it
    reading.header = header
    types = {name: object for name in header  # text as text; numbers are parsed by the C parser
             if name not in COLUMNS or "str" in FIELD_TYPES[name] or "bool" in FIELD_TYPES[name]}
    rows, commas_in_cells = 0, 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)  # a row with too many cells
            for raw in pd.read_csv(path, dtype=types, engine="c", keep_default_na=False, na_values=[""],
                                   on_bad_lines="warn", chunksize=CHUNK_ROWS, encoding="utf-8"):
                frame, bad = _typed_chunk(raw)
                if bad:  # the csv module names its lines
                    raise _Damaged
                reading.keep(raw.columns, frame)
                text = [raw[column].dropna() for column in raw if not pd.api.types.is_numeric_dtype(raw[column])]
                commas_in_cells += sum("\x00".join(cells).count(",") for cells in text)
                rows += len(raw)
    except (pd.errors.ParserError, pd.errors.ParserWarning, UnicodeDecodeError, TypeError) as exc:
        raise _Damaged from exc
    if _count(path, b",") != (len(header) - 1) * (1 + rows) + commas_in_cells:
        raise _Damaged
    if not reading.frames:
        reading.add(pd.DataFrame({name: pd.Series([], dtype=object) for name in header}), path.name, [])


def _count(path: Path, byte: bytes) -> int:
    with open(path, "rb") as f:
        return sum(block.count(byte) for block in iter(lambda: f.read(CSV_BLOCK_BYTES), b""))


def _read_csv(path: Path, reading: _Reading) -> None:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        reading.header = header
        rows, lines = [], []
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                reading.bad_line(f"{path.name} line {reader.line_num}: {len(row)} cells where the header has "
                                 f"{len(header)}; row skipped")
                continue
            rows.append(row)
            lines.append(reader.line_num)
            if len(rows) == CHUNK_ROWS:
                reading.add(_csv_chunk(rows, header), path.name, lines)
                rows, lines = [], []
        if rows or not reading.frames:
            reading.add(_csv_chunk(rows, header), path.name, lines)


def _csv_chunk(rows: list[list[str]], header: list[str]) -> pd.DataFrame:
    cells = list(zip(*rows)) if rows else [()] * len(header)
    return pd.DataFrame({name: pd.Series(column, dtype=object) for name, column in zip(header, cells)},
                        columns=header)


def _read_jsonl(path: Path, reading: _Reading) -> None:
    rows, lines = [], []
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            row = _json_object(line)
            if row is None:
                reading.bad_line(f"{path.name} line {number}: not a JSON object (cut by a kill?); skipped")
                continue
            rows.append(row)
            lines.append(number)
            if len(rows) == CHUNK_ROWS:
                reading.add(_jsonl_chunk(rows), path.name, lines)
                rows, lines = [], []
    if rows:
        reading.add(_jsonl_chunk(rows), path.name, lines)


def _json_object(line: bytes) -> dict | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            row = json.loads(line)  # NaN and Infinity, which Python's json writes and orjson refuses
        except ValueError:
            return None
    return row if isinstance(row, dict) else None


def _jsonl_chunk(rows: list[dict]) -> pd.DataFrame:
    keys = dict.fromkeys(COLUMNS)
    for row in rows:
        if tuple(row) != COLUMNS:  # what a run writes: the Record's fields, in order
            keys.update(dict.fromkeys(row))
    return pd.DataFrame(rows, columns=list(keys), dtype=object)  # JSON values as they are: 1 stays 1


def _cell(value) -> str:
    """A JSON value as the CSV would hold it: None is an empty cell."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def _to_bool(value):
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return pd.NA
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else pd.NA


def setup_names(frame: pd.DataFrame, label: str) -> pd.Series:
    """Each row's setup: its own ``setup`` (``--setup``), else ``label``; with the API it spoke when not chat
    (``LABEL via messages``), so that runs differing only in ``--api`` are not merged as one run's clients."""
    named = frame["setup"].where(frame["setup"] != "", label)
    spoke = frame["api"].fillna("").astype(str)
    other = ~spoke.isin(("", CHAT))  # empty: a record from before --api, which spoke chat
    return named.where(~other, named.astype(str) + " via " + spoke)


def _label(directory, given: str | None) -> str:
    return given or Path(directory).name or Path(directory).resolve().name


def _once(frame: pd.DataFrame, part: np.ndarray) -> np.ndarray:
    """Which rows to keep when ``frame`` holds parts (files, directories) that may hold copies of one
    another's records: a record found in several parts is kept once, while identical rows within one part
    are each kept (a part holds each of its records once, so there they are distinct records). A row's
    content is hashed only to number its copies within its part; rows are compared on every column."""
    if frame.empty or (part == part[0]).all():  # one part: nothing in it is another's copy
        return np.ones(len(frame), dtype=bool)
    columns = frame[list(COLUMNS)]
    content = pd.util.hash_pandas_object(columns, index=False).to_numpy()
    nth = pd.Series(content).groupby([content, part]).cumcount().to_numpy()
    return ~columns.assign(_nth=nth).duplicated().to_numpy()


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
