"""Bad traffic gets a clear answer before anything is sent: each malformed file given to the command line exits 2
naming file and line, and the server (the simulated engine, whose truth log lists every request it answered)
is sent nothing to answer."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.traffic_files import sharegpt, write_json_array, write_jsonl

TRACE_ROW = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}


def dataset_cases(tmp_path):
    """(file, the problem the command must name) for run chat --dataset."""
    bad_turns = sharegpt(2)
    bad_turns["conversations"] = [{"from": "gpt", "value": "I answer first."}]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    return {
        "not JSON": (write_jsonl(tmp_path / "a.jsonl", [{"prompt": "Hi"}, '{"prompt": "x"']),
                     "a.jsonl:2: not JSON"),
        "unknown field": (write_jsonl(tmp_path / "b.jsonl", [{"prompt": "Hi", "max_token": 3}]),
                          "b.jsonl:1: unknown field 'max_token' (known: prompt, messages, max_tokens)"),
        "no user turn": (write_json_array(tmp_path / "c.json", [sharegpt(1), bad_turns]),
                         "c.json:23: turn 1 is from gpt before any human turn"),
        "no user message": (write_jsonl(tmp_path / "d.jsonl", [{"messages": [{"role": "system", "content": "x"}]}]),
                            "d.jsonl:1: no user message"),
        "max_tokens": (write_jsonl(tmp_path / "e.jsonl", [{"prompt": "Hi"}, {"prompt": "Hi", "max_tokens": 0}]),
                       "e.jsonl:2: max_tokens is 0"),
        "empty": (empty, "empty.jsonl: is empty: there is no request in it"),
        "missing": (tmp_path / "missing.jsonl", "missing.jsonl: cannot be read"),
    }


def trace_cases(tmp_path):
    return {
        "backwards": (write_jsonl(tmp_path / "t1.jsonl", [{**TRACE_ROW, "timestamp": 5}, TRACE_ROW]),
                      "t1.jsonl:2: timestamp 0 goes back from 5 (line 1)"),
        "unknown field": (write_jsonl(tmp_path / "t2.jsonl", [TRACE_ROW, {**TRACE_ROW, "prompt": "x"}]),
                          "t2.jsonl:2: a Mooncake request has unknown field 'prompt'"),
        "hash ids": (write_jsonl(tmp_path / "t3.jsonl", [TRACE_ROW, {**TRACE_ROW, "hash_ids": [0]}]),
                     "t3.jsonl:2: 1 hash ids, but input_length 600 makes 2 blocks of 512 tokens"),
        "a prompt file": (write_jsonl(tmp_path / "t4.jsonl", [{"prompt": "Hi"}]),
                          "t4.jsonl:1: a Mooncake request has unknown field 'prompt'"),
        # Only the server's tokenizer tells: its chat template is longer than 3 tokens.
        "too short": (write_jsonl(tmp_path / "t5.jsonl", [TRACE_ROW, {**TRACE_ROW, "input_length": 3,
                                                                        "hash_ids": [2]}]),
                      "t5.jsonl:2: input_length 3 is shorter than this server's chat template"),
    }


def refused(result, problem: str, truth_log) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert problem in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not truth_log.exists() or not truth_log.read_text().strip(), "a request was answered"


@pytest.fixture
def sim(start_sim):
    return start_sim(decode_tps=400.0)


@pytest.mark.parametrize("case", ["not JSON", "unknown field", "no user turn", "no user message", "max_tokens",
                                  "empty", "missing"])
def test_a_malformed_dataset_exits_2_naming_file_and_line_and_sends_nothing(sim, tmp_path, case):
    path, problem = dataset_cases(tmp_path)[case]
    result = run_cli("run", "chat", "--host", sim.url, "--dataset", str(path), "--out", str(tmp_path / "out"))
    refused(result, problem, sim.truth_log)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["run", "rate", "--rate", "2"], ["sweep"], ["capacity", "--slo", "ttft_p95=1"]])
def test_the_open_loop_and_the_classroom_check_their_dataset_before_anything_is_sent(sim, tmp_path, command):
    path, problem = dataset_cases(tmp_path)["unknown field"]
    result = run_cli(*command, "--host", sim.url, "--dataset", str(path), "--out", str(tmp_path / "out"))
    refused(result, problem, sim.truth_log)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["backwards", "unknown field", "hash ids", "a prompt file", "too short"])
def test_a_malformed_trace_exits_2_naming_file_and_line_and_sends_nothing(sim, tmp_path, case):
    path, problem = trace_cases(tmp_path)[case]
    result = run_cli("run", "trace", str(path), "--host", sim.url, "--out", str(tmp_path / "out"))
    refused(result, problem, sim.truth_log)


@pytest.mark.parametrize("argv, problem", [
    (["run", "chat", "--prefixes", "3"], "--prefixes K groups requests by a prefix of --prefix-tokens N tokens"),
    (["run", "chat", "--prefix-tokens", "2"], "--prefix-tokens must be more than 2"),
    (["run", "chat", "t.jsonl"], "FILE is for run trace, not run chat"),
    (["run", "trace"], "run trace replays a Mooncake trace: llm-bench run trace FILE"),
    (["run", "paste", "--dataset", "d.jsonl"], "--dataset is for run chat and run rate, not run paste"),
    (["run", "chat", "--speed", "2"], "--speed is for run trace, not run chat"),
    (["run", "chat", "--file-answers"], "--file-answers replays a --dataset of conversations"),
    (["sweep", "--file-answers"], "--file-answers replays a --dataset of conversations"),
    (["sweep", "--prefixes", "2"], "--prefixes K groups requests by a prefix of --prefix-tokens N tokens"),
    (["run", "rate", "--rate", "2", "--requests", "3", "--prefix-tokens", "2"], "--prefix-tokens must be more than 2"),
])
def test_traffic_options_out_of_place_exit_2(sim, tmp_path, argv, problem):
    result = run_cli(*argv, "--host", sim.url, "--out", str(tmp_path / "out"))
    refused(result, problem, sim.truth_log)
