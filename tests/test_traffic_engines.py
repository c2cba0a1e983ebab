"""A trace's prompts on real tokenizers: llama.cpp's (the tiny model's trained byte-level BPE with ChatML; SmolLM2's,
a real model's) and vLLM's. Each prompt counts exactly its input_length on the engine's own /tokenize, requests
sharing hash ids share those blocks' tokens exactly, and the engine's prefix cache then serves what the trace
says was shared, and nothing of an earlier invocation's. The same of shared prefixes sent by the open loop
(run rate --dataset --prefix-tokens), and of a ShareGPT file's conversations."""

from __future__ import annotations

from bench_tasks import engine, server
from bench_tasks.tokens import token_counter
from bench_tasks.traffic.prefixes import SharedPrefixes
from bench_tasks.traffic.trace import Trace, TracePrompts
from bench_tasks.traffic.vocabulary import measure
from tests.conftest import load_records, run_cli
from tests.traffic_files import sharegpt, write_json_array, write_jsonl

ROWS = [{"timestamp": 0, "input_length": 1300, "output_length": 1, "hash_ids": [0, 1, 2]},
        {"timestamp": 10, "input_length": 1500, "output_length": 1, "hash_ids": [0, 1, 3]},
        {"timestamp": 20, "input_length": 700, "output_length": 1, "hash_ids": [4, 5]},
        {"timestamp": 30, "input_length": 1100, "output_length": 1, "hash_ids": [0, 6, 7]}]
SHARED = [0, 1024, 0, 512]  # tokens of each request an earlier one sent (its leading hash ids seen before)
ENGINE_BLOCK = 128  # what an engine's cache may hold back: vLLM's CPU build caches 128-token blocks here


def token_ids(url: str, profile: engine.Profile, model: str, messages: list[dict]) -> list[int]:
    """The prompt's tokens as the engine makes them, chat template applied."""
    if profile.tokenize["shape"] == "llamacpp":
        prompt = server.post_json(url, "/apply-template", {"messages": messages})["prompt"]
        return server.post_json(url, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    return server.post_json(url, profile.tokenize["path"], {"model": model, "messages": messages})["tokens"]


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_trace_prompts(handle, profile_name: str, tmp_path, send: bool) -> None:
    profile = engine.profile(profile_name)
    count = token_counter(handle.url, profile, handle.model)
    vocabulary = measure(count)
    print(f"{profile_name}: {len(vocabulary.words)} words, template {vocabulary.empty_tokens} tokens, "
          f"opener {vocabulary.opener_tokens}")
    trace = Trace.open(str(write_jsonl(tmp_path / "t.jsonl", ROWS)), min_input_tokens=vocabulary.overhead_tokens + 1)
    prompts = TracePrompts(vocabulary, "[run 1]")
    requests = list(trace.requests())
    assert [r.shared_tokens for r in requests] == SHARED
    prompts.check(count, requests)  # through the same count a run uses
    tokens = [token_ids(handle.url, profile, handle.model, prompts.messages(r)) for r in requests]
    assert [len(t) for t in tokens] == [r.input_length for r in requests]
    shared = [common_prefix(tokens[1], tokens[0]), common_prefix(tokens[3], tokens[0])]
    opening = common_prefix(tokens[2], tokens[0])  # nothing shared but the template's opening and the opener
    print(f"{profile_name}: shared prefixes {shared}, unrelated {opening}")
    # A shared prefix stops short of the blocks' end by the template's closing tokens (after the content).
    assert 1024 - 16 <= shared[0] < 1024 and 512 - 16 <= shared[1] < 512
    assert opening < vocabulary.overhead_tokens + 3
    other = TracePrompts(vocabulary, "[run 2]")
    fresh = common_prefix(token_ids(handle.url, profile, handle.model, other.messages(requests[1])), tokens[1])
    assert fresh < vocabulary.overhead_tokens + 3
    prefixes = SharedPrefixes(vocabulary, "[run 1]", prefix_tokens=200, groups=2)
    empty = count([{"role": "user", "content": ""}])
    assert count([{"role": "user", "content": prefixes.text(1)}]) - empty == 200
    if send:
        cached = [cached_tokens(handle, prompts.messages(r)) for r in requests]
        cached.append(cached_tokens(handle, other.messages(requests[1])))  # another invocation: served afresh
        print(f"{profile_name}: cached {cached} where the trace shares {SHARED}")
        unshared = vocabulary.overhead_tokens + 3
        assert cached[0] <= unshared and cached[2] <= unshared and cached[4] <= unshared
        for got, exact in ((cached[1], shared[0]), (cached[3], shared[1])):
            assert exact - ENGINE_BLOCK <= got <= exact


def cached_tokens(handle, messages: list[dict]) -> int:
    body = {"model": handle.model, "messages": messages, "max_tokens": 1, "temperature": 0, "stream": False}
    answer = server.post_json(handle.url, "/v1/chat/completions", body)
    details = answer["usage"].get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return cached if cached is not None else answer["timings"]["cache_n"]


def test_trace_prompts_on_llamacpps_tokenizer(llamacpp_server, tmp_path):
    check_trace_prompts(llamacpp_server, "llamacpp", tmp_path, send=True)


def test_trace_prompts_on_a_real_models_tokenizer(smollm2_server, tmp_path):
    check_trace_prompts(smollm2_server, "llamacpp", tmp_path, send=False)  # its prefill: 100 tokens a second


def test_trace_prompts_on_vllms_tokenizer(vllm_server, tmp_path):
    check_trace_prompts(vllm_server, "vllm", tmp_path, send=True)


# A trace SmolLM2 reads in a minute on a loaded machine (its prefill: 20 to 100 tokens a second on one thread):
# blocks of 64 tokens, requests ten seconds apart so that each finds its prefix in an idle slot's cache.
SMOL_TRACE = [{"timestamp": 0, "input_length": 200, "output_length": 8, "hash_ids": [0, 1, 2, 3]},
              {"timestamp": 10000, "input_length": 230, "output_length": 8, "hash_ids": [0, 1, 2, 4]},
              {"timestamp": 20000, "input_length": 150, "output_length": 8, "hash_ids": [5, 6, 7]},
              {"timestamp": 30000, "input_length": 250, "output_length": 8, "hash_ids": [0, 1, 2, 8]},
              {"timestamp": 40000, "input_length": 140, "output_length": 8, "hash_ids": [5, 6, 9]}]


def test_a_trace_replayed_on_smollm2_is_cached_as_its_hash_ids_share(smollm2_server, tmp_path):
    path = write_jsonl(tmp_path / "trace.jsonl", SMOL_TRACE)
    result = run_cli("run", "trace", str(path), "--block-tokens", "64", "--host", smollm2_server.url,
                     "--out", str(tmp_path / "out"))
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    print(result.stdout)
    records = load_records(tmp_path / "out")
    records = records[records["scenario"] != "warmup"].sort_values("t_due")
    assert list(records["source"]) == [f"{path}:{line}" for line in range(1, 6)] and records["ok"].all()
    assert list(records["prompt_tokens"]) == [row["input_length"] for row in SMOL_TRACE]
    assert list(records["shared_tokens"]) == [0, 192, 0, 192, 128]
    # What the trace shares, less the chat template's closing tokens after the content (a handful), is what
    # llama.cpp served from its cache; the others only the template's opening and the opener every prompt shares.
    for shared, cached in zip(records["shared_tokens"], records["cached_tokens"]):
        assert (shared - 16 <= cached <= shared) if shared else cached <= 40, (shared, cached)
    assert not records["flags"].fillna("").str.contains("cache_hit").any()
    assert records["send_lag_s"].notna().all()


def test_a_sharegpt_file_on_smollm2_replays_each_turn_with_its_own_answers(smollm2_server, tmp_path):
    path = write_json_array(tmp_path / "sharegpt.json", [sharegpt(n, turns=2) for n in range(2)])
    result = run_cli("run", "chat", "--dataset", str(path), "--users", "2", "--max-tokens", "12",
                     "--host", smollm2_server.url, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    records = load_records(tmp_path / "out")
    records = records[records["scenario"] != "warmup"]
    assert len(records) == 4 and records["ok"].all() and sorted(records["turn"]) == [1, 1, 2, 2]
    second = records[records["turn"] == 2]
    first = records[records["turn"] == 1].set_index("source").loc[second["source"]]
    # The second turn resends the first and its answer: llama.cpp serves that from the slot that held it.
    assert (second["cached_tokens"].to_numpy() >= first["prompt_tokens"].to_numpy() - 8).all()
    assert not records["flags"].fillna("").str.contains("cache_hit").any()


def test_run_rate_sends_shared_prefixes_that_llamacpp_serves_from_its_cache_and_only_within_a_run(llamacpp_server,
                                                                                                   tmp_path):
    path = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": f"Question {n}: why is the sky blue?", "max_tokens": 4}
                                                    for n in range(6)])
    for name in ("first", "again"):  # the same file twice on the same server: the second run is as fresh
        result = run_cli("run", "rate", "--rate", "1", "--arrivals", "constant", "--dataset", str(path),
                         "--prefix-tokens", "300", "--prefixes", "2", "--host", llamacpp_server.url,
                         "--out", str(tmp_path / name))
        assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
        print(result.stdout)
        records = load_records(tmp_path / name)
        records = records[records["scenario"] != "warmup"].sort_values("t_due")
        print(records[["source", "shared_tokens", "cached_tokens", "ttft_s", "send_lag_s"]].to_string(index=False))
        assert list(records["source"]) == [f"{path}:{line}" for line in range(1, 7)] and records["ok"].all()
        assert list(records["shared_tokens"]) == [0, 0, 300, 300, 300, 300]
        assert (records["completion_tokens"] == 4).all() and records["send_lag_s"].notna().all()
        # Each group's first request is read afresh (the template's opening and the prefix's opener at most: the
        # prefix is this run's own). A later one sent when every earlier request of its group had been answered
        # finds the prefix in an idle slot that read it; one sent while the slot holding it is still busy is given
        # another slot and reads it afresh (llama.cpp caches per slot), which a loaded machine makes happen.
        cached = list(records["cached_tokens"])
        assert max(cached[:2]) <= 40, cached
        ended = records["t_send"] + records["e2e_s"]
        after = [n for n in range(2, 6)
                 if all(ended.iloc[m] < records["t_send"].iloc[n] for m in range(n % 2, n, 2))]
        assert after and min(cached[n] for n in after) >= 300 - 16, (cached, after)
        assert not records["flags"].fillna("").str.contains("cache_hit").any()
