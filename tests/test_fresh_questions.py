"""Each run of a test reads its questions afresh: the chat phase's runs and a burst's rounds are not
served from the prefix cache an earlier run filled (on llama.cpp with SmolLM2 a repeated chat question's
first token came in 0.009 s instead of 0.07 s, and a burst's third round read cached prompts). Each is
opened by the run's mark and its own code (bench_tasks.run_mark): no more than that opening is cached."""

import pytest

from tests.conftest import load_records, run_cli


@pytest.mark.slow  # three runs of the chat phase and two bursts
def test_no_run_reads_its_questions_from_an_earlier_runs_cache(start_sim, tmp_path):
    # a token-granular prefix cache, as llama.cpp's; fast decode: what is read from the cache is the question
    sim = start_sim(cache_block_tokens=1, decode_tps=1000.0)
    out = tmp_path / "run"
    result = run_cli("quick", "--host", sim.url, "--only", "chat,burst", "--bursts", "1,2", "--runs", "3",
                     "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).query("scenario != 'warmup'")
    assert set(records["round"]) == {1, 2, 3} and records["ok"].all()
    # Only the chat template's opening and the mark may be cached, never the question.
    cached_share = records["cached_tokens"] / records["prompt_tokens"]
    assert (cached_share < 0.5).all(), records[["phase", "round", "prompt_tokens", "cached_tokens"]]
    assert (records["cached_tokens"] <= records["shareable_tokens"]).all()


def test_run_chat_asks_each_run_afresh(start_sim, tmp_path):
    sim = start_sim(cache_block_tokens=1, decode_tps=1000.0)
    out = tmp_path / "chat"
    result = run_cli("run", "chat", "--host", sim.url, "--requests", "6", "--max-tokens", "16", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).query("scenario == 'chat'")
    assert sorted(records["round"]) == [1, 1, 1, 2, 2, 2] and records["ok"].all()
    cached_share = records["cached_tokens"] / records["prompt_tokens"]
    assert (cached_share < 0.5).all(), records[["round", "prompt_tokens", "cached_tokens"]]
    assert (records["cached_tokens"] <= records["shareable_tokens"]).all()


@pytest.mark.parametrize("workload", ["chat", "paste"])
def test_run_asks_the_users_questions_and_ends_answers_at_their_stop(workload, start_sim, tmp_path):
    # The simulated engine answers a question about a code word with it: the stop string cuts it there.
    sim = start_sim(decode_tps=1000.0, prefill_tps=1e6)
    out = tmp_path / workload
    question = "Remember: the code word is PLUM7. What is the code word?"
    result = run_cli("run", workload, "--host", sim.url, "--requests", "2", "--max-tokens", "40",
                     "--question", question, "--stop", "PLUM", *(["--size", "1k"] if workload == "paste" else []),
                     "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out)
    if workload == "paste":  # answers too short to paste into: no waiting for one to stream (was 30 s)
        pastes = records[records["phase"] == "paste-1k"]
        assert len(pastes) == 2 and (pastes["t_send"] - records["t_send"].min()).max() < 10
    chats = records[records["phase"].isin(["chat", "paste-chat"])]
    assert len(chats) >= 2 and chats["ok"].all()
    assert (chats["finish_reason"] == "stop").all() and (chats["completion_tokens"] < 10).all(), \
        chats[["phase", "finish_reason", "completion_tokens"]]
