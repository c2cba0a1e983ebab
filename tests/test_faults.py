"""Servers misbehave: every fault is recorded as a failed request with its exact error class, and the
run goes on. The simulated engine injects each fault into every request (fault_rate 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import simengine
from analysis.overview import overview
from analysis.records import has_flag
from tests.conftest import ROOT, load_records, read_truth, run_cli

# fault kind -> (error class, or "" for a request that must still succeed)
FAULTS = {
    "http500": "http_500",
    "http429": "http_429",
    "drop": "disconnect",
    "malformed": "malformed_event",
    "error_event": "stream_error",
    "stall": "timeout",
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


@pytest.fixture(scope="module")
def fault_runs(request, tmp_path_factory):
    """Each selected kind's run against its own simulated engine, two at a time: a run mostly waits (on its
    phases, its engine, its report), so two share the machine's two cores without crowding either."""
    selected = [getattr(item, "callspec", None) for item in request.session.items if item.module is request.module]
    kinds = [spec.params["kind"] for spec in selected if spec and "kind" in spec.params]
    sims = {}

    def run(kind):
        directory = tmp_path_factory.mktemp(f"fault-{kind}")
        sims[kind] = sim = simengine.start_process(simengine.SimConfig(
            port=0, truth_log=str(directory / "truth.jsonl"), fault_rate=1.0, fault_kinds=(kind,), stall_s=5.0,
            decode_tps=READ_WHOLE_TPS if kind in READ_WHOLE else 400.0))
        out = directory / "run"
        result = run_cli("quick", "--host", sim.url, "--only", ",".join(SCENARIOS), "--runs", "1", "--bursts", "2",
                         "--read-timeout", "1", "--out", str(out))
        return directory / "truth.jsonl", out, result

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            yield dict(zip(kinds, pool.map(run, kinds)))
    finally:
        for sim in sims.values():
            sim.stop()


@pytest.mark.parametrize("kind", [kind if kind in IN_THE_LOOP else pytest.param(kind, marks=pytest.mark.slow)
                                  for kind in FAULTS])
def test_fault_is_recorded_in_every_scenario_and_the_run_finishes(fault_runs, kind):
    truth_log, out, result = fault_runs[kind]
    assert result.returncode == 0, result.stderr[-3000:]
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
        assert "arrived in lumps" in result.stdout
    else:
        assert not has_flag(measured, "bunched").any(), measured[["phase", "bunched_events"]]
    if kind == "no_usage":
        assert (measured["usage_source"] == "counted").all() and measured["prompt_tokens"].isna().all()
    # The summary counts the failures per phase next to the figures.
    assert "errors" in result.stdout


def test_a_fault_asked_for_by_model_name_as_the_readme_shows(tmp_path):
    out = tmp_path / "faults"
    result = run_cli("run", "chat", "--model", "fault/malformed", "--requests", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    chat = load_records(out).query("scenario == 'chat'")
    assert len(chat) == 3 and set(chat["error"]) == {"malformed_event"} and (chat["model"] == "fault/malformed").all()


def test_prompt_longer_than_the_context_is_context_exceeded(start_sim, tmp_path):
    sim = start_sim(ctx_len=2048, decode_tps=1000.0)
    out = tmp_path / "run"
    result = run_cli("quick", "--host", sim.url, "--only", "prompt", "--sizes", "1k,4k", "--runs", "1",
                     "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).set_index("phase")
    assert records.loc["prompt-1k", "ok"] and not records.loc["prompt-4k", "ok"]
    assert records.loc["prompt-4k", "error"] == "context_exceeded" and records.loc["prompt-4k", "http_status"] == 400


def test_server_gone_mid_run_is_connect_error_and_the_run_ends(start_sim, tmp_path):
    sim = start_sim(decode_tps=200.0)
    out = tmp_path / "run"
    cli = subprocess.Popen([sys.executable, "-m", "llm_bench.cli", "run", "chat", "--host", sim.url,
                            "--requests", "12", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    _wait_for_lines(out / "records.jsonl", 4)  # the warm-up and three answers
    sim.stop()
    _stdout, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 0, stderr[-3000:]
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
