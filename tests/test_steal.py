"""A virtual machine's host taking the client's CPUs (steal): read per CPU, kept per request, flagged and warned.

The host is played to the client from a file of /proc/stat's form (LLM_BENCH_STEAL_STAT), rewritten in place
while the run goes, as the kernel's counters move: the client keeps the file open and reads it again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from bench_tasks.steal import Steal, most_stolen_s, per_cpu_steal_ticks
from locustfiles.guard import Guard
from tests.conftest import load_records, run_cli

STAT = """cpu  300 0 200 9000 10 0 5 %(sum)d 0 0
cpu0 150 0 100 4500 5 0 2 %(cpu0)d 0 0
cpu1 150 0 100 4500 5 0 3 %(cpu1)d 0 0
intr 1234 0 9 0 0
ctxt 5678
"""


def test_each_cpus_steal_is_read_from_its_own_line():
    assert per_cpu_steal_ticks((STAT % {"sum": 70, "cpu0": 20, "cpu1": 50}).encode()) == (20, 50)


@pytest.mark.parametrize("text", [
    b"cpu  1 2 3 4 5 6 7 8 0 0\nintr 1\n",  # the sum only, no CPU of its own
    b"cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\nintr 1\n",  # a kernel that counts no steal
    b"cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1 2 3",  # a read cut short
    b"",
], ids=["no-per-cpu-line", "no-steal-field", "cut-short", "empty"])
def test_a_stat_without_every_cpus_steal_is_no_reading(text):
    assert per_cpu_steal_ticks(text) is None


def test_the_most_any_one_cpu_lost_and_missing_when_it_cannot_be_known():
    assert most_stolen_s((1.0, 2.0), (1.03, 2.01)) == pytest.approx(0.03)  # the most, not the sum
    assert most_stolen_s((1.0, 2.0), (1.0, 2.0)) == 0.0
    assert most_stolen_s((0.03, 0.0), (0.07, 0.0)) == 0.04  # whole ticks: exactly the guard's limit, not above it
    assert most_stolen_s(None, (1.0,)) is None and most_stolen_s((1.0,), None) is None
    assert most_stolen_s((1.0, 2.0), (1.0, 2.0, 0.0)) is None  # a CPU came online between the readings


class Played:
    """Steal readings handed out one a read, as a machine's counters would move."""

    def __init__(self, *readings) -> None:
        self.readings = list(readings)

    def read(self):
        return self.readings.pop(0)


def test_the_most_a_cpu_lost_at_once_is_the_largest_step_between_the_guards_readings():
    guard = Guard(Played((0.0, 0.0), (0.0, 0.08), (0.0, 0.11), (0.02, 0.14), (0.02, 0.14)))
    for t in (0.90, 0.95, 1.05, 1.10, 1.15):  # the guard's readings; 80 ms of cpu1 stolen before the request
        guard.note_steal(t)
    before = (0.0, 0.09)  # read at 1.0: after the guard's step of 80 ms, which it does not count

    def at_once(t_before, before, after):
        return guard.stolen_at_once_s(t_before, most_stolen_s(before, after), after)

    assert at_once(1.0, before, (0.05, 0.14)) == pytest.approx(0.03)  # steps 30, 30, 0, 30 after
    assert at_once(1.0, before, (0.02, 0.14)) == pytest.approx(0.03)  # not the request's 50 in all
    # A request between two of the guard's readings, or with a reading missing: what it lost in all, or missing.
    assert at_once(1.2, (0.02, 0.14), (0.07, 0.14)) == pytest.approx(0.05)
    assert at_once(1.0, None, (0.02, 0.14)) is None
    assert guard.summary()["run_cpu_pause_s"] == pytest.approx(0.08)


def test_a_machine_without_the_counter_reads_missing_and_the_real_one_reads_seconds(tmp_path):
    assert Steal(str(tmp_path / "absent")).read() is None
    here = Steal("/proc/stat")
    if here.read() is None:
        pytest.skip("this machine's kernel counts no steal per CPU")
    assert len(here.read()) == os.cpu_count()
    played = tmp_path / "stat"
    played.write_text(STAT % {"sum": 250, "cpu0": 100, "cpu1": 150})
    assert Steal(str(played)).read() == pytest.approx((100 / os.sysconf("SC_CLK_TCK"), 150 / os.sysconf("SC_CLK_TCK")))


class Host:
    """Rewrites a stat file in place as a host would move its counters: every ``every_s`` it stops cpu1 for
    ``pause_s`` (whole ticks, counted at once as the kernel does when the CPU runs again) and cpu0 for four fifths
    of that, while iowait moves fast on both (a reader of the wrong field would see it).
    ``stolen_at(t)``: cpu1's steal as written before ``t`` (perf_counter, the client's clock on Linux)."""

    def __init__(self, path: Path, pause_s: float, every_s: float, tick_s: float = 0.01) -> None:
        self.path, self.pause_ticks, self.every_s, self.tick_s = path, round(pause_s / tick_s), every_s, tick_s
        self.stop = threading.Event()
        self.written: list[tuple[float, int]] = []  # (perf_counter as the write began, cpu1's ticks)
        self._write(0, 0)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _write(self, stolen_ticks: int, iowait_ticks: int) -> None:
        cpu0 = stolen_ticks * 4 // 5
        text = (f"cpu  {0:010d} 0 0 0 {2 * iowait_ticks:010d} 0 0 {stolen_ticks + cpu0:010d} 0 0\n"
                f"cpu0 {0:010d} 0 0 0 {iowait_ticks:010d} 0 0 {cpu0:010d} 0 0\n"
                f"cpu1 {0:010d} 0 0 0 {iowait_ticks:010d} 0 0 {stolen_ticks:010d} 0 0\nintr 0\n").encode()
        self.written.append((time.perf_counter(), stolen_ticks))
        with open(self.path, "r+b" if self.path.exists() else "wb") as stat:
            stat.write(text)  # the same length every time, over the old text: the reader's file stays the same

    def _run(self) -> None:
        t0 = time.perf_counter()
        while not self.stop.wait(0.005):
            elapsed_s = time.perf_counter() - t0
            self._write(int(elapsed_s / self.every_s) * self.pause_ticks, int(elapsed_s / self.tick_s * 3))

    def stolen_at(self, t: float) -> float:
        return max(ticks for began, ticks in self.written if began <= t) * self.tick_s

    def __enter__(self) -> Host:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def run_chat(sim, out: Path, stat: Path) -> tuple[pd.DataFrame, str]:
    result = run_cli("run", "chat", "--host", sim.url, "--requests", "4", "--max-tokens", "24", "--out", str(out),
                     env={**os.environ, "LLM_BENCH_STEAL_STAT": str(stat)})
    assert result.returncode == 0, result.stderr[-3000:]
    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stderr[-3000:]
    return load_records(out).query("scenario == 'chat'"), result.stdout


def requests_figure(out: Path, metric: str) -> float:
    summary = pd.read_csv(out / "summary.csv")
    return summary.query("table == 'requests' and row == 'chat' and metric == @metric")["median"].item()


def test_a_host_that_stops_a_cpu_for_long_flags_every_request_and_the_summary_warns(start_sim, tmp_path):
    sim = start_sim(decode_tps=60.0)  # 24 tokens: 0.4 s a request, so one 100 ms pause or two in each
    stat, out = tmp_path / "stat", tmp_path / "run"
    with Host(stat, pause_s=0.1, every_s=0.25) as host:
        records, stdout = run_chat(sim, out, stat)
    assert len(records) == 4 and records["ok"].all()
    stolen, pause = records["cpu_stolen_s"].astype(float), records["cpu_pause_s"].astype(float)
    t_send, t_end = records["t_send"].astype(float), records["t_send"] + records["e2e_s"].astype(float)
    # What the host wrote while the request ran, and with 10 ms before its send and 100 ms after its end (the
    # client reads the counters just before it sends and after it has filled the record; a busy machine).
    least = t_end.map(host.stolen_at) - t_send.map(host.stolen_at)
    most = (t_end + 0.1).map(host.stolen_at) - (t_send - 0.01).map(host.stolen_at)
    print(pd.DataFrame({"cpu_stolen_s": stolen, "cpu_pause_s": pause, "least": least, "most": most,
                        "e2e_s": records["e2e_s"]}))
    # Seconds, not ticks; cpu1's, not the sum (1.8 times) or iowait; one pause at a time (two only if the
    # guard's readings, 50 ms apart, were held 200 ms), never more than the request's sum.
    assert ((stolen >= least - 0.005) & (stolen <= most + 0.005)).all()
    assert ((pause >= 0.1 - 0.005) & (pause <= stolen)).all()
    assert records["flags"].str.contains("cpu_stolen").all()
    warning = (f"during 4 of 4 requests the client machine's host took one of its CPUs away for up to "
               f"{pause.max() * 1000:.0f} ms at a time")
    assert warning in stdout and warning in (out / "summary.md").read_text()
    assert requests_figure(out, "cpu_stolen") == 4
    client = json.loads(next(out.glob("client-*.json")).read_text())
    assert client["run_cpu_stolen_s"] >= stolen.sum() - 0.04 and client["run_cpu_pause_s"] >= pause.max()


def test_many_short_pauses_are_kept_but_not_flagged(start_sim, tmp_path):
    # 20 ms every 100 ms: 60-100 ms over a request, more than a stamp may be late, but no stamp was held more
    # than 20 ms (40 if the guard's readings were held 100 ms: still not above the limit).
    sim = start_sim(decode_tps=60.0)
    stat, out = tmp_path / "stat", tmp_path / "run"
    with Host(stat, pause_s=0.02, every_s=0.1):
        records, stdout = run_chat(sim, out, stat)
    stolen, pause = records["cpu_stolen_s"].astype(float), records["cpu_pause_s"].astype(float)
    print(pd.DataFrame({"cpu_stolen_s": stolen, "cpu_pause_s": pause, "e2e_s": records["e2e_s"]}))
    assert (stolen > 0.04).all() and ((pause >= 0.02) & (pause <= 0.04)).all()
    assert not records["flags"].fillna("").str.contains("cpu_stolen").any()
    assert "host took" not in stdout and requests_figure(out, "cpu_stolen") == 0


def test_a_host_that_takes_nothing_flags_nothing_and_no_counter_is_missing_not_zero(start_sim, tmp_path):
    sim = start_sim(decode_tps=60.0)
    stat = tmp_path / "stat"
    Host(stat, pause_s=0.0, every_s=1.0)  # written once, never moved
    records, stdout = run_chat(sim, tmp_path / "idle", stat)
    assert (records[["cpu_stolen_s", "cpu_pause_s"]] == 0).all().all()
    assert not records["flags"].fillna("").str.contains("cpu_stolen").any()
    assert "host took" not in stdout and requests_figure(tmp_path / "idle", "cpu_stolen") == 0
    records, stdout = run_chat(sim, tmp_path / "none", tmp_path / "absent")
    assert records[["cpu_stolen_s", "cpu_pause_s"]].isna().all().all() and "host took" not in stdout
    assert pd.isna(requests_figure(tmp_path / "none", "cpu_stolen"))
    client = json.loads(next((tmp_path / "none").glob("client-*.json")).read_text())
    assert client["run_cpu_stolen_s"] is None and client["run_cpu_pause_s"] is None
