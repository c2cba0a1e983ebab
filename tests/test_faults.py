"""Servers misbehave: every fault is recorded as a failed request with its exact error class, and the
run goes on. The simulated engine injects each fault into every request (fault_rate 1); the runs are Locust
runs in this process (tests/in_process.py), and what the command prints is made from their records as the
command makes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import simengine
from analysis import study
from analysis.overview import format_overview, overview
from analysis.records import has_flag
from bench_tasks.records_file import read_jsonl
from locustfiles import engine_counters
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.agent import AgentUser
from locustfiles.users.burst import BurstUser
from locustfiles.users.chat import ChatQuestionUser, ChatUser
from locustfiles.users.prompt import PromptUser
from tests import in_process
from tests.conftest import ROOT, load_records, read_truth, run_cli

# fault kind -> (error class, or "" for a request that must still succeed)
FAULTS = {
    "http500": "http_500",
    "http429": "http_429",
    "drop": "disconnect",
    "malformed": "malformed_event",
    "error_event": "stream_error",
    "stall": "timeout",
    "hang": "timeout",  # never answered: the wait for the head times out
    "no_done": "no_done",
    "non_sse": "not_sse",
    "no_usage": "",
    "keepalive": "",
    "crlf": "",
    "split": "",
    "buffered": "",
}
SCENARIOS = ("chat", "agent", "burst")
# Streams the engine sends event by event and the client reads to their end: 10 ms a token apart. The
# suite runs beside other tests, and a client woken a few ms late still reads them one event at a time
# (at 2.5 ms a busy minute lumped half a chat's events into shared reads, rightly flagged `bunched`,
# though the engine had sent them apart). The buffered stream comes whole at its end: within --read-timeout.
READ_WHOLE = tuple(kind for kind, error in FAULTS.items() if not error and kind != "buffered")
READ_WHOLE_TPS = 100.0
IN_THE_LOOP = ("malformed", "http429")  # a broken stream and a refusal: the rest are slow
RUN_S = 120


class Faults(SuiteShape):
    users = {"chat": ChatQuestionUser, "agent": AgentUser, "burst": BurstUser}


def measure(url: str, out: Path, argv: list[str], shape=Faults, users=None, listeners: tuple = (), during=None):
    """A headless run in this process against ``url``, to its end (``during(run)`` while it goes); its Locust
    run (its process exit code: None when nothing failed)."""
    with in_process.local(["--host", url, "--out", str(out), "--no-llm-report", *argv],
                          users or list(shape.users.values()), shape, listeners=listeners) as run:
        run.start()
        if during is not None:
            during(run)
        run.wait(RUN_S)
    return run


def printed(records) -> str:
    """What the command prints under a run: the phases' figures and the warnings (llm_bench/cli.py)."""
    return "\n".join([format_overview(overview(records)), *study.warnings(records)])


@pytest.fixture
def fault_run(kind, tmp_path):
    """The kind's run against its own simulated engine: (truth log, out dir, exit code). Each kind is a test
    of its own, which pytest-xdist hands to any worker; a worker runs one at a time (runs of one event loop
    side by side would delay each other's reads, which a stream's bunching flag would show)."""
    sim = simengine.start_process(simengine.SimConfig(
        port=0, truth_log=str(tmp_path / "truth.jsonl"), fault_rate=1.0, fault_kinds=(kind,), stall_s=5.0,
        decode_tps=READ_WHOLE_TPS if kind in READ_WHOLE else 400.0))
    try:
        run = measure(sim.url, tmp_path / "run", ["--only", ",".join(SCENARIOS), "--runs", "1", "--bursts", "2",
                                                  "--read-timeout", "1"])
    finally:
        sim.stop()
    return tmp_path / "truth.jsonl", tmp_path / "run", run.environment.process_exit_code


@pytest.mark.parametrize("kind", [kind if kind in IN_THE_LOOP else pytest.param(kind, marks=pytest.mark.slow)
                                  for kind in FAULTS])
def test_fault_is_recorded_in_every_scenario_and_the_run_finishes(fault_run, kind):
    truth_log, out, exit_code = fault_run
    assert exit_code is None, (out / "failure.json").read_text()
    records = load_records(out)
    measured = records[records["scenario"] != "warmup"]
    assert set(measured["scenario"]) == set(SCENARIOS)
    expected = FAULTS[kind]
    if expected:
        assert (~measured["ok"]).all() and set(measured["error"]) == {expected}, measured[["phase", "error"]]
        # Failed requests never reach a latency figure: every phase shows none, not 0.
        table = overview(records)
        assert table["ttft_p50_s"].isna().all() and table["decode_tps_p50"].isna().all()
        assert (table["errors"] == table["requests"]).all()
    else:
        assert measured["ok"].all(), measured[["phase", "error", "error_detail"]]
    if kind == "http429":
        assert measured["error_detail"].str.contains("Retry-After").all()
        assert len(read_truth(truth_log)) == len(records)  # recorded, never retried
    if kind == "buffered":
        # The whole stream came at its end: flagged, first token and end together, and the summary warns.
        streamed = measured[measured["content_events"] >= 3]
        assert len(streamed) >= 3 and has_flag(streamed, "bunched").all()
        assert ((streamed["e2e_s"] - streamed["ttft_s"]) < 0.05).all(), streamed[["ttft_s", "e2e_s"]]
        assert "arrived in lumps" in printed(records)
    elif kind in READ_WHOLE:  # sent 10 ms apart: read one by one, on a busy machine too
        assert not has_flag(measured, "bunched").any(), measured[["phase", "bunched_events"]]
    if kind == "hang":  # no head came: no time to the first byte either
        assert measured["ttfb_s"].isna().all() and measured["e2e_s"].notna().all()
    if kind == "no_usage":
        assert (measured["usage_source"] == "counted").all() and measured["prompt_tokens"].isna().all()
    # The summary counts the failures per phase next to the figures.
    assert "errors" in printed(records)


def test_a_fault_asked_for_by_model_name_as_the_readme_shows(tmp_path):
    out = tmp_path / "faults"
    result = run_cli("run", "chat", "--model", "fault/malformed", "--requests", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    chat = load_records(out).query("scenario == 'chat'")
    assert len(chat) == 3 and set(chat["error"]) == {"malformed_event"} and (chat["model"] == "fault/malformed").all()


class Prompts(SuiteShape):
    users = {"prompt": PromptUser}


def test_prompt_longer_than_the_context_is_context_exceeded(start_sim, tmp_path):
    sim = start_sim(ctx_len=2048, decode_tps=1000.0)
    out = tmp_path / "run"
    run = measure(sim.url, out, ["--only", "prompt", "--sizes", "1k,4k", "--runs", "1"], Prompts)
    assert run.environment.process_exit_code is None
    records = load_records(out).set_index("phase")
    assert records.loc["prompt-1k", "ok"] and not records.loc["prompt-4k", "ok"]
    assert records.loc["prompt-4k", "error"] == "context_exceeded" and records.loc["prompt-4k", "http_status"] == 400


def test_server_gone_mid_run_is_connect_error_and_the_run_ends(start_sim, tmp_path):
    sim = start_sim(decode_tps=200.0)
    out = tmp_path / "run"

    def stop_the_server(_run) -> None:
        records = out / "records.jsonl"
        in_process.until(lambda: records.exists() and len(read_jsonl(records)[0]) >= 4)  # the warm-up, three answers
        sim.stop()

    run = measure(sim.url, out, ["--requests", "12"], shape=None, users=[ChatUser],
                  listeners=(engine_counters.AroundEachRun("chat"),), during=stop_the_server)
    assert run.environment.process_exit_code is None
    records = load_records(out)
    chat = records[records["scenario"] == "chat"]
    assert len(chat) == 12 and chat["ok"].sum() >= 3
    assert set(chat.loc[~chat["ok"], "error"]) <= {"connect_error", "disconnect"}
    assert (chat["error"] == "connect_error").sum() >= 1


@pytest.mark.slow  # a run killed and reported: 5.5 s
def test_kill_9_keeps_every_finished_request_and_the_report_says_incomplete(start_sim, tmp_path):
    sim = start_sim(decode_tps=100.0)
    out = tmp_path / "run"
    cli = subprocess.Popen([sys.executable, "-m", "llm_bench.cli", "run", "chat", "--host", sim.url,
                            "--requests", "200", "--out", str(out)], cwd=ROOT, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_lines(out / "records.jsonl", 3)
    os.killpg(cli.pid, signal.SIGKILL)  # the CLI and its Locust child, no goodbye
    cli.wait(timeout=30)
    time.sleep(0.5)
    finished = len(read_truth(sim.truth_log))
    records = load_records(out)
    assert not (out / "requests.csv").exists()
    # Every request the engine finished is in the records, except at most the one cut mid-write.
    assert finished - 1 <= len(records) <= finished
    result = run_cli("report", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "incomplete" in (out / "summary.md").read_text().lower()


def _wait_for_lines(path, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never reached {n} lines")
