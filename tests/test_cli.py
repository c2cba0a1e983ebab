"""The command line as a user meets it: relative paths, OpenAI-style URLs, exit status, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_records, read_truth, run_cli


def test_relative_out_lands_under_the_working_directory(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    result = run_cli("run", "chat", "--host", sim.url, "--requests", "2", "--out", "results/rel", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "results" / "rel" / "requests.csv").exists()
    assert not (tmp_path / "results" / "rel" / "results").exists()
    report = run_cli("report", "results/rel", cwd=tmp_path)
    assert report.returncode == 0 and (tmp_path / "results" / "rel" / "summary.md").exists(), report.stderr


@pytest.mark.slow  # two runs: 5 s
def test_host_given_as_openai_base_url_and_from_the_environment(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    given = run_cli("run", "chat", "--host", sim.url + "/v1/", "--requests", "2", "--out", str(tmp_path / "a"))
    assert given.returncode == 0, given.stderr[-3000:]
    assert json.loads((tmp_path / "a" / "settings.json").read_text())["host"] == sim.url
    env = {**os.environ, "OPENAI_BASE_URL": sim.url + "/v1"}
    from_env = run_cli("run", "chat", "--requests", "2", "--out", str(tmp_path / "b"), env=env)
    assert from_env.returncode == 0, from_env.stderr[-3000:]
    assert f"measuring {sim.url}" in from_env.stdout
    assert not (tmp_path / "b" / "sim-truth.jsonl").exists()  # no built-in engine was started
    records = load_records(tmp_path / "b")
    assert set(records["request_id"]) <= set(read_truth(sim.truth_log)["request_id"])


def test_an_unlisted_model_is_asked_for_and_its_refusal_recorded(start_sim, tmp_path):
    sim = start_sim(decode_tps=1000.0)
    result = run_cli("run", "chat", "--host", sim.url, "--model", "not-served", "--requests", "2",
                     "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]  # failures are measurements, by default
    assert "warning: model 'not-served' is not listed" in result.stderr
    chat = load_records(tmp_path / "run").query("scenario == 'chat'")
    assert len(chat) == 2 and (chat["error"] == "http_404").all()
    failing = run_cli("run", "chat", "--host", sim.url, "--model", "not-served", "--requests", "2",
                      "--fail-on-error", "--out", str(tmp_path / "run2"))
    assert failing.returncode == 1 and "2 measured request(s) failed" in failing.stderr
    fine = run_cli("run", "chat", "--host", sim.url, "--requests", "2", "--fail-on-error",
                   "--out", str(tmp_path / "run3"))
    assert fine.returncode == 0, fine.stderr[-3000:]


@pytest.mark.slow  # two runs and a compare: 6 s
def test_compare_written_into_a_run_directory_keeps_its_records(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    for name in ("a", "b"):
        assert run_cli("run", "chat", "--host", sim.url, "--requests", "2", "--setup", name,
                       "--out", str(tmp_path / name)).returncode == 0
    result = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "a"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "a" / "requests.csv").exists() and (tmp_path / "a" / "compare.md").exists()


def test_mistakes_get_one_line_and_exit_2(tmp_path):
    for args in (["report", str(tmp_path / "nothing-here")],
                 ["run", "chat", "--host", "127.0.0.1:9", "--out", str(tmp_path / "x")],
                 ["run", "chat", "--host", "http://127.0.0.1:9", "--out", str(tmp_path / "y")]):
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_sim_help_lists_the_simulated_engine_s_options():
    result = run_cli("sim", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: llm-bench sim") and "--decode-tps" in result.stdout


@pytest.mark.slow  # two runs: 5 s
def test_a_second_run_into_the_same_directory_keeps_the_first_aside(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    for requests in ("2", "3"):
        result = run_cli("run", "chat", "--host", sim.url, "--requests", requests, "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
    assert len(load_records(out).query("scenario == 'chat'")) == 3
    assert len(load_records(out / "earlier-runs" / "1").query("scenario == 'chat'")) == 2
    assert (out / "earlier-runs" / "1" / "settings.json").exists()


def test_output_cut_short_by_its_reader_ends_quietly():
    """`llm-bench locustfile | head -1`: no traceback, the status of a command ended by SIGPIPE."""
    reader_gone = subprocess.Popen([sys.executable, "-m", "llm_bench.cli", "locustfile"], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader_gone.stdout.close()
    assert reader_gone.wait(timeout=60) == 141
    assert reader_gone.stderr.read() == b""
