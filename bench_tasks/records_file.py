"""Records on disk: JSONL appended as requests finish, and the requests.csv made from it.

JSONL is the durable form (one flushed line per finished request, so a killed run keeps every
finished request); requests.csv is the merged, ordered table people open.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path

import orjson

from bench_tasks.record import COLUMNS
from bench_tasks.run_failure import FAILURE_JSON, FAILURE_TXT

RECORDS_JSONL = "records.jsonl"  # local runner or master: every record of the run
REQUESTS_CSV = "requests.csv"
WORKER_JSONL_GLOB = "worker-*.jsonl"  # each worker's own copy, written as it goes
LOST_WORKERS_JSONL = "lost-workers.jsonl"  # distributed runs: a worker that died, and what it held
METRICS_JSONL = "metrics.jsonl"  # the engine's Prometheus counters before and after each phase
PROGRESS_JSONL = "progress.jsonl"  # the suite's plan, each phase's opening and each job handed out
CAPACITY_JSONL = "capacity.jsonl"  # capacity search: its SLO and options, each step's verdict, the result
SWEEP_JSONL = "sweep.jsonl"  # an open loop's sweep: its SLO and options (event "sweep"), each step, the result
ENGINE_SERIES_JSONL = "engine_series.jsonl"  # the engine's queue and cache, read every second during the run
STALLS_CSV = "stalls.csv"  # the report's: one row per stall, with its cause
SETTINGS_JSON = "settings.json"  # llm-bench's: the command line, the server's models, the client's versions
# What only the process where the records come together writes (a local runner, or the master): a master
# that dies takes what they would have said with it; the workers keep only their worker-*.jsonl.
MASTER_FILES = (RECORDS_JSONL, REQUESTS_CSV, METRICS_JSONL, PROGRESS_JSONL, CAPACITY_JSONL, SWEEP_JSONL,
                LOST_WORKERS_JSONL, ENGINE_SERIES_JSONL, FAILURE_JSON, SETTINGS_JSON)


# What a Locust run leaves in its directory (records, the engine's counters, progress, the report), and
# what llm-bench writes beside it before Locust starts. A new run moves an earlier run's files aside.
RUN_FILES = (RECORDS_JSONL, REQUESTS_CSV, METRICS_JSONL, PROGRESS_JSONL, CAPACITY_JSONL, SWEEP_JSONL,
             LOST_WORKERS_JSONL, ENGINE_SERIES_JSONL, WORKER_JSONL_GLOB, "client-*.json", "summary.md", "summary.csv",
             "report.html", "engine_clock.csv", STALLS_CSV, "*.png", FAILURE_JSON, FAILURE_TXT)
CLI_RUN_FILES = (*RUN_FILES, SETTINGS_JSON, "locust.log", "sim-truth.jsonl")
EARLIER_RUNS = "earlier-runs"


def archive_run(directory: Path, patterns: tuple[str, ...] = RUN_FILES) -> Path | None:
    """Move an earlier run's files in ``directory`` to ``directory/earlier-runs/N`` (N = 1, 2, ...):
    a new run's files are then its own, and nothing of the earlier one is lost."""
    present = sorted({path for pattern in patterns for path in directory.glob(pattern) if path.is_file()})
    if not present:
        return None
    earlier = directory / EARLIER_RUNS
    target = earlier / str(1 + sum(1 for p in earlier.glob("*") if p.is_dir()) if earlier.exists() else 1)
    target.mkdir(parents=True)
    for path in present:
        path.rename(target / path.name)
    return target


class JsonlWriter:
    """Append-only, flushed per line: the OS has every finished record even if we are killed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the run

    def write(self, row: dict) -> None:
        # One write per line, unbuffered: the OS has the line at once. orjson: a record a request,
        # and json.dumps cost more than reading the request's first dozen events.
        self._file.write(orjson.dumps(row) + b"\n")

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: Path) -> tuple[list[dict], int]:
    """Rows and the number of unreadable lines (a line cut by a kill is counted, not fatal)."""
    rows, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                bad += 1
    return rows, bad


def write_csv(rows: Iterable[dict], path: Path) -> int:
    """Write rows in COLUMNS order; None becomes an empty cell (missing, never 0)."""
    tmp = path.with_suffix(".csv.tmp")
    count = 0
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            count += 1
    tmp.replace(path)  # never a half-written requests.csv
    return count
