"""Records on disk: JSONL appended as requests finish, and the requests.csv made from it.

JSONL is the durable form (one flushed line per finished request, so a killed run keeps every
finished request); requests.csv is the merged, ordered table people open.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path

from bench_tasks.record import COLUMNS

RECORDS_JSONL = "records.jsonl"  # local runner or master: every record of the run
REQUESTS_CSV = "requests.csv"
WORKER_JSONL_GLOB = "worker-*.jsonl"  # each worker's own copy, written as it goes
LOST_WORKERS_JSONL = "lost-workers.jsonl"  # distributed runs: a worker that died, and what it held
METRICS_JSONL = "metrics.jsonl"  # the engine's Prometheus counters before and after each phase


class JsonlWriter:
    """Append-only, flushed per line: the OS has every finished record even if we are killed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run

    def write(self, row: dict) -> None:
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._file.flush()

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
