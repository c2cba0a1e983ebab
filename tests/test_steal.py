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
    assert most_stolen_s(None, (1.0,)) is None and most_stolen_s((1.0,), None) is None
    assert most_stolen_s((1.0, 2.0), (1.0, 2.0, 0.0)) is None  # a CPU came online between the readings


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
    """Rewrites a stat file in place as a host would move its counters: ``cpu1_share`` of cpu1's time stolen,
    four fifths of that of cpu0's, and iowait moving fast on both (a reader of the wrong field would see it).
    ``stolen_at(t)``: cpu1's steal as written before ``t`` (perf_counter, the client's clock on Linux)."""

    def __init__(self, path: Path, cpu1_share: float, tick_s: float = 0.01) -> None:
        self.path, self.share, self.tick_s = path, cpu1_share, tick_s
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
            elapsed_ticks = (time.perf_counter() - t0) / self.tick_s
            self._write(int(elapsed_ticks * self.share), int(elapsed_ticks * 3))

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


def test_a_host_taking_half_a_cpu_flags_every_request_and_the_summary_warns(start_sim, tmp_path):
    sim = start_sim(decode_tps=60.0)  # 24 tokens: 0.4 s a request, about 0.2 s of it stolen
    stat, out = tmp_path / "stat", tmp_path / "run"
    with Host(stat, cpu1_share=0.5) as host:
        records, stdout = run_chat(sim, out, stat)
    assert len(records) == 4 and records["ok"].all()
    stolen = records["cpu_stolen_s"].astype(float)
    t_send, t_end = records["t_send"].astype(float), records["t_send"] + records["e2e_s"].astype(float)
    # What the host wrote while the request ran, and with 10 ms before its send and 100 ms after its end (the
    # client reads the counters just before it sends and after it has filled the record; a busy machine).
    least = t_end.map(host.stolen_at) - t_send.map(host.stolen_at)
    most = (t_end + 0.1).map(host.stolen_at) - (t_send - 0.01).map(host.stolen_at)
    print(pd.DataFrame({"cpu_stolen_s": stolen, "least": least, "most": most, "e2e_s": records["e2e_s"]}))
    # Seconds, not ticks; cpu1's, not the sum (1.8 times) or iowait (six times).
    assert ((stolen >= least - 0.005) & (stolen <= most + 0.005)).all()
    assert records["flags"].str.contains("cpu_stolen").all()
    warning = "during 4 of 4 requests the client machine's host took one of its CPUs away"
    assert warning in stdout and warning in (out / "summary.md").read_text()
    assert requests_figure(out, "cpu_stolen") == 4
    client = json.loads(next(out.glob("client-*.json")).read_text())
    assert client["run_cpu_stolen_s"] >= stolen.sum() - 0.04


def test_a_host_that_takes_nothing_flags_nothing_and_no_counter_is_missing_not_zero(start_sim, tmp_path):
    sim = start_sim(decode_tps=60.0)
    stat = tmp_path / "stat"
    Host(stat, cpu1_share=0.0)  # written once, never moved
    records, stdout = run_chat(sim, tmp_path / "idle", stat)
    assert (records["cpu_stolen_s"] == 0).all() and not records["flags"].str.contains("cpu_stolen").any()
    assert "host took" not in stdout and requests_figure(tmp_path / "idle", "cpu_stolen") == 0
    records, stdout = run_chat(sim, tmp_path / "none", tmp_path / "absent")
    assert records["cpu_stolen_s"].isna().all() and "host took" not in stdout
    assert pd.isna(requests_figure(tmp_path / "none", "cpu_stolen"))
    client = json.loads(next((tmp_path / "none").glob("client-*.json")).read_text())
    assert client["run_cpu_stolen_s"] is None
