"""The user's own traffic sent by the command line to the simulated engine, held to its truth log: a JSONL of
messages and a ShareGPT file through `run chat --dataset`, shared prefixes, and a Mooncake trace through
`run trace`, each generated here in the format its project documents. Bounded: a few requests each, short
answers, a trace of two seconds."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import load_records, read_truth, run_cli
from tests.traffic_files import mooncake_rows, sharegpt, write_json_array, write_jsonl

SIM = {"decode_tps": 400.0, "prefill_tps": 200000.0, "slots": 8, "cache_block_tokens": 16}


def measured(out) -> pd.DataFrame:
    records = load_records(out)
    return records[records["scenario"] != "warmup"]


def ran(result) -> None:
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])


def test_a_jsonl_of_messages_is_sent_once_each_with_its_line_and_its_answer_length(start_sim, tmp_path):
    sim = start_sim(**SIM)
    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Question {n}?"}],
             "max_tokens": 5 + n} for n in range(4)] + [{"prompt": "And the last one?"}]
    path = write_jsonl(tmp_path / "messages.jsonl", rows)
    out = tmp_path / "out"
    ran(run_cli("run", "chat", "--host", sim.url, "--dataset", str(path), "--users", "2", "--max-tokens", "12",
                "--out", str(out)))
    records = measured(out).sort_values("source")
    assert list(records["source"]) == [f"{path}:{line}" for line in range(1, 6)]
    assert records["ok"].all() and not records["flags"].fillna("").str.contains("cache_hit").any()
    assert list(records["completion_tokens"])[:4] == [5, 6, 7, 8]  # the file's lengths, with ignore_eos
    assert records["completion_tokens"].iloc[4] <= 12  # the run's --max-tokens where the file gives none
    truth = read_truth(sim.truth_log)
    assert set(records["request_id"]) <= set(truth["request_id"]) and len(truth) == 5 + 2  # and two warm-ups


def test_sharegpt_conversations_replay_turn_by_turn(start_sim, tmp_path):
    sim = start_sim(**SIM)
    path = write_json_array(tmp_path / "sharegpt.json", [sharegpt(n, turns=3) for n in range(3)])
    out = tmp_path / "out"
    ran(run_cli("run", "chat", "--host", sim.url, "--dataset", str(path), "--users", "2", "--max-tokens", "8",
                "--out", str(out)))
    records = measured(out)
    assert len(records) == 9 and records["ok"].all()
    for _source, turns in records.groupby("source"):
        turns = turns.sort_values("turn")
        assert list(turns["turn"]) == [1, 2, 3]
        # Each turn resends the conversation so far, its own earlier answers included: the prompt grows by more
        # than the question, and the engine serves what was sent before from its cache.
        assert turns["prompt_tokens"].is_monotonic_increasing
        assert (turns["cached_tokens"].iloc[1:] > 0).all()
    assert not records["flags"].fillna("").str.contains("cache_hit").any()
    assert records["source"].nunique() == 3


def test_shared_prefixes_are_served_from_the_cache_after_their_groups_first_request(start_sim, tmp_path):
    sim = start_sim(**SIM)
    out = tmp_path / "out"
    ran(run_cli("run", "chat", "--host", sim.url, "--prefix-tokens", "200", "--prefixes", "2", "--requests", "6",
                "--max-tokens", "8", "--out", str(out)))
    records = measured(out)
    assert sorted(records["shared_tokens"]) == [0, 0, 200, 200, 200, 200]
    later = records[records["shared_tokens"] == 200]
    assert (later["cached_tokens"] >= 200 - 16).all()  # the prefix, in the engine's blocks of 16
    assert not records["flags"].fillna("").str.contains("cache_hit").any()


def test_a_mooncake_trace_is_replayed_on_its_times_and_its_shared_blocks_are_cached(start_sim, tmp_path):
    sim = start_sim(**SIM)
    rows = [{**row, "output_length": min(row["output_length"], 6)}
            for row in mooncake_rows(12, seed=4, max_input=3000, rate_per_s=3.0)]
    path = write_jsonl(tmp_path / "mooncake.jsonl", rows)
    out = tmp_path / "out"
    result = run_cli("run", "trace", str(path), "--host", sim.url, "--speed", "2", "--out", str(out))
    ran(result)
    assert "send lag: p50" in result.stdout and "cached/shared" in result.stdout
    records = measured(out)
    assert len(records) == 12 and records["ok"].all() and set(records["phase"]) == {"trace"}
    records = records.assign(line=records["source"].str.rsplit(":", n=1).str[1].astype(int)).sort_values("line")
    assert list(records["line"]) == list(range(1, 13))
    # Each request due at its timestamp, halved (--speed 2), on the client's clock; every one sent, its lag kept.
    due = (records["t_due"] - records["t_due"].iloc[0]).tolist()
    stamps = [(row["timestamp"] - rows[0]["timestamp"]) / 1000 / 2 for row in rows]
    assert due == pytest.approx(stamps, abs=1e-6)
    assert (records["send_lag_s"] >= 0).all()
    assert (records["send_lag_s"] - (records["t_send"] - records["t_due"])).abs().max() < 1e-9
    # Made to the trace's lengths exactly, and cached as its hash ids share (the engine's blocks of 16).
    assert list(records["prompt_tokens"]) == [row["input_length"] for row in rows]
    assert list(records["completion_tokens"]) == [row["output_length"] for row in rows]
    shared, cached = records["shared_tokens"], records["cached_tokens"]
    assert shared.sum() > 0 and (cached <= shared.clip(lower=30)).all() and (cached >= shared - 32).all()
    assert not records["flags"].fillna("").str.contains("cache_hit").any()
    truth = read_truth(sim.truth_log)
    assert set(records["request_id"]) <= set(truth["request_id"])
    # The same trace again, on the same engine: shared within the run as before, and nothing from the first run.
    ran(run_cli("run", "trace", str(path), "--host", sim.url, "--speed", "2", "--out", str(tmp_path / "again")))
    again = measured(tmp_path / "again")
    assert (again["cached_tokens"] <= again["shared_tokens"].clip(lower=30)).all()
    assert not again["flags"].fillna("").str.contains("cache_hit").any()
