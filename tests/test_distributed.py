"""Master and workers on 127.0.0.1: every record reaches the master, and a dead worker stops nothing."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from bench_tasks.records_file import read_jsonl
from bench_tasks.suite import SuiteOptions, plan
from llm_bench.headless import free_port
from tests.conftest import ROOT, load_records, run_cli
from tests.documents import blocks_of, labelled

pytestmark = pytest.mark.slow  # a master and workers: half a minute to a minute and a half each

SUITE = ROOT / "locustfiles" / "quick_suite.py"
CAPACITY = ROOT / "locustfiles" / "capacity.py"


def locust(*args: str, log: Path, locustfile: Path = SUITE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", str(locustfile), *args], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, cwd=log.parent, preexec_fn=as_in_a_terminal)


def as_in_a_terminal() -> None:
    """Ctrl-C (SIGINT) handled as a terminal's foreground command has it. A process inherits an ignored
    SIGINT, and a non-interactive shell ignores it in what it starts with ``&`` (``pytest ... &`` in a
    script): Python then installs no KeyboardInterrupt, and a worker given SIGINT runs on until its
    master's heartbeat times out, a minute later (seen: the test's 20 s wait ran out)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_master(url: str, out: Path, port: int, suite: list[str], workers: int = 2,
                 locustfile: Path = SUITE) -> subprocess.Popen:
    return locust("--headless", "--master", "--expect-workers", str(workers), "--master-bind-host", "127.0.0.1",
                  "--master-bind-port", str(port), "--host", url, "--out", str(out), *suite,
                  log=out.parent / "master.log", locustfile=locustfile)


def start_worker(port: int, log: Path, locustfile: Path = SUITE, client_host: str = "") -> subprocess.Popen:
    return locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), log=log,
                  locustfile=locustfile, *(["--client-host", client_host] if client_host else []))


def start_room(url: str, tmp_path: Path, suite: list[str]) -> tuple[Path, subprocess.Popen, list[subprocess.Popen]]:
    """A master running ``suite`` into ``tmp_path/run`` and two workers, laptop-0 and laptop-1."""
    out, port = tmp_path / "run", free_port()
    out.mkdir()
    master = start_master(url, out, port, suite)
    return out, master, [start_worker(port, tmp_path / f"worker{i}.log", client_host=f"laptop-{i}") for i in range(2)]


def expected_counts(**options) -> dict[str, int]:
    return {p.name: p.expected_records for p in plan(SuiteOptions(**options))}


def test_master_with_two_workers_merges_every_record(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    out, port = tmp_path / "run", free_port()
    out.mkdir()
    suite = ["--sizes", "300", "--needle-sizes", "400", "--runs", "2", "--bursts", "1,4"]
    master = start_master(sim.url, out, port, suite)
    workers = [start_worker(port, tmp_path / f"worker{i}.log") for i in range(2)]
    try:
        assert master.wait(timeout=240) == 0, (tmp_path / "master.log").read_text()[-3000:]
    finally:
        for process in [master, *workers]:
            process.kill()
    records = load_records(out)
    measured = records[records["scenario"] != "warmup"]
    assert measured.groupby("phase").size().to_dict() == expected_counts(
        sizes=(300,), needle_sizes=(400,), runs=2, bursts=(1, 4))
    assert measured["ok"].all()
    # Each worker also kept its own copy as it went; together they hold exactly the master's rows.
    worker_rows = sum(len(p.read_text().splitlines()) for p in out.glob("worker-*.jsonl"))
    assert worker_rows == len(records) and len(list(out.glob("worker-*.jsonl"))) == 2
    # One mark for the whole run: drawn by the master where the run starts, carried to both workers.
    assert records["run_mark"].nunique() == 1 and len(records["run_mark"].iloc[0]) == 8
    assert records["client_pid"].nunique() == 2 and not records["mark_repeated"].any()
    burst = measured[measured["phase"] == "burst-4"]
    assert burst["clock_offset_s"].notna().all() and (burst["clock_offset_s"].abs() < 0.05).all()
    spread = burst.groupby("round")["release_offset_s"].agg(lambda s: s.max() - s.min())
    assert (spread < 0.05).all(), spread


def test_a_killed_worker_leaves_the_master_running_and_the_loss_reported(start_sim, tmp_path):
    sim = start_sim(decode_tps=100.0)
    out, master, workers = start_room(sim.url, tmp_path, ["--only", "chat,burst", "--runs", "6", "--bursts", "2"])
    try:
        victim = _worker_holding_the_chat_user(out, workers)
        os.kill(victim.pid, signal.SIGKILL)
        assert master.wait(timeout=240) == 0, (tmp_path / "master.log").read_text()[-3000:]
    finally:
        for process in [master, *workers]:
            process.kill()
    lost = pd.DataFrame(read_jsonl(out / "lost-workers.jsonl")[0])
    assert len(lost) == 1 and lost.loc[0, "lost_at"] > 0
    loss = lost.iloc[0]
    victim_host, survivor = f"laptop-{workers.index(victim)}", f"laptop-{1 - workers.index(victim)}"
    assert loss["client_host"] == victim_host and loss["client_pid"] == victim.pid  # as it said when it joined
    records = load_records(out)
    measured = records[records["scenario"] != "warmup"]
    assert (measured["phase"] == "burst-2").sum() >= 2 * 5  # the run went on after the loss
    chat = measured[measured["phase"] == "chat"]
    missing = 3 * 6 - len(chat)
    # What is missing is bounded by what the dead worker finished but had not reported, plus in flight.
    unreported = loss["records_finished"] - loss["records_received"]
    assert 0 <= missing <= unreported + loss["in_flight_jobs"]
    assert len(loss["in_flight"]) == loss["in_flight_jobs"]
    # The report says it: which laptop, when, during which phase, what arrived, what was closed, who carried on.
    summary = (out / "summary.md").read_text()
    said = "\n".join(f"- {item}" for item in labelled(blocks_of(summary), "Lost workers").items)
    assert said.startswith(f"- **{victim_host}** was lost at ") and f", during {loss['phase']};" in said, said
    assert f"; {loss['records_received']} of the {loss['records_finished']} measured records its finished jobs " \
           "made reached the master" in said, said
    closed = [f"{job['phase']} round {job['round']}" for job in loss["in_flight"]]
    assert (": " + ", ".join(closed) in said) if closed else "it had nothing in flight" in said, said
    after = measured[(measured["phase"] == loss["phase"]) & (measured["t_start"] > loss["lost_at"])]
    assert set(after["client_host"]) <= {survivor}  # a dead laptop sends nothing after it is lost
    if len(after):
        assert f"; {survivor} ({len(after)} record{'s' if len(after) > 1 else ''} sent after the loss) carried the rest " \
               f"of {loss['phase']}." in said, said


def test_a_worker_killed_before_its_first_record_is_named_by_its_client_host(start_sim, tmp_path):
    sim = start_sim(decode_tps=100.0)
    out, port = tmp_path / "run", free_port()
    out.mkdir()
    master = start_master(sim.url, out, port, ["--only", "chat", "--runs", "4"])
    workers = [start_worker(port, tmp_path / f"worker{i}.log", client_host=f"laptop-{i}") for i in range(2)]
    try:
        holder = _worker_holding_the_chat_user(out, workers)
        idle = next(worker for worker in workers if worker is not holder)  # no user: it never made a record
        os.kill(idle.pid, signal.SIGKILL)
        assert master.wait(timeout=240) == 0, (tmp_path / "master.log").read_text()[-3000:]
    finally:
        for process in [master, *workers]:
            process.kill()
    lost = read_jsonl(out / "lost-workers.jsonl")[0]
    name = f"laptop-{workers.index(idle)}"  # said by the worker itself as it joined
    said = [(loss["client_host"], loss["client_pid"], loss["records_received"]) for loss in lost]
    assert said == [(name, idle.pid, 0)]
    assert f"- **{name}** was lost at " in (out / "summary.md").read_text()
    assert not list(out.glob(f"worker-{name}-*.jsonl"))  # it wrote no record of its own either


def _worker_holding_the_chat_user(out: Path, workers: list[subprocess.Popen]) -> subprocess.Popen:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path in out.glob("worker-*.jsonl"):
            lines = path.read_text().splitlines()
            if any('"phase":"chat"' in line for line in lines):
                pid = int(path.stem.rsplit("-", 1)[1])
                return next(w for w in workers if w.pid == pid)
        time.sleep(0.2)
    raise AssertionError("no worker started the chat phase")


def test_processes_on_one_machine_merge_every_record(start_sim, tmp_path):
    sim = start_sim(decode_tps=300.0)
    out, port = tmp_path / "run", str(free_port())  # not Locust's 5557: the README's room may hold it meanwhile
    result = subprocess.run([sys.executable, "-m", "locust", "-f", str(SUITE), "--headless", "--processes", "2",
                             "--master-bind-port", port, "--master-port", port,
                             "--host", sim.url, "--out", str(out), "--sizes", "300", "--needle-sizes", "400",
                             "--runs", "2", "--bursts", "1,4"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out)
    measured = records[records["scenario"] != "warmup"]
    assert measured.groupby("phase").size().to_dict() == expected_counts(
        sizes=(300,), needle_sizes=(400,), runs=2, bursts=(1, 4))
    assert len(list(out.glob("worker-*.jsonl"))) == 2


def test_two_searches_in_processes_on_one_machine_keep_their_workers_to_themselves(start_sim, tmp_path):
    # Left to Locust, a --processes run's master and workers meet on port 5557: the second search's
    # master could not bind it, and its workers joined the first search's master (4 workers connected
    # to a run of 2). Each search gets a port of its own.
    # One class each, met by a wide margin: the two searches share the engine's slots, and a class that
    # missed would send a search down a student, which is not what this test is about.
    sim = start_sim(slots=4, prefill_tps=1e6, decode_tps=40.0, decode_slowdown=0.0)
    search = ["capacity", "--host", sim.url, "--processes", "2", "--slo", "ttft_p95=5", "--think-time", "0.6",
              "--max-tokens", "40", "--ignore-eos", "--start-students", "2", "--max-students", "2", "--step-s", "3",
              "--settle-s", "1", "--min-requests", "5"]
    outs = [tmp_path / "first", tmp_path / "second"]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda out: run_cli(*search, "--out", str(out), timeout=180), outs))
    for out, result in zip(outs, results):
        assert result.returncode == 0, result.stderr[-3000:]
        log = (out / "locust.log").read_text()
        assert "2 workers connected" in log and "3 workers connected" not in log, log[-3000:]
        assert load_records(out)["client_pid"].nunique() == 2  # its own two processes asked, no other's


def test_the_capacity_search_runs_on_a_master_with_two_workers(start_sim, tmp_path):
    # On paper (as in test_capacity_sim): 2 slots, a question holds one for S = 40 / 40 tok/s = 1.0 s,
    # students think exactly T = 0.6 s, so a class fits while N <= 2 * (S + T) / S = 3.2: 3 students
    # never wait; 4 keep both slots busy, each cycle takes 4 * S / 2 = 2.0 s = S + T + 0.4 s of waiting.
    sim = start_sim(slots=2, prefill_tps=1e6, decode_tps=40.0, decode_slowdown=0.0)
    out = distributed_search(sim.url, tmp_path / "first")
    if stopped_for_saturation(out):  # the machine stalled under the clients twice (it is shared): once more
        out = distributed_search(sim.url, tmp_path / "again")
    events = read_jsonl(out / "capacity.jsonl")[0]
    # The probe ran on the workers' users (its bursts released by the master's barrier, timed from it):
    # it saw the 2 slots, and the model predicted the paper's 3, confirmed in two steps.
    probe = next(e for e in events if e["event"] == "probe")
    assert probe["server"]["slots"] == 2 and probe["capacity"] == 3, probe
    judged = {e["students"]: e["outcome"] for e in events if e["event"] == "step"}
    assert judged == {3: "meets", 4: "misses"}, judged
    assert events[-1]["event"] == "end" and events[-1]["capacity"] == 3
    records = load_records(out)  # the master's records, judged by the master as they arrived
    windows = records[records["phase"].str.startswith("class-")]
    assert windows["client_pid"].nunique() == 2  # both workers' students asked in the judged windows
    assert (windows["phase"].str.extract(r"class-(\d+)")[0].astype(int) == windows["students"]).all()
    assert windows["ok"].all() and windows.groupby("phase").size().to_dict() == {
        e["phase"]: e["requests"] for e in events if e["event"] == "step"}
    assert (out / "report.html").exists()  # the master wrote the report, with the same verdicts


def distributed_search(url: str, directory: Path) -> Path:
    out, port = directory / "run", free_port()
    out.mkdir(parents=True)
    # Judged on the median: 3 students never wait once their questions fall into step, 4 wait 0.4 s a cycle.
    # A p95 over a window's 11 requests is its slowest: one collision before they fell into step (a CI run,
    # on a machine whose host was taking its CPUs: one wait of 0.32 s, the engine's truth the same) missed 3.
    search = ["--slo", "ttft_p50=0.15", "--think-time", "0.6", "--max-tokens", "41", "--ignore-eos",
              "--step-s", "6", "--settle-s", "4", "--min-requests", "8", "--stop-timeout", "10"]
    master = start_master(url, out, port, search, locustfile=CAPACITY)
    workers = [start_worker(port, directory / f"worker{i}.log", locustfile=CAPACITY) for i in range(2)]
    try:
        assert master.wait(timeout=240) == 0, (directory / "master.log").read_text()[-3000:]
    finally:
        for process in [master, *workers]:
            process.kill()
    return out


def stopped_for_saturation(out: Path) -> bool:
    """The search stopped because the guard refused a class twice: it must have said so; True to search again.
    (A class refused once is run again, and the search goes on: that is checked by the test's own asserts.)"""
    events = read_jsonl(out / "capacity.jsonl")[0]
    if events[-1].get("why") != "client_saturated":
        return False
    steps = [e for e in events if e["event"] == "step"]
    guards = [p.read_text() for p in out.glob("client-*.json")]
    print(f"the client was saturated twice at {steps[-1]['students']} students ({steps[-1]['missed']}); {guards}")
    assert [e["attempt"] for e in steps[-2:]] == [1, 2] and steps[-1]["students"] == steps[-2]["students"]
    assert steps[-1]["ttft_p95_s"] is None and events[-1]["bound"] == steps[-1]["students"]
    return True


def test_a_master_killed_mid_suite_leaves_a_report_from_the_workers_files(start_sim, tmp_path):
    # A Locust 2.47 worker whose master vanished finishes the requests it has in flight (into its own file),
    # gets no new job, and gives up on the master only 60 s after its last heartbeat: the students stop
    # theirs with Ctrl-C instead (docs/locust.md#master-loss; tests/benchmarks/master_lost.py waits).
    sim = start_sim(decode_tps=200.0)
    out, master, workers = start_room(sim.url, tmp_path, ["--only", "chat,burst", "--runs", "3", "--bursts", "2"])
    try:
        # Once a round of three is in, both laptops hold a user, and the last round needs the master.
        _wait_for_records(out, phase="burst-2", count=2)
        os.kill(master.pid, signal.SIGKILL)
        master.wait(timeout=10)
        _wait_until_quiet(out, still_s=2.0)
        for worker in workers:
            worker.send_signal(signal.SIGINT)  # a student's Ctrl-C
        for worker in workers:
            worker.wait(timeout=20)
    finally:
        for process in [master, *workers]:
            process.kill()
    assert not (out / "requests.csv").exists()
    files = sorted(out.glob("worker-*.jsonl"))
    assert {p.name.rsplit("-", 1)[0] for p in files} == {"worker-laptop-0", "worker-laptop-1"}
    lines = {line for p in files for line in p.read_text().splitlines()}
    total = sum(len(p.read_text().splitlines()) for p in files)
    assert len(lines) == total  # each record in one worker's file only
    warmups = sum('"scenario":"warmup"' in line for line in lines)

    # The laptops' files, gathered by hand: one of them twice (an early copy, saved by the browser as "(1)").
    laptops = tmp_path / "laptops"
    laptops.mkdir()
    for path in files:
        shutil.copy(path, laptops / path.name)
    early = files[0].read_text().splitlines(keepends=True)
    (laptops / files[0].name.replace(".jsonl", " (1).jsonl")).write_text("".join(early[:len(early) // 2 + 1]))
    room = tmp_path / "room"
    result = run_cli("report", *map(str, sorted(laptops.iterdir())), "--out", str(room), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the master was lost: the report is made from the workers' own files (3: " in result.stdout, result.stdout
    records = load_records(room)
    assert len(records) == total  # nothing counted twice, nothing lost
    blocks = blocks_of((room / "summary.md").read_text())
    lost = labelled(blocks, "Incomplete run: the master was lost")
    unknown = "\n".join(lost.items)
    for what in ("how many workers the run had", "which workers were lost before the master", "metrics.jsonl",
                 "engine_series.jsonl", "which phases were complete", "failure.json", "settings.json"):
        assert what in unknown, (what, unknown)
    assert "none of the master's files is here" in lost.said
    known = labelled(blocks, "What the records still say").items
    for path in files:
        host, pid = path.stem.removeprefix("worker-").rsplit("-", 1)
        mine = records[records["client_pid"] == int(pid)]
        assert (mine["client_host"] == host).all()
        assert any(item.startswith(f"**{host} (pid {pid})**: {len(mine)} records (") for item in known), known
    said = "\n".join(labelled(blocks, "Problems reading the records").items)
    assert f"{len(early) // 2 + 1} record(s) found in more than one worker's file; each kept once" in said, said
    ok, failed = (int(n) for n in re.search(r"requests: (\d+) ok, (\d+) failed", (room / "summary.md").read_text())
                  .groups())
    assert ok + failed == total - warmups

    # The master's own directory, its records.jsonl beside the workers' files (one machine): read together.
    master_records = len((out / "records.jsonl").read_text().splitlines())
    result = run_cli("report", str(out), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(load_records(out)) == total
    lost = labelled(blocks_of((out / "summary.md").read_text()), "Incomplete run: the master was lost")
    assert f"its `records.jsonl` ({master_records} records)" in lost.said, lost.said
    assert f"{total - master_records} of them never reached the master" in lost.said, lost.said
    plan = labelled(blocks_of((out / "summary.md").read_text()), "What the records still say").items[0]
    assert plan.startswith("the plan (progress.jsonl): complete: chat (9 of 9 records); cut short: burst-2 ("), plan


def _wait_for_records(out: Path, phase: str, count: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        lines = [line for path in out.glob("worker-*.jsonl") for line in path.read_text().splitlines()]
        if sum(f'"phase":"{phase}"' in line for line in lines) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} records of {phase} in the workers' files")


def _wait_until_quiet(out: Path, still_s: float) -> None:
    """Until the workers' files have not grown for ``still_s``: their requests in flight have ended."""
    sizes, since, deadline = None, time.monotonic(), time.monotonic() + 30
    while time.monotonic() < deadline:
        now = {path: path.stat().st_size for path in out.glob("worker-*.jsonl")}
        if now != sizes:
            sizes, since = now, time.monotonic()
        elif time.monotonic() - since >= still_s:
            return
        time.sleep(0.1)
    raise AssertionError("the workers' files kept growing after their master was killed")
