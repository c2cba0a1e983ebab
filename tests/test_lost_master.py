"""A run whose master was lost: its workers' files read together, each record once; what the report says it
cannot know; the files gathered by `llm-bench report PATH... --out DIR`. (The real thing, a master killed mid-suite:
tests/test_distributed.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from analysis import load, lost_master
from bench_tasks.record import Record
from tests.conftest import run_cli
from tests.documents import blocks_of, labelled

T0 = 1_800_000_000.0  # a unix time: 2027-01-15T08:00:00Z


def record(host: str, pid: int, phase: str = "chat", i: int = 0, **fields) -> dict:
    scenario = "warmup" if phase.startswith("warmup") else phase.split("-")[0]
    return Record(scenario=scenario, phase=phase, round=i + 1, client_host=host, client_pid=pid, ok=True,
                  t_start=T0 + i, t_send=100.0 + i, e2e_s=0.5, ttft_s=0.1, clock_offset_s=0.25, **fields).to_dict()


def write(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def test_the_workers_files_and_the_masters_records_are_read_together_each_record_once(tmp_path):
    a = [record("laptop-a", 11, i=i) for i in range(4)]
    b = [record("laptop-b", 22, "burst-2", i=i) for i in range(3)]
    write(tmp_path / "worker-laptop-a-11.jsonl", a)
    write(tmp_path / "worker-laptop-a-11 (1).jsonl", a[:2])  # an early copy of the same file
    write(tmp_path / "worker-laptop-b-22.jsonl", b)
    write(tmp_path / "records.jsonl", a[:3] + b[:1])  # what reached the master before it died
    records, info = load.load_run(tmp_path)
    assert len(records) == 7 and not info["complete"]
    assert info["from_master"] == 4 and info["only_in_workers"] == 3
    assert info["files"] == {"records.jsonl": 4, "worker-laptop-a-11 (1).jsonl": 2, "worker-laptop-a-11.jsonl": 4,
                             "worker-laptop-b-22.jsonl": 3}
    assert info["problems"] == ["2 record(s) found in more than one worker's file; each kept once"]
    assert sorted(records["t_start"]) == sorted(r["t_start"] for r in a + b)


def test_identical_rows_within_one_file_are_each_kept(tmp_path):
    same = record("laptop-a", 11)
    write(tmp_path / "worker-laptop-a-11.jsonl", [same, same])  # two records alike in every field: two requests
    write(tmp_path / "worker-laptop-a-11 (1).jsonl", [same])
    records, info = load.load_run(tmp_path)
    assert len(records) == 2 and info["only_in_workers"] == 2


def statement(tmp_path: Path) -> lost_master.Statement | None:
    records, info = load.load_run(tmp_path)
    metrics, _ = load.load_metrics(tmp_path)
    return lost_master.statement(records, info, load.master_files(tmp_path), load.load_progress(tmp_path), metrics)


def test_from_the_workers_files_alone_it_says_what_only_the_master_knew(tmp_path):
    write(tmp_path / "worker-laptop-a-11.jsonl", [record("laptop-a", 11, "warmup-chat"),
                                                  *(record("laptop-a", 11, i=i) for i in range(3))])
    write(tmp_path / "worker-laptop-b-22.jsonl", [record("laptop-b", 22, "burst-2", i=3 + i) for i in range(2)])
    said = statement(tmp_path)
    assert said.said.startswith("the report is made from the workers' own files (2: `worker-laptop-a-11.jsonl`, "
                                "`worker-laptop-b-22.jsonl`), which hold every request each worker finished")
    assert "none of the master's files is here (the master was lost, or its directory was not given)" in said.said
    unknown = "\n".join(said.unknown)
    for what in ("how many workers the run had", "lost-workers.jsonl", "The records end during **burst-2**",
                 "metrics.jsonl", "engine_series.jsonl", "failure.json", "settings.json", "--stop-timeout"):
        assert what in unknown, what
    assert "capacity.jsonl" not in unknown and "sweep.jsonl" not in unknown  # neither a search nor a sweep ran
    assert said.known == ("**laptop-a (pid 11)**: 4 records (chat), the last finished at 2027-01-15T08:00:02Z",
                          "**laptop-b (pid 22)**: 2 records (burst-2), the last finished at 2027-01-15T08:00:04Z")
    assert said.lines()[0].startswith("the master was lost: ") and not any("**" in line for line in said.lines())


def test_with_the_masters_directory_it_knows_the_plan_and_names_a_missing_workers_file(tmp_path):
    a = [record("laptop-a", 11, i=i) for i in range(3)]
    c = [record("laptop-c", 33, "burst-2", i=3)]
    write(tmp_path / "worker-laptop-a-11.jsonl", a)
    write(tmp_path / "records.jsonl", a[:2] + c)
    write(tmp_path / "progress.jsonl", [{"event": "suite", "t": 1.0, "phases": [
        {"phase": "chat", "expected_records": 3}, {"phase": "burst-2", "expected_records": 4},
        {"phase": "burst-4", "expected_records": 8}]}, {"event": "phase", "t": 1.0, "phase": "chat"},
        {"event": "phase", "t": 2.0, "phase": "burst-2"}])
    write(tmp_path / "metrics.jsonl", [{"phase": p, "when": w, "t": 1.0, "metrics": {"x": 1.0}}
                                       for p, w in (("chat", "before"), ("chat", "after"), ("burst-2", "before"))])
    said = statement(tmp_path)
    assert said.said.startswith("the master wrote no requests.csv (it was lost, or is still running); the report is "
                                "made from its `records.jsonl` (3 records) and the worker's own file "
                                "(`worker-laptop-a-11.jsonl`), each record counted once: 1 of them never reached the "
                                "master.")
    unknown = "\n".join(said.unknown)
    assert "the records of **laptop-c (pid 33)** that never reached the master: its own file " \
           "(`worker-laptop-c-33.jsonl`) is not here" in unknown
    assert "the engine's counters after **burst-2** (the master read them before it only)" in unknown
    assert "which phases were complete" not in unknown and "failure.json" not in unknown
    assert said.known[0] == "the plan (progress.jsonl): complete: chat (3 of 3 records); cut short: burst-2 (1 of 4 " \
                            "records); never began: burst-4"


def test_a_master_lost_before_any_record_reached_it(tmp_path):
    write(tmp_path / "worker-laptop-a-11.jsonl", [record("laptop-a", 11)])
    plan = [{"phase": "chat", "expected_records": 3}]
    write(tmp_path / "progress.jsonl", [{"event": "suite", "t": 1.0, "phases": plan},
                                        {"event": "phase", "t": 1.0, "phase": "chat"}])
    said = statement(tmp_path)
    assert "the master's files here hold no record (none had reached it)" in said.said
    unknown = "\n".join(said.unknown)
    assert "how many workers the run had" in unknown
    assert "lost-workers.jsonl" not in unknown and "failure.json" not in unknown  # its directory is here
    assert said.known[0] == "the plan (progress.jsonl): cut short: chat (1 of 3 records)"


def test_the_masters_records_alone_point_to_the_workers_files(tmp_path):
    write(tmp_path / "records.jsonl", [record("laptop-a", 11)])
    said = statement(tmp_path)
    assert "no worker's own file is here: the report holds the 1 record that reached the master" in said.said
    assert "`llm-bench report DIR WORKER_FILES... --out DIR`" in said.unknown[0]


def test_a_finished_or_a_local_run_lost_no_master(tmp_path):
    local = {**record("vm", 5), "clock_offset_s": None}  # a local run's records carry no clock offset
    write(tmp_path / "records.jsonl", [local])
    assert statement(tmp_path) is None
    write(tmp_path / "worker-laptop-a-11.jsonl", [record("laptop-a", 11)])
    (tmp_path / "requests.csv").write_text("scenario\nchat\n")  # the master finished
    assert statement(tmp_path) is None


@pytest.mark.slow  # a master killed mid-suite: 12-17 s
def test_report_gathers_the_laptops_files_and_says_the_master_was_lost(tmp_path):
    laptops = tmp_path / "downloads"
    laptops.mkdir()
    a = write(laptops / "worker-laptop-a-11.jsonl", [record("laptop-a", 11, i=i) for i in range(3)])
    b = write(laptops / "worker-laptop-b-22.jsonl", [record("laptop-b", 22, "burst-2", i=3 + i) for i in range(2)])
    early = write(tmp_path / "worker-laptop-a-11.jsonl", [record("laptop-a", 11, i=0)])  # the same file, earlier
    room = tmp_path / "room"
    result = run_cli("report", str(early), str(a), str(b), "--out", str(room))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"2 files copied into {room}\nthe master was lost: the report is made from the "
                                    "workers' own files (2: "), result.stdout
    assert (room / a.name).read_bytes() == a.read_bytes()  # the longer copy of one name is kept
    summary = (room / "summary.md").read_text()
    lost = labelled(blocks_of(summary), lost_master.LABEL)
    assert "metrics.jsonl" in "\n".join(lost.items)
    assert "requests: 5 ok, 0 failed" in summary
    again = run_cli("report", str(room))  # the gathered directory is a run directory of its own
    assert again.returncode == 0 and (room / "summary.md").read_text() == summary, again.stderr
    # The same files again: nothing changes. A file of another run: only into the run named among the paths.
    assert run_cli("report", str(a), str(b), "--out", str(room)).stdout.startswith(f"0 files copied into {room}\n")
    c = write(laptops / "worker-laptop-c-33.jsonl", [record("laptop-c", 33, i=9)])
    result = run_cli("report", str(c), "--out", str(room))
    assert result.returncode == 2 and f"{room} already holds a run's records (worker-laptop-a-11.jsonl, " \
        "worker-laptop-b-22.jsonl): name it among the PATHs" in result.stderr, result.stderr
    assert run_cli("report", str(room), str(c), "--out", str(room)).returncode == 0
    assert len(load.load_run(room)[0]) == 6


def test_report_refuses_what_it_cannot_gather(tmp_path):
    file = write(tmp_path / "worker-laptop-a-11.jsonl", [record("laptop-a", 11)])
    (tmp_path / "elsewhere").mkdir()
    other = write(tmp_path / "elsewhere" / file.name, [record("laptop-a", 11, i=5)])
    renamed = write(tmp_path / "laptop-a.jsonl", [record("laptop-a", 11)])
    masters = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        masters.append(write(tmp_path / name / "records.jsonl", [record("laptop-a", 11)]).parent)
    for args, said in (([str(file)], "need --out DIR"),
                       ([str(file), str(other), "--out", str(tmp_path / "x")], "different files of one name"),
                       ([str(renamed), "--out", str(tmp_path / "y")], "is not a worker's records file"),
                       ([*map(str, masters), "--out", str(tmp_path / "z")], "each hold a master's records"),
                       ([str(tmp_path / "nothing.jsonl"), "--out", str(tmp_path / "w")], "no such file")):
        result = run_cli("report", *args)
        assert result.returncode == 2 and said in result.stderr, (args, result.stderr)
    assert json.loads(file.read_text())["client_host"] == "laptop-a"  # nothing given was touched
