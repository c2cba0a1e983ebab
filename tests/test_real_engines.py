"""The quick suite against real engines on 127.0.0.1: llama.cpp (xllamacpp) and vLLM's CPU build.

Real engines keep the parser honest: their streams, usage chunks, caches and clocks are the ones users
meet. Sizes are small so each engine's suite takes about a minute on two cores.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.agreement import engine_clock, metrics_agreement
from analysis.load import load_metric_names, load_metrics
from analysis.records import has_flag
from bench_tasks import chat, run_mark, server
from tests.conftest import load_records, run_cli
from tests.engines.fixtures import NGRAM_SPECULATION

# The agreement tests hold our figures to the engine's own clock: the machine to themselves
# (tests/machine.py). The others check what was recorded, on a shared machine.
ALONE = pytest.mark.alone

SMALL_SUITE = ["--sizes", "1k,2k", "--needle-sizes", "1k", "--bursts", "1,4", "--runs", "1"]


def run_suite(server, tmp_path, *extra: str, cpus: set[int] | None = None) -> pd.DataFrame:
    out = tmp_path / "run"
    # The host as the OpenAI SDK spells it (OPENAI_BASE_URL ends in /v1): the same server.
    result = run_cli("quick", "--host", server.base_url, "--setup", server.model, *SMALL_SUITE, *extra,
                     "--out", str(out), timeout=900, cpus=cpus)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out)
    return records[records["scenario"] != "warmup"]


def assert_suite_complete(records: pd.DataFrame) -> None:
    assert set(records["scenario"]) == {"chat", "prompt", "agent", "burst", "needle"}
    failed = records[~records["ok"]]
    assert failed.empty, failed[["phase", "error", "error_detail"]].to_string()
    counts = records.groupby("phase").size().to_dict()
    assert counts == {"chat": 3, "prompt-1k": 1, "prompt-2k": 1, "agent": 6, "burst-1": 1, "burst-4": 4,
                      "needle-1k": 3}


def assert_fresh_prompts_uncached_and_agent_cached(records: pd.DataFrame) -> None:
    prompts = records[records["scenario"] == "prompt"]
    assert (prompts["prompt_tokens"] - prompts["prompt_size"]).abs().max() <= 0.01 * prompts["prompt_size"].max()
    # Every request was checked, none was served beyond what it may share (bench_tasks.cache_share).
    assert records["shareable_tokens"].notna().all() and records["cached_tokens"].notna().all()
    beyond = records[records["cached_tokens"] > records["shareable_tokens"]]
    assert beyond.empty and not has_flag(records, "cache_hit").any(), \
        beyond[["phase", "turn", "prompt_tokens", "cached_tokens", "shareable_tokens"]]
    agent = records[records["scenario"] == "agent"].sort_values("turn")
    assert agent["prompt_tokens"].is_monotonic_increasing  # the conversation grows
    assert (agent.loc[agent["turn"] >= 2, "cached_tokens"] > 0).all(), agent[["turn", "cached_tokens"]]


def test_llamacpp_quick_suite_then_a_second_run_served_nothing_of_it_and_a_repeat_flagged(llamacpp_server, tmp_path):
    """The quick suite on llama.cpp, then its chat and burst again: llama.cpp keeps each slot's last prompt (and
    a host cache of them) until reused, so a run that sent the same texts again was served them
    (docs/engines.md#llamacpp-prefix-cache). Each run's mark keeps the second fresh; a repeat of the first's
    mark is served from the cache, and flagged."""
    records = run_suite(llamacpp_server, tmp_path)
    assert_suite_complete(records)
    assert (records["engine"] == "llamacpp").all()  # detected from the server
    assert_fresh_prompts_uncached_and_agent_cached(records)
    assert records["engine_predicted_ms"].notna().all()  # llama.cpp's own timings were read
    first_mark = json.loads((tmp_path / "run" / "settings.json").read_text())["run_mark"]
    # The first run's chat questions and 4-at-once burst, sent again: under a new mark, then under the first's.
    again = ["quick", "--host", llamacpp_server.url, "--only", "chat,burst", "--bursts", "4", "--runs", "1"]
    runs = {}
    for name, extra in (("second", []), ("repeat", ["--repeat-mark", first_mark])):
        result = run_cli(*again, *extra, "--out", str(tmp_path / name), timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = load_records(tmp_path / name).query("scenario != 'warmup'")
    second = runs["second"]
    assert (second["cached_tokens"] <= second["shareable_tokens"]).all() and not has_flag(second, "cache_hit").any(), \
        second[["phase", "prompt_tokens", "cached_tokens", "shareable_tokens"]]
    # (A token count against the first run's would be off by how many tokens each run's mark makes: this
    # tokenizer splits digits one by one and groups letters, so "3f9a0c1e" is 8 tokens and "abcdef12" 3.)
    # The repeat: every prompt again, served from the slots and the host cache that still hold them.
    repeat = runs["repeat"]
    hits = has_flag(repeat, "cache_hit")
    assert hits.any() and (hits == (repeat["cached_tokens"] > repeat["shareable_tokens"])).all()
    assert "meant to be served from the server's cache" in (tmp_path / "repeat" / "summary.md").read_text()


@ALONE
def test_llamacpp_decode_agrees_with_its_own_timings(llamacpp_server, tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", "chat", "--host", llamacpp_server.url, "--requests", "6", "--max-tokens", "256",
                     "--ignore-eos", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).query("scenario == 'chat'")
    assert (records["completion_tokens"] == 256).all()
    agreement = engine_clock(records)
    assert len(agreement) == 6
    # Target: within 0.5%; the tiny model on two compute threads, as tests/test_engines_apis.py holds each API's
    # answers on it: 4%. Its 256 tokens take ~0.25 s, and on a loaded machine llama.cpp's HTTP thread sends an
    # event 2-4 ms after stamping it now and then (docs/engines.md#llamacpp-every-core-delay): a clean-clone
    # run read 0.02% (2026-12-07), one on a busier day 0.6 and -1.9% on this path. SmolLM2 on one thread is
    # the exact check (assert_decode_agrees_per_phase: 0.1%).
    assert agreement["decode_diff_pct"].abs().median() <= 4.0, agreement.to_string()
    print("llama.cpp decode agreement, % per request:", agreement["decode_diff_pct"].round(3).tolist())


# Prompts a 135M model answers at length and that n-gram speculation can draft from. The run's mark opens each
# (bench_tasks.run_mark), and SmolLM2 reads it as part of the task: asked to write the words one to ten three
# times, it wrote the mark's hex digits, to the length limit, for 10 of 18 marked copies (8 marks measured here).
# Asked to repeat a list given, the marked copies ended by themselves 21 of 24 times, in 39 to 60 tokens, with
# none to nine tenths of the drafted tokens accepted. The list is asked under a mark fixed here (--repeat-mark), whose
# three copies end by themselves (measured: 47, 39 and 46 tokens, 42/48, 28/64, 41/48 drafts accepted):
# fixed texts, as the question is.
LIST_PROMPT = ("Repeat this list three times, one list a line: one, two, three, four, five, six, seven, eight, "
               "nine, ten.")
LIST_MARK = "0c0ffee0"
COPY_PROMPT = ("Copy this text exactly, word for word:\n\nPhotosynthesis is the process by which green plants use "
               "sunlight, water and carbon dioxide to make glucose and oxygen. It takes place mainly in the leaves, "
               "inside small structures called chloroplasts.")


# With speculation llama.cpp stamps a step's accepted tokens at once, then writes their events one by one: its
# predicted_ms ends before the last step's events and the closing one are written, which the client (and the
# user) waits for (docs/engines.md#llamacpp-speculation-timings). At most size_m + 1 tokens a step and the
# closing event; measured 35-60 us an event (90 under perf trace), so 0.1 ms an event bounds it.
LAST_STEP_WRITE_MS = (NGRAM_SPECULATION["speculative.ngram_simple.size_m"] + 2) * 0.1


def assert_decode_agrees_per_phase(records: pd.DataFrame, last_step_write_ms: float = 0.0) -> pd.DataFrame:
    """The target of issue 12, per phase: median |decode diff| <= 0.1%, 90th percentile <= 0.5%. With
    ``last_step_write_ms``, the client's interval may exceed the engine's by that much more (never fall short
    more): the part of a negative difference within it is the engine's writing, not the client's error."""
    agreement = engine_clock(records)
    predicted_ms = agreement["request_id"].map(records.set_index("request_id")["engine_predicted_ms"]).astype(float)
    allowance_pct = last_step_write_ms / predicted_ms * 100
    residual = agreement["decode_diff_pct"].where(agreement["decode_diff_pct"] >= 0,
                                                  (agreement["decode_diff_pct"] + allowance_pct).clip(upper=0))
    agreement = agreement.assign(engine_predicted_ms=predicted_ms, residual_diff_pct=residual)
    by_phase = agreement.groupby("phase").agg(
        median=("decode_diff_pct", lambda d: d.abs().median()),
        residual_median=("residual_diff_pct", lambda d: d.abs().median()),
        residual_p90=("residual_diff_pct", lambda d: d.abs().quantile(0.9)), n=("decode_diff_pct", "size"))
    print(f"decode diff vs llama.cpp's predicted_per_second, |%| per phase (residual: beyond {last_step_write_ms} ms"
          f" of the engine's writing):\n" + by_phase.round(4).to_string())
    print("per request, %:", agreement["decode_diff_pct"].round(4).tolist())
    assert (by_phase["residual_median"] <= 0.1).all() and (by_phase["residual_p90"] <= 0.5).all(), agreement.to_string()
    return agreement


@ALONE
def test_smollm2_decode_agrees_with_llamacpp_on_answers_that_end_by_themselves(smollm2_server, tmp_path):
    out = tmp_path / "run"
    result = run_cli("quick", "--host", smollm2_server.url, "--only", "chat,agent,needle", "--needle-sizes", "1k",
                     "--runs", "1", "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).query("scenario != 'warmup'")
    assert records["ok"].all(), records[["phase", "error", "error_detail"]]
    stopped = records[records["finish_reason"] == "stop"]
    # A trained model ends by itself: its end-of-sequence token is counted and has no text.
    assert set(stopped["phase"]) >= {"chat", "needle-1k"}
    assert (stopped["completion_tokens"] == stopped["content_events"] + 1).all()
    assert (records["first_event_tokens_source"] == "profile").all()
    assert_decode_agrees_per_phase(records)


@ALONE
def test_smollm2_ngram_speculation_agrees_and_its_drafts_are_not_a_lumped_delivery(smollm2_ngram_server, tmp_path):
    out = tmp_path / "list"
    result = run_cli("run", "chat", "--host", smollm2_ngram_server.url, "--repeat-mark", LIST_MARK,
                     "--question", LIST_PROMPT, "--requests", "3", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).query("scenario == 'chat'")
    assert (records["finish_reason"] == "stop").all() and (records["engine_draft_accepted_n"] > 0).all()
    agreement = assert_decode_agrees_per_phase(records, last_step_write_ms=LAST_STEP_WRITE_MS)
    print("draft acceptance per request:", agreement["draft_acceptance_share"].round(3).tolist())
    # Copying: most tokens come from accepted drafts, written back to back, mostly read together.
    out = tmp_path / "copy"
    result = run_cli("run", "chat", "--host", smollm2_ngram_server.url, *["--question", COPY_PROMPT] * 2,
                     "--requests", "2", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    copy = load_records(out).query("scenario == 'chat'")
    print(copy[["content_events", "bunched_events", "engine_draft_n", "engine_draft_accepted_n", "flags"]])
    # Accepted drafts are more than half of the gaps: read together (as they often are, depending on
    # how fast the client reads), they alone would pass the lump rule, yet they are the engine's doing.
    assert (copy["engine_draft_accepted_n"] > 0.5 * (copy["content_events"] - 1)).all()
    assert not has_flag(copy, "bunched").any()


def test_smollm2_finds_the_needle(smollm2_server, tmp_path):
    out = tmp_path / "run"
    result = run_cli("quick", "--host", smollm2_server.url, "--only", "needle", "--needle-sizes", "2k",
                     "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    needles = load_records(out).query("scenario == 'needle'")
    assert needles["ok"].all() and len(needles) == 3
    # A 135M model is not reliable (the cache-busting marker changes each run). Measured over 8 runs
    # at 2k: found at 10% 2/8, at 50% 8/8, at 90% 7/8; no run found none. Random weights find 0/3;
    # so does a badly built haystack (the old one did).
    assert needles["needle_found"].sum() >= 1, needles[["needle_depth", "needle_found"]]


def test_smollm2_capacity_search_judges_each_class_on_llamacpp(smollm2_server, tmp_path):
    """The capacity search against a real engine, small and short. How many students SmolLM2 takes at a
    real SLO is measured with the defaults (docs/classroom.md#measured), not asserted here: this checks the search."""
    out = tmp_path / "run"
    result = run_cli("capacity", "--host", smollm2_server.url, "--slo", "ttft_p95=1.0,decode_p5=5", "--think-time",
                     "1-2", "--max-tokens", "48", "--start-students", "1", "--step", "+1", "--max-students", "2",
                     "--step-s", "4", "--settle-s", "2", "--min-requests", "4", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    print(result.stdout[-2000:])
    events = [json.loads(line) for line in (out / "capacity.jsonl").read_text().splitlines()]
    judged = [e for e in events if e["event"] == "step"]
    tried = list(dict.fromkeys(e["students"] for e in judged))  # a class refused for saturation is run again
    assert tried in ([1], [1, 2]) and events[-1]["event"] == "end"
    assert all(e["outcome"] in ("meets", "misses", "client_saturated") and e["requests"] >= 1 for e in judged)
    records = load_records(out)
    windows = records[records["phase"].str.startswith("class-")]
    assert windows["ok"].all()
    assert (windows["phase"].str.extract(r"class-(\d+)")[0].astype(int) == windows["students"]).all()
    assert windows["engine_predicted_n"].notna().all()  # llama.cpp's own timings kept beside ours
    assert "Largest class that met the SLO (ttft_p95 ≤ 1 s, decode_p5 ≥ 5 tok/s" in result.stdout
    assert "## Capacity" in (out / "summary.md").read_text()


def test_vllm_quick_suite(vllm_server, tmp_path):
    records = run_suite(vllm_server, tmp_path, cpus=vllm_server.client_cpus)
    assert_suite_complete(records)
    assert (records["engine"] == "vllm").all()
    assert_fresh_prompts_uncached_and_agent_cached(records)
    # vLLM streams usage on every event: the first event's tokens are read, not estimated.
    assert (records["first_event_tokens_source"] == "usage").all()


@ALONE
def test_vllm_ttft_beside_its_own_histogram(vllm_server, tmp_path):
    out = tmp_path / "run"
    result = run_cli("quick", "--host", vllm_server.url, "--only", "chat,prompt", "--sizes", "1k", "--runs", "2",
                     "--out", str(out), timeout=900, cpus=vllm_server.client_cpus)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics, problems = load_metrics(out)
    assert not problems and not metrics.empty
    table = metrics_agreement(load_records(out), metrics)
    for phase in ("chat", "prompt-1k"):
        row = table.set_index("phase").loc[phase]
        print(f"vLLM {phase}: engine TTFT mean {row['engine_ttft_mean_s']:.4f} s over {row['engine_requests']:.0f}"
              f" requests, client {row['client_ttft_mean_s']:.4f} s over {row['client_requests']}"
              f" ({row['client_failed_requests']} failed)")
        # Both means over the same requests (a CI run once compared 3 engine requests with 2 of the
        # client's: a fresh prompt answered only by end-of-sequence has no first token for the client).
        assert row["client_failed_requests"] == 0 and row["engine_requests"] == row["client_requests"]
        # vLLM's clock runs from its API server's arrival stamp to its first-token stamp; ours from the
        # send to the token's arrival. They agree to within a few percent (a few ms of stamp placement);
        # a client figure far above the engine's is a delivery delay the engine cannot see.
        assert row["engine_ttft_mean_s"] <= row["client_ttft_mean_s"] * 1.05 + 0.002
        assert row["engine_prompt_tokens"] == row["client_prompt_tokens"]
        straddling = row["warmup_requests_straddling"]
        assert abs(row["engine_generation_tokens"] - row["client_completion_tokens"]) <= 8 * (straddling + 1)


@pytest.mark.timeout(900)
def test_vllm_speculative_decoding_multi_token_events(vllm_ngram_server, tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", "chat", "--host", vllm_ngram_server.url, "--requests", "3", "--max-tokens", "128",
                     "--ignore-eos", "--out", str(out), timeout=600, cpus=vllm_ngram_server.client_cpus)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out).query("scenario == 'chat'")
    assert (records["first_event_tokens_source"] == "usage").all()
    multi = records[records["tokens_per_event"] > 1.05]
    assert not multi.empty, records[["tokens_per_event", "content_events", "completion_tokens"]]
    # Our rate counts the tokens after the first event; the naive (events - 1) formula would not.
    row = multi.iloc[0]
    expected = (row["completion_tokens"] - row["first_event_tokens"]) / row["decode_s"]
    assert row["decode_tps"] == pytest.approx(expected)


def novel_stop_string(text: str, length: int = 6) -> str:
    """A piece of the answer that first appears past its middle: asked for as a stop string, it ends
    the answer there (the random model loops, so most pieces appear early)."""
    for i in range(len(text) // 2, len(text) - length):
        if text.find(text[i:i + length]) == i:
            return text[i:i + length]
    raise AssertionError(f"no piece of the answer appears first past its middle: {text!r}")


def messages_sent(mark: str, question: str, requests: int) -> list[list[dict]]:
    """What ``run chat --repeat-mark MARK --question QUESTION --requests N`` sends, request by request: the
    question opened by the mark and the request's own code (one process, worker 0: locustfiles/chat.py)."""
    return [chat.messages(question, run_mark.opening(mark, "chat", 0, n)) for n in range(requests)]


# The random model loops: measured here, 26 of 30 marked answers (5 marks) had a piece that first appears past their
# middle, the other 4 looped from before it. Under this mark each of the first six does: fixed texts, as the
# question is. Four answers, as vLLM takes at most four stop strings (OpenAI's limit: more, and it refuses every
# request with a 400).
STOP_MARK = "5eed1157"
STOP_ANSWERS = 4


@ALONE
@pytest.mark.timeout(900)
def test_vllm_ngram_speculation_agrees_on_answers_cut_by_a_stop_string(vllm_ngram_server, tmp_path):
    # The run's mark fixed (--repeat-mark), so that the stop strings come from the answers to exactly the messages
    # the run sends: each answer ends at its own, or earlier at another's.
    question, stops = chat.QUESTIONS[1], []
    for messages in messages_sent(STOP_MARK, question, STOP_ANSWERS):
        answer = server.post_json(vllm_ngram_server.url, "/v1/chat/completions", {
            "model": vllm_ngram_server.model, "messages": messages, "max_tokens": 256, "temperature": 0})
        stops.append(novel_stop_string(answer["choices"][0]["message"]["content"]))
    out = tmp_path / "run"
    result = run_cli("run", "chat", "--host", vllm_ngram_server.url, "--repeat-mark", STOP_MARK,
                     "--question", question, *[arg for stop in dict.fromkeys(stops) for arg in ("--stop", stop)],
                     "--max-tokens", "256", "--requests", str(STOP_ANSWERS), "--out", str(out), timeout=600,
                     cpus=vllm_ngram_server.client_cpus)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out)
    chat_records = records[records["scenario"] == "chat"]
    # Ended by the stop string: its tokens are counted, its text never sent.
    assert (chat_records["finish_reason"] == "stop").all() and (chat_records["completion_tokens"] < 256).all()
    metrics, problems = load_metrics(out)
    assert not problems and set(metrics["phase"]) == {"chat"}
    row = metrics_agreement(records, metrics, load_metric_names(out)).set_index("phase").loc["chat"]
    print(f"vLLM n-gram, stops {stops}: decode {row['client_decode_tps']:.1f} tok/s (client) vs "
          f"{row['engine_decode_tps']:.1f} (engine), {row['decode_diff_pct']:+.2f}%; acceptance "
          f"{row['engine_spec_acceptance_share']:.0%} of {row['engine_spec_draft_tokens']:.0f} drafted")
    assert row["engine_requests"] == row["client_requests"] and row["engine_spec_draft_tokens"] > 0
    # Pooled over 1.5-3.5 s of decoding (four answers of ~200 tokens, 90-97% of drafts accepted): 0.5% is 7-17 ms,
    # 2-4 ms a request, so a few ms of delay in vLLM's API server before it streams a chunk show here.
    # With all of vLLM on one core and the client on the other (fixtures.vllm_cores; before, its engine
    # core spun on the second core and held the API server back: CI +10.6%, here up to +32%), measured
    # with other work on the machine: 31 runs within 0.28%, median |diff| 0.04%. Counting events as
    # tokens would read -75%; the multi-token arithmetic is also checked per request above
    # (test_vllm_speculative_decoding_multi_token_events) and held to the sim's truth (test_accuracy_sim).
    # A clean-clone CI run read +0.52% (584.1 against 581.1 tok/s: 1.4 s of decoding, 7 ms pooled, under 2 ms
    # a request): at vLLM's fastest 0.5% leaves too little for its API server, so 1%, still 75 times tighter
    # than counting events and 10 times tighter than the core-sharing fault above.
    assert abs(row["decode_diff_pct"]) <= 1.0
