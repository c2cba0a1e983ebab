"""Where finished records go: a local JSONL file at once, and the master in distributed runs.

- Local runner: ``records.jsonl`` in --llm-out; ``requests.csv`` written from it when a test stops.
- Worker: its own ``worker-HOST-PID.jsonl`` as it goes (kept if the master is lost), and the
  records since the last report ride along with Locust's stats report to the master.
- Master: every record received from workers is appended to ``records.jsonl`` as it arrives,
  and ``requests.csv`` is written from it when the test stops.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from locust import events
from locust.runners import MasterRunner, WorkerRunner

from bench_tasks.records_file import RECORDS_JSONL, REQUESTS_CSV, JsonlWriter, read_jsonl, write_csv

REPORT_KEY = "llm_records"


class RecordsSink:
    def __init__(self, environment) -> None:
        self.environment = environment
        self.out_dir = Path(environment.parsed_options.llm_out)
        self.is_worker = isinstance(environment.runner, WorkerRunner)
        self.is_master = isinstance(environment.runner, MasterRunner)
        self.client_host = environment.parsed_options.client_host or socket.gethostname()
        self._writer: JsonlWriter | None = None
        self._pending: list[dict] = []  # worker: not yet reported to the master
        self.count = 0
        self.listeners: list = []  # called with each row where the run's records come together

    def writer(self) -> JsonlWriter:
        # Opened on first use: a worker learns --llm-out only when the run starts.
        if self._writer is None:
            self.out_dir = Path(self.environment.parsed_options.llm_out)
            name = f"worker-{self.client_host}-{os.getpid()}.jsonl" if self.is_worker else RECORDS_JSONL
            self._writer = JsonlWriter(self.out_dir / name)
        return self._writer

    def add(self, row: dict) -> None:
        self.writer().write(row)
        self.count += 1
        if self.is_worker:
            self._pending.append(row)
        else:
            for listener in self.listeners:
                listener(row)

    def take_pending(self) -> list[dict]:
        pending, self._pending = self._pending, []
        return pending

    def write_requests_csv(self) -> Path | None:
        if self._writer is None:
            return None
        rows, _bad = read_jsonl(self._writer.path)
        path = self._writer.path.parent / REQUESTS_CSV
        write_csv(rows, path)
        return path


_sink: RecordsSink | None = None


def sink() -> RecordsSink:
    assert _sink is not None, "the records sink is created by Locust's init event"
    return _sink


@events.init.add_listener
def _create(environment, **_kwargs) -> None:
    global _sink
    _sink = RecordsSink(environment)


@events.report_to_master.add_listener
def _report(client_id, data) -> None:
    if _sink is not None:
        data[REPORT_KEY] = _sink.take_pending()


@events.worker_report.add_listener
def _receive(client_id, data) -> None:
    if _sink is not None:
        for row in data.get(REPORT_KEY, ()):
            _sink.add(row)


@events.test_stop.add_listener
def _write_csv_on_stop(environment, **_kwargs) -> None:
    if _sink is not None and not _sink.is_worker:
        _sink.write_requests_csv()


@events.quitting.add_listener
def _write_csv_on_quit(environment, **_kwargs) -> None:
    if _sink is not None and not _sink.is_worker:
        _sink.write_requests_csv()
