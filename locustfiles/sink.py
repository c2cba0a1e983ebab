"""Where finished records go: a local JSONL file at once, and the master in distributed runs.

- Local runner: ``records.jsonl`` in --out; ``requests.csv`` written from it when a test stops.
- Worker: its own ``worker-HOST-PID.jsonl`` as it goes (kept if the master is lost), and the
  records since the last report ride along with Locust's stats report to the master.
- Master: every record received from workers is appended to ``records.jsonl`` as it arrives,
  and ``requests.csv`` is written from it when the test stops.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path

import gevent
import gevent.subprocess
from locust.runners import MasterRunner, WorkerRunner

from bench_tasks.records_file import RECORDS_JSONL, REQUESTS_CSV, JsonlWriter, archive_run, read_jsonl, write_csv
from locustfiles.activity import Activity

REPORT_KEY = "llm_records"


class RecordsSink:
    """The run's records (``environment.llm.sink``); ``listeners`` are called with each row where the
    run's records come together (the LLM tab's table, the capacity search)."""

    def __init__(self, environment, activity: Activity) -> None:
        self.environment = environment
        self.activity = activity
        self.out_dir = Path(environment.parsed_options.out)
        self.is_worker = isinstance(environment.runner, WorkerRunner)
        self.is_master = isinstance(environment.runner, MasterRunner)
        self.client_host = environment.parsed_options.client_host or socket.gethostname()
        self._writer: JsonlWriter | None = None
        self._pending: list[dict] = []  # worker: not yet reported to the master
        self.count = 0
        self.rows_written = 0  # in requests.csv when it was last written
        self.listeners: list = []
        self._reports: list[gevent.Greenlet] = []
        self._reported: dict[Path, int] = {}  # run directory -> how many records its last report was asked for

    def writer(self) -> JsonlWriter:
        # Opened on first use: a worker learns --out only when the run starts.
        if self._writer is None:
            self.out_dir = Path(self.environment.parsed_options.out).resolve()
            name = f"worker-{self.client_host}-{os.getpid()}.jsonl" if self.is_worker else RECORDS_JSONL
            self._writer = JsonlWriter(self.out_dir / name)
        return self._writer

    def add(self, row: dict) -> None:
        self.writer().write(row)
        self.activity.note()
        self.count += 1
        if self.is_worker:
            self._pending.append(row)
        else:
            for listener in self.listeners:
                listener(row)

    def start_new_run(self) -> None:
        """A run begins: an earlier run's files in --out (an earlier run of this web UI, or of
        another process) move to ``earlier-runs/N``, so this run's records and report are its own."""
        self._reported.clear()  # a new run's records are reported even when they are as many as the last run's
        if self.is_worker:
            return
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.out_dir = Path(self.environment.parsed_options.out).resolve()
        archive_run(self.out_dir)  # an earlier run's failure.json too: this run has not failed

    def take_pending(self) -> list[dict]:
        pending, self._pending = self._pending, []
        return pending

    def end_run(self) -> None:
        """The run stopped: requests.csv, and the report (unless --no-llm-report), where records come together."""
        if self.is_worker:
            return
        written = self.write_requests_csv()
        options = self.environment.parsed_options
        if written is not None and options is not None and not options.no_llm_report:
            self._queue_report(self.out_dir, self.rows_written)

    def write_requests_csv(self) -> Path | None:
        if self._writer is None:
            return None
        rows, _bad = read_jsonl(self._writer.path)
        path = self._writer.path.parent / REQUESTS_CSV
        write_csv(rows, path)
        self.rows_written = len(rows)
        return path

    def quit(self) -> None:
        """Locust quits: requests.csv once more, and a headless run ends with its report written."""
        if not self.is_worker:
            self.write_requests_csv()
        gevent.joinall(self._reports, timeout=REPORT_TIMEOUT_S)

    def _queue_report(self, out_dir: Path, rows: int) -> None:
        """A report after the ones already on their way (two would write the same files at once), and none
        for records already reported: a failed run stops twice (the failure, then the quit) with the same
        records."""
        if self._reported.get(out_dir) == rows:
            return
        self._reported[out_dir] = rows
        before = list(self._reports)

        def after_the_others() -> None:
            gevent.joinall(before, timeout=REPORT_TIMEOUT_S)
            _write_report(out_dir)

        self._reports.append(gevent.spawn(after_the_others))


REPORT_TIMEOUT_S = 300


def _write_report(out_dir: Path) -> None:
    """The run's report, by ``llm-bench report`` in a process of its own: the measuring process never
    imports the reporting code, and its event loop keeps running while the charts are drawn (gevent's
    subprocess, whether or not the process was patched)."""
    result = gevent.subprocess.run([sys.executable, "-m", "llm_bench.cli", "report", str(out_dir)],
                            capture_output=True, text=True, timeout=REPORT_TIMEOUT_S)
    if result.returncode == 0:
        logging.info("llm-bench: report written to %s", out_dir / "report.html")
    else:
        logging.warning("llm-bench: the report could not be written: %s", result.stderr.strip()[-500:])
