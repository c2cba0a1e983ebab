"""The progress line of a headless run: where it is, read from the files the run writes as it goes.

Nothing here is on the measuring path: finished requests are read from ``records.jsonl`` as the
sink appends them, and the suite's phases and jobs from ``progress.jsonl``, which the suite's
shape writes once per phase and once per job it hands out. The figures are the live table's (the
web UI's LLM tab): TTFT p50, decode tok/s p50 and total tok/s of the current phase so far.

On a terminal the line is rewritten in place twice a second; elsewhere (CI logs, a pipe) a plain
line is printed when a phase ends and every ``HEARTBEAT_S`` while one is running, so a request
that takes minutes (a 128K needle on a slow card) is seen to be in flight, and for how long.
A capacity search also writes a ``note`` per judged step (its verdict), printed as its own line,
and, once its probe has measured the server, an ``eta`` (seconds the search will still take, by its
model) at each phase and verdict: the line counts it down (``about 7 min left``).

The follower is also the command line's backstop: given a stall limit, it gives up when none of
the run's files (records, progress, Locust's log) has moved for that long, and the caller stops
Locust. While a run moves, an ``alive`` line reaches progress.jsonl every few seconds
(locustfiles/activity.py), so a long answer streaming with no record yet is not taken for a stall.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bench_tasks import agent
from bench_tasks.formatting import shown
from bench_tasks.live_table import LiveTable
from bench_tasks.records_file import PROGRESS_JSONL, RECORDS_JSONL

LOCUST_LOG = "locust.log"

HEARTBEAT_S = 30.0  # without a terminal: a line at least this often while a phase runs
TTY_INTERVAL_S = 0.5
PIPE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Plan:
    """What the run will do, when the caller knows it (``run chat``); the suite says it in progress.jsonl."""

    phases: tuple[tuple[str, int], ...] = ()  # (phase, records it will write)
    users: int = 1  # requests in flight at once while the phase runs (no job events)


SUITE_PLAN = Plan()


def chat_plan(requests: int, users: int) -> Plan:
    return Plan((("chat", requests),), users)


class Progress:
    """The run's state as far as the files tell; ``line(now)`` says it in one line."""

    def __init__(self, plan: Plan, t_started: float) -> None:
        self.expected = dict(plan.phases)
        self.order = [name for name, _ in plan.phases]
        self.users = plan.users
        self.job_events = False
        self.current: str | None = self.order[0] if len(self.order) == 1 else None
        self.table = LiveTable()
        self.records = Counter()  # measured records per phase
        self.handed = Counter()  # jobs handed out per phase (suite)
        self.finished = Counter()  # jobs finished per phase (suite)
        self.latest_start: dict[str, float] = {}  # phase -> when its newest request or job began
        self.t_started = t_started
        self.ended = False
        self.run_name = "suite"  # what progress.jsonl says the run is: the suite, or a capacity search
        self.notes: list[str] = []  # lines to print as they are (a capacity step's verdict), not yet shown
        self.eta: tuple[float, float] | None = None  # (seconds the run will still take, when that was read)

    # -- feeding --
    def on_event(self, event: dict, now: float | None = None) -> None:
        kind = event.get("event")
        if kind == "suite":
            self.job_events = True  # the suite says when each job starts: count only those
            self.run_name = event.get("run", self.run_name)
            self.order = [p["phase"] for p in event.get("phases", [])]
            self.expected = {p["phase"]: p["expected_records"] for p in event.get("phases", [])}
        elif kind == "phase":
            self.current = event["phase"]
        elif kind == "job":
            self.handed[event["phase"]] += 1
            self._started(event["phase"], event["t"])
        elif kind == "note":
            self.notes.append(event.get("line", ""))
        elif kind == "eta" and event.get("remaining_s") is not None:
            # The writer's clock is another process's: the countdown runs on ours, from when it was read.
            self.eta = (float(event["remaining_s"]), time.perf_counter() if now is None else now)
        elif kind == "end":
            self.ended = True

    def on_record(self, row: dict) -> None:
        if row.get("scenario") == "warmup":
            return
        phase = row.get("phase", "")
        self.table.add(row)
        self.records[phase] += 1
        if self.current is None:
            self.current = phase
        if _ends_its_job(row):
            self.finished[phase] += 1
        if row.get("t_send") is not None and row.get("e2e_s") is not None:
            self._started(phase, row["t_send"] + row["e2e_s"])  # the next request of a sequence

    def _started(self, phase: str, t: float) -> None:
        self.latest_start[phase] = max(t, self.latest_start.get(phase, t))

    # -- reading --
    def in_flight(self, phase: str) -> int:
        if self.job_events:
            return max(0, self.handed[phase] - self.finished[phase])
        return max(0, min(self.users, self.expected.get(phase, 0) - self.records[phase]))

    def line(self, now: float, phase: str | None = None) -> str:
        """The current phase's state (or ``phase``'s)."""
        parts = [_clock(now - self.t_started)]
        phase = phase or self.current
        if phase is None:
            return " | ".join(parts + ["starting (server check, warm-up)"])
        position = f" {self.order.index(phase) + 1}/{len(self.order)}" if phase in self.order else ""
        parts.append(f"phase{position} {phase}")
        expected = self.expected.get(phase)
        done = f"{self.records[phase]}/{expected} done" if expected else f"{self.records[phase]} done"
        flying = self.in_flight(phase)
        if flying and not self.ended:
            since = self.latest_start.get(phase, self.t_started)
            done += f", {flying} in flight for {_duration(now - since)}"
        parts.append(done)
        figures = {row["phase"]: row for row in self.table.rows()}.get(phase, {})
        if figures.get("errors"):
            parts.append(f"{figures['errors']} failed")
        for key, label, unit, digits in (("ttft_p50_s", "TTFT p50", "s", 3), ("decode_tps_p50", "decode p50", "tok/s", 1),
                                         ("total_tps", "total", "tok/s", 1)):
            if figures.get(key) is not None:  # nothing is said of a figure not measured yet
                parts.append(f"{label} {shown(figures[key], digits)} {unit}")
        if self.ended and phase == self.current:
            parts.append(f"{self.run_name} done")
        elif self.eta is not None and not self.ended:
            parts.append(_time_left(self.eta[0] - (now - self.eta[1])))
        return " | ".join(parts)


def _ends_its_job(row: dict) -> bool:
    """An agent job is a whole session: it ends at its last turn, or at a failed one."""
    if row.get("scenario") != "agent":
        return True
    return not row.get("ok") or (row.get("turn") or 0) >= agent.TURNS


def _time_left(seconds: float) -> str:
    if seconds <= 0:
        return "longer than expected"
    if seconds < 90:
        return f"about {max(5, round(seconds / 5) * 5):.0f} s left"
    return f"about {round(seconds / 60):.0f} min left"


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class Tail:
    """New whole lines of a file that another process appends to (absent until it is created)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        rows = []
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # the records' own reader reports bad lines; here it is only a display
            if isinstance(row, dict):
                rows.append(row)
        return rows


class Printer:
    """One line rewritten in place on a terminal; plain lines, now and then, anywhere else."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.shown_phase: str | None = None
        self.last_print = float("-inf")

    def show(self, progress: Progress, now: float) -> None:
        self._notes(progress)
        changed = progress.current != self.shown_phase
        if self.tty:
            if changed and self.shown_phase is not None:  # the phase that ended keeps its own line
                self._rewrite(progress.line(now, self.shown_phase), end="\n")
            self._rewrite(progress.line(now))
        elif changed or now - self.last_print >= HEARTBEAT_S:
            if changed and self.shown_phase is not None:
                self.stream.write(progress.line(now, self.shown_phase) + "\n")
            self.stream.write(progress.line(now) + "\n")
            self.last_print = now
        self.shown_phase = progress.current
        self.stream.flush()

    def close(self, progress: Progress, now: float) -> None:
        self._notes(progress)
        if self.tty:
            self._rewrite(progress.line(now), end="\n")
        else:
            self.stream.write(progress.line(now) + "\n")
        self.stream.flush()

    def _notes(self, progress: Progress) -> None:
        for line in progress.notes:
            if self.tty:
                self._rewrite(line, end="\n")
            else:
                self.stream.write(line + "\n")
        progress.notes.clear()

    def _rewrite(self, line: str, end: str = "") -> None:
        width = shutil.get_terminal_size((120, 24)).columns
        self.stream.write("\r" + line[: width - 1] + "\x1b[K" + end)


def follow(child, out_dir: Path, plan: Plan, stream: TextIO, stall_s: float | None = None) -> float | None:
    """Show the run's progress until ``child`` (the Locust process) exits; None then. With ``stall_s``:
    when none of the run's files has moved for longer, say so and return how long they were still."""
    progress = Progress(plan, time.perf_counter())
    records, events = Tail(out_dir / RECORDS_JSONL), Tail(out_dir / PROGRESS_JSONL)
    printer = Printer(stream)
    interval_s = TTY_INTERVAL_S if printer.tty else PIPE_INTERVAL_S
    sizes, moved_at = None, time.perf_counter()
    while True:
        exited = child.poll() is not None
        for event in events.read():
            progress.on_event(event, time.perf_counter())
        for row in records.read():
            progress.on_record(row)
        now = time.perf_counter()
        if exited:
            printer.close(progress, now)
            return None
        current = _sizes(out_dir)
        if current != sizes:
            sizes, moved_at = current, now
        elif stall_s is not None and now - moved_at > stall_s:
            printer.close(progress, now)
            stream.write(f"no progress for {now - moved_at:.0f} s: stopping Locust\n")
            stream.flush()
            return now - moved_at
        printer.show(progress, now)
        time.sleep(interval_s)


def _sizes(out_dir: Path) -> tuple[int, ...]:
    """How far each file the run writes has grown (-1: not there yet)."""
    sizes = []
    for name in (RECORDS_JSONL, PROGRESS_JSONL, LOCUST_LOG):
        try:
            sizes.append((out_dir / name).stat().st_size)
        except OSError:
            sizes.append(-1)
    return tuple(sizes)
