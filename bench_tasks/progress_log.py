"""``progress.jsonl``: what a run will do and how far it is, for the command line's progress line.

The plan (each phase and the records it will write), each phase as it opens and each job as it is
handed out, a capacity step's verdict (``note``) and how long the search will still take (``eta``):
once per phase, per job or per step, never per event. llm_bench/progress.py reads it back.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench_tasks.records_file import JsonlWriter
from bench_tasks.suite import Job


class ProgressLog:
    def __init__(self, path: Path, phases, run: str = "suite") -> None:
        self.writer = JsonlWriter(path)
        self._write("suite", run=run,
                    phases=[{"phase": p.name, "expected_records": p.expected_records} for p in phases])

    def phase(self, phase) -> None:
        if phase is not None:
            self._write("phase", phase=phase.name)

    def job(self, job: Job) -> None:
        self._write("job", phase=job.phase, round=job.round, index=job.index)

    def note(self, line: str) -> None:
        """A line the progress output prints as it is (the capacity search's verdict on a step)."""
        self._write("note", line=line)

    def eta(self, remaining_s: float) -> None:
        """How long the run will still take, as far as it can tell now (the capacity search's model)."""
        self._write("eta", remaining_s=remaining_s)

    def end(self) -> None:
        self._write("end")

    def _write(self, event: str, **fields) -> None:
        self.writer.write({"event": event, "t": time.perf_counter(), **fields})
