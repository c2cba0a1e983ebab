"""The analysis on small hand-checked frames: exact medians, p95, min/max, failures and flags."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis import agreement, cells, load, overview, study
from analysis.records import ok_mask
from analysis.spread import LONG_COLUMNS
from bench_tasks.record import COLUMNS, Record
from bench_tasks.records_file import write_csv

DEFAULTS = {"setup": "", "engine": "sim", "model": "m", "client_host": "c1", "ok": True, "done": True}


def rows(*records: dict, **defaults) -> list[dict]:
    """Record dicts with the Record's field names, defaults filled in."""
    return [Record(**{**DEFAULTS, **defaults, **r}).to_dict() for r in records]


def frame(*records: dict, **defaults) -> pd.DataFrame:
    """Records as analysis sees them after loading: the Record's types, missing as <NA>."""
    as_text = [{k: "" if v is None else str(v) for k, v in r.items()} for r in rows(*records, **defaults)]
    return load.typed(pd.DataFrame(as_text, columns=list(COLUMNS)))


def figure(long: pd.DataFrame, table: str, row: str, metric: str) -> dict:
    hit = long[(long["table"] == table) & (long["row"] == row) & (long["metric"] == metric)]
    assert len(hit) == 1, f"{table}/{row}/{metric}: {len(hit)} rows"
    return hit.iloc[0].to_dict()


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)


def check(long, table, row, metric, median, low, high, n):
    got = figure(long, table, row, metric)
    assert same(got["median"], median) and same(got["min"], low) and same(got["max"], high), got
    assert got["n"] == n, got


NAN = float("nan")


# -- one person at a time -------------------------------------------------------------------------

def test_chat_is_the_median_over_runs_of_each_runs_median():
    records = frame(
        {"round": 1, "ttft_s": 0.1, "decode_tps": 10.0}, {"round": 1, "ttft_s": 0.3, "decode_tps": 30.0},
        {"round": 1, "ttft_s": 0.2, "decode_tps": 20.0},
        {"round": 2, "ttft_s": 0.5, "decode_tps": 50.0}, {"round": 2, "ttft_s": 0.4, "decode_tps": 40.0},
        {"round": 3, "ttft_s": 1.0, "decode_tps": None},  # one event: no decode rate, not 0
        {"round": 3, "ok": False, "error": "timeout", "ttft_s": 9.9, "decode_tps": 999.0},  # never measured
        {"scenario": "warmup", "phase": "warmup-chat", "ttft_s": 50.0, "decode_tps": 1.0},  # never counted
        scenario="chat", phase="chat")
    long = study.chat_table(records)
    check(long, "chat", "chat", "ttft_s", 0.45, 0.2, 1.0, 3)  # run medians 0.2, 0.45, 1.0
    check(long, "chat", "chat", "decode_tps", 32.5, 20.0, 45.0, 2)  # run 3 has no rate: 2 runs
    assert set(long["row"]) == {"chat"}


def test_prompt_figures_per_size_and_an_all_failed_size_shows_missing_not_zero():
    records = frame(
        {"phase": "prompt-4k", "prompt_size": 4096, "round": 1, "ttft_s": 1.0, "prompt_tps": 4096.0,
         "prompt_tokens": 4096},
        {"phase": "prompt-4k", "prompt_size": 4096, "round": 2, "ttft_s": 2.0, "prompt_tps": 2048.0,
         "prompt_tokens": 4100},
        {"phase": "prompt-32k", "prompt_size": 32768, "round": 1, "ok": False, "error": "context_exceeded"},
        {"phase": "prompt-32k", "prompt_size": 32768, "round": 2, "ok": False, "error": "http_500"},
        scenario="prompt")
    long = study.prompt_table(records)
    check(long, "prompt", "prompt-4k", "prompt_tps", 3072.0, 2048.0, 4096.0, 2)
    check(long, "prompt", "prompt-4k", "prompt_tokens", 4098.0, 4096.0, 4100.0, 2)
    check(long, "prompt", "prompt-32k", "ttft_s", NAN, NAN, NAN, 0)
    check(long, "prompt", "prompt-32k", "prompt_tps", NAN, NAN, NAN, 0)
    shown = cells.display(long)
    assert shown.set_index("row").loc["prompt-32k", "prompt_tps"] == "–"
    assert list(shown["row"]) == ["prompt-4k", "prompt-32k"]  # size order
    errors = study.errors_table(records)
    check(errors, "errors", "prompt-32k", "context_exceeded", 1, NAN, NAN, 2)
    check(errors, "errors", "prompt-32k", "http_500", 1, NAN, NAN, 2)
    check(errors, "errors", "prompt-4k", "http_500", 0, NAN, NAN, 2)  # a real zero: requests were sent
    assert any("prompt-32k: all 2 requests failed" in w for w in study.warnings(records))


def test_agent_session_and_turns():
    records = frame(
        {"round": 1, "turn": 1, "ttft_s": 0.2, "decode_tps": 30.0, "prompt_tokens": 1000, "cached_tokens": 0,
         "tool_name": "read_file", "tool_call_valid": True},
        {"round": 1, "turn": 2, "ttft_s": 0.6, "decode_tps": 40.0, "prompt_tokens": 1500, "cached_tokens": 990,
         "tool_name": "search", "tool_call_valid": False},
        {"round": 2, "turn": 1, "ttft_s": 0.4, "decode_tps": 20.0, "prompt_tokens": 1000, "cached_tokens": None,
         "tool_name": "read_file", "tool_call_valid": True},
        {"round": 2, "turn": 2, "ttft_s": 1.0, "decode_tps": 50.0, "prompt_tokens": 1600, "cached_tokens": 1000},
        scenario="agent", phase="agent")
    long = study.agent_table(records)
    check(long, "agent", "agent", "ttft_s", 0.55, 0.4, 0.7, 2)  # sessions: median(0.2, 0.6), median(0.4, 1.0)
    check(long, "agent", "agent", "decode_tps", 35.0, 35.0, 35.0, 2)
    turns = study.agent_turns_table(records)
    check(turns, "agent_turns", "turn 1", "ttft_s", 0.3, 0.2, 0.4, 2)
    check(turns, "agent_turns", "turn 1", "cached_tokens", 0.0, 0.0, 0.0, 1)  # unknown is not 0
    check(turns, "agent_turns", "turn 2", "prompt_tokens", 1550.0, 1500.0, 1600.0, 2)
    check(turns, "agent_turns", "turn 1", "tool_call_valid_share", 1.0, NAN, NAN, 2)
    check(turns, "agent_turns", "turn 2", "tool_call_valid_share", 0.0, NAN, NAN, 1)  # 1 call, invalid
    check(turns, "agent_turns", "turn 2", "tool_calls", 1, NAN, NAN, 2)


# -- N at once ------------------------------------------------------------------------------------

def burst_records():
    r1 = [  # released together; the fourth failed and is left out of every figure but the spread
        {"round": 1, "ttft_s": 0.1, "e2e_s": 2.0, "release_offset_s": 0.00, "completion_tokens": 100,
         "decode_tps": 50.0},
        {"round": 1, "ttft_s": 0.2, "e2e_s": 3.0, "release_offset_s": 0.01, "completion_tokens": 100,
         "decode_tps": 40.0},
        {"round": 1, "ttft_s": 0.4, "e2e_s": 4.0, "release_offset_s": 0.02, "completion_tokens": 100,
         "decode_tps": 30.0},
        {"round": 1, "ok": False, "error": "disconnect", "e2e_s": 10.0, "release_offset_s": 0.05,
         "completion_tokens": 100},
    ]
    r2 = [  # no release offsets: the span comes from the send times (two machines, one clock offset)
        {"round": 2, "ttft_s": 0.3, "e2e_s": 1.0, "t_send": 100.0, "completion_tokens": 60, "decode_tps": 60.0},
        {"round": 2, "ttft_s": 0.3, "e2e_s": 1.5, "t_send": 50.2, "clock_offset_s": 50.0, "completion_tokens": 60,
         "decode_tps": 40.0, "client_host": "c2"},
        {"round": 2, "ttft_s": 0.5, "e2e_s": 1.0, "t_send": 100.1, "completion_tokens": 80, "decode_tps": 20.0},
    ]
    return frame(*r1, *r2, scenario="burst", phase="burst-4", concurrency=4)


def test_burst_round_figures():
    rounds = study.burst_rounds(burst_records()).set_index("round")
    assert rounds.loc[1, "total_tps"] == pytest.approx(300 / 4.02)  # release to the last ok end
    assert rounds.loc[1, "ttft_p95_s"] == pytest.approx(np.percentile([0.1, 0.2, 0.4], 95))
    assert rounds.loc[1, "ttft_p95_s"] == pytest.approx(0.38)
    assert rounds.loc[1, "start_spread_s"] == pytest.approx(0.05)  # the failed request was sent too
    assert rounds.loc[1, "per_user_decode_tps"] == 40.0
    assert rounds.loc[2, "total_tps"] == pytest.approx(200 / (101.7 - 100.0))  # starts 100.0, 100.2, 100.1
    assert math.isnan(rounds.loc[2, "start_spread_s"])  # unknown, not 0
    assert rounds.loc[2, "ttft_p95_s"] == pytest.approx(0.48)
    assert list(rounds["requests"]) == [4, 3] and list(rounds["ok"]) == [3, 3]


def test_burst_is_median_over_rounds():
    long = study.burst_tables(burst_records())
    a, b = 300 / 4.02, 200 / 1.7
    check(long, "burst", "burst-4", "total_tps", (a + b) / 2, a, b, 2)
    check(long, "burst", "burst-4", "ttft_p95_s", 0.43, 0.38, 0.48, 2)
    check(long, "burst", "burst-4", "start_spread_s", 0.05, 0.05, 0.05, 1)
    check(long, "burst", "burst-4", "per_user_decode_tps", 40.0, 40.0, 40.0, 2)
    rounds = study.burst_tables(burst_records())
    check(rounds, "burst_rounds", "burst-4 round 1", "total_tps", a, NAN, NAN, 3)


def test_a_burst_round_that_all_failed_has_no_throughput():
    records = frame({"round": 1, "ok": False, "error": "timeout", "release_offset_s": 0.0, "e2e_s": 300.0},
                    scenario="burst", phase="burst-1", concurrency=1)
    check(study.burst_tables(records), "burst", "burst-1", "total_tps", NAN, NAN, NAN, 0)


# -- needles, requests, flags ---------------------------------------------------------------------

def test_needles_found_per_size_and_depth():
    records = frame(
        {"needle_depth": 0.1, "needle_found": True, "e2e_s": 3.0},
        {"needle_depth": 0.5, "needle_found": False, "e2e_s": 5.0},
        {"needle_depth": 0.9, "ok": False, "error": "timeout"},
        scenario="needle", phase="needle-32k", round=1, prompt_size=32768)
    long = study.needle_table(records)
    check(long, "needle", "needle-32k depth 0.1", "found", 1, NAN, NAN, 1)
    check(long, "needle", "needle-32k depth 0.5", "found_share", 0.0, NAN, NAN, 1)
    check(long, "needle", "needle-32k depth 0.9", "found", NAN, NAN, NAN, 0)  # failed: not "not found"
    check(long, "needle", "needle-32k all depths", "found_share", 0.5, NAN, NAN, 2)
    check(long, "needle", "needle-32k all depths", "e2e_s", 4.0, 3.0, 5.0, 2)


def test_requests_failures_and_flags_are_counted_per_phase():
    records = frame(
        {"phase": "prompt-4k", "scenario": "prompt", "flags": "cache_hit"},
        {"phase": "prompt-4k", "scenario": "prompt"},
        {"phase": "burst-12", "scenario": "burst", "flags": "cache_hit;client_saturated"},
        {"phase": "burst-12", "scenario": "burst", "ok": False, "error": "http_429", "flags": "client_saturated"},
        {"phase": "burst-12", "scenario": "burst", "ok": False, "error": ""},
        {"phase": "warmup-burst", "scenario": "warmup", "ok": False, "error": "timeout"},
        round=1)
    long = study.requests_table(records)
    check(long, "requests", "burst-12", "requests", 3, NAN, NAN, 3)
    check(long, "requests", "burst-12", "failed", 2, NAN, NAN, 3)
    check(long, "requests", "burst-12", "client_saturated", 2, NAN, NAN, 3)
    check(long, "requests", "prompt-4k", "cache_hit", 1, NAN, NAN, 2)
    assert "warmup-burst" not in set(long["row"])
    errors = study.errors_table(records)
    check(errors, "errors", "burst-12", "unknown", 1, NAN, NAN, 3)
    assert "timeout" not in set(errors["metric"])  # a warm-up's failure is not counted
    notes = study.warnings(records)
    assert any(n.startswith("burst-12: 2 of 3 requests were read too late by a saturated client") for n in notes)
    assert any(n.startswith("prompt-4k: 1 of 1 requests (100%) were served from a cache beyond what they may share")
               for n in notes)  # the other reported no cached tokens: not checked


def test_study_has_the_long_columns_and_overview_still_works():
    records = burst_records()
    long = study.study(records)
    assert list(long.columns) == LONG_COLUMNS
    table = overview.overview(records)
    assert list(table["phase"]) == ["burst-4"] and table.loc[0, "errors"] == 1


def test_overview_burst_total_is_the_reports_median_over_rounds_not_over_the_phase_with_its_pauses():
    table = overview.overview(burst_records()).set_index("phase")
    assert table.loc["burst-4", "total_tps"] == pytest.approx((300 / 4.02 + 200 / 1.7) / 2)
    long = study.burst_tables(burst_records())
    assert table.loc["burst-4", "total_tps"] == pytest.approx(figure(long, "burst", "burst-4", "total_tps")["median"])


def test_overview_total_tps_without_any_token_count_is_missing_not_zero():
    records = frame({"t_send": 1.0, "e2e_s": 2.0, "ttft_s": 0.5}, {"t_send": 1.5, "e2e_s": 2.0, "ttft_s": 0.6},
                    scenario="chat", phase="chat", round=1)
    table = overview.overview(records)
    assert table.loc[0, "total_tps"] is None and table.loc[0, "ttft_p50_s"] == pytest.approx(0.55)


def test_a_phase_with_lumped_streams_is_warned_about():
    records = frame({"flags": "bunched"}, {"flags": ""}, scenario="chat", phase="chat", round=1, cached_tokens=0,
                    shareable_tokens=17)
    assert study.warnings(records) == ["chat: 1 of 2 streams arrived in lumps; their decode and gap figures "
                                       "time the delivery, not the generation."]


# -- agreement with the engine --------------------------------------------------------------------

def test_engine_clock_like_for_like_with_a_convention_parameter():
    records = frame({"completion_tokens": 101, "first_event_tokens": 1, "decode_s": 2.0, "ttft_s": 0.3,
                     "ttfb_s": 0.05, "engine_predicted_n": 101, "engine_predicted_ms": 2000.0,
                     "engine_prompt_ms": 200.0, "engine_draft_n": 40, "engine_draft_accepted_n": 30},
                    {"completion_tokens": 50, "decode_s": 1.0},  # no timings: not in the table
                    scenario="chat", phase="chat", round=1)
    table = agreement.engine_clock(records)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["client_decode_tps"] == pytest.approx(50.0)
    assert row["engine_decode_tps"] == pytest.approx(50.0)  # llama.cpp's (n - 1) / predicted_ms
    assert row["decode_diff_pct"] == pytest.approx(0.0)
    # From the headers (sent when a slot took the request) to the first token, against prompt_ms.
    assert row["ttft_diff_ms"] == pytest.approx(50.0) and row["ttft_diff_pct"] == pytest.approx(25.0)
    assert row["draft_acceptance_share"] == pytest.approx(0.75)

    def all_tokens(r):  # another engine's convention: every token over the same span
        return r["engine_predicted_n"].astype(float) / (r["engine_predicted_ms"].astype(float) / 1000)

    other = agreement.engine_clock(records, engine_rate=all_tokens)
    assert other.iloc[0]["engine_decode_tps"] == pytest.approx(50.5)
    by_phase = agreement.engine_clock_table(table)
    check(by_phase, "engine_clock", "chat", "ttft_diff_ms", 50.0, 50.0, 50.0, 1)


def test_metrics_agreement_counts_warmups_inside_the_window():
    records = frame(
        {"phase": "chat", "scenario": "chat", "t_send": 11.0, "ttft_s": 0.2, "prompt_tokens": 30,
         "completion_tokens": 50},
        {"phase": "chat", "scenario": "chat", "t_send": 12.0, "ttft_s": 0.4, "prompt_tokens": 30,
         "completion_tokens": 50},
        {"phase": "warmup-chat", "scenario": "warmup", "t_send": 10.5, "ttft_s": 0.3, "prompt_tokens": 10,
         "completion_tokens": 8},
        {"phase": "warmup-chat", "scenario": "warmup", "t_send": 5.0, "ttft_s": 9.0, "prompt_tokens": 99},
        {"phase": "warmup-chat", "scenario": "warmup", "t_send": 9.5, "e2e_s": 1.0, "ttft_s": 0.1},  # straddles
        {"phase": "chat", "scenario": "chat", "t_send": 13.0, "ok": False, "error": "empty_answer",
         "prompt_tokens": 30, "completion_tokens": 1},
        round=1)
    metrics = pd.DataFrame([
        ("chat", "before", 10.0, "vllm:time_to_first_token_seconds_sum", 1.0),
        ("chat", "before", 10.0, "vllm:time_to_first_token_seconds_count", 2.0),
        ("chat", "before", 10.0, "vllm:prompt_tokens_total", 100.0),
        ("chat", "after", 20.0, "vllm:time_to_first_token_seconds_sum", 2.2),
        ("chat", "after", 20.0, "vllm:time_to_first_token_seconds_count", 6.0),
        ("chat", "after", 20.0, "vllm:prompt_tokens_total", 170.0),
    ], columns=["phase", "when", "t", "series", "value"])
    table = agreement.metrics_agreement(records, metrics).set_index("phase")
    row = table.loc["chat"]
    assert row["engine_ttft_mean_s"] == pytest.approx(1.2 / 4)
    assert row["client_ttft_mean_s"] == pytest.approx(0.3)  # 0.2, 0.4 and the warm-up's 0.3
    assert row["engine_prompt_tokens"] == 70 and row["client_prompt_tokens"] == 70
    assert row["warmup_requests_in_window"] == 1 and row["records_outside_window"] == 0
    assert row["warmup_requests_straddling"] == 1
    # The engine timed 4 first tokens; the client 3, and says one failed record may be the fourth.
    assert row["engine_requests"] == 4 and row["client_requests"] == 3 and row["client_failed_requests"] == 1
    assert math.isnan(row["engine_generation_tokens"])  # not read: missing, not 0
    long = agreement.metrics_table(table.reset_index())
    check(long, "engine_metrics", "chat", "engine_prompt_tokens", 70, NAN, NAN, 3)


def test_metrics_agreement_decode_like_for_like_and_counters_that_count_what_they_say():
    records = frame(
        {"t_send": 11.0, "completion_tokens": 51, "first_event_tokens": 1, "decode_s": 1.0, "prompt_tokens": 100,
         "cached_tokens": 60, "ttft_s": 0.1},
        {"t_send": 12.0, "completion_tokens": 31, "first_event_tokens": 1, "decode_s": 0.5, "prompt_tokens": 100,
         "cached_tokens": 0, "ttft_s": 0.1},
        phase="agent", scenario="agent", round=1)

    def readings(before: dict, after: dict) -> pd.DataFrame:
        return pd.DataFrame([("agent", when, t, name, value) for when, t, values in
                             (("before", 10.0, before), ("after", 20.0, after)) for name, value in values.items()],
                            columns=["phase", "when", "t", "series", "value"])

    vllm = {"vllm:request_generation_tokens_sum": 82.0, "vllm:request_generation_tokens_count": 2.0,
            "vllm:request_decode_time_seconds_sum": 1.6, "vllm:spec_decode_num_draft_tokens_total": 40.0,
            "vllm:spec_decode_num_accepted_tokens_total": 10.0, "vllm:prompt_tokens_total": 200.0}
    table = agreement.metrics_agreement(records, readings({k: 0.0 for k in vllm}, vllm)).set_index("phase")
    row = table.loc["agent"]
    # Both sides: the tokens after each request's first, over the time from its first token to its last.
    assert row["engine_decode_tps"] == pytest.approx(80 / 1.6) and row["client_decode_tps"] == pytest.approx(80 / 1.5)
    assert row["decode_diff_pct"] == pytest.approx((80 / 1.5 - 50) / 50 * 100)
    assert row["engine_spec_acceptance_share"] == pytest.approx(0.25)
    assert row["client_prompt_tokens"] == 200 == row["engine_prompt_tokens"]  # vLLM counts cached tokens too
    # llama.cpp's prompt counter leaves cached tokens out: the client side counts what it counts.
    llama = {"llamacpp:prompt_tokens_total": 140.0, "llamacpp:tokens_predicted_total": 82.0}
    names = {"prompt_tokens_total": "llamacpp:prompt_tokens_total", "prompt_tokens_counted": "processed",
             "generation_tokens_total": "llamacpp:tokens_predicted_total"}
    row = agreement.metrics_agreement(records, readings({k: 0.0 for k in llama}, llama), names).iloc[0]
    assert row["client_prompt_tokens"] == 140 == row["engine_prompt_tokens"]
    assert math.isnan(row["engine_decode_tps"]) and math.isnan(row["engine_spec_acceptance_share"])
    long = agreement.metrics_table(agreement.metrics_agreement(records, readings({k: 0.0 for k in llama}, llama),
                                                               names))
    assert "engine_ttft_mean_s" not in set(long["metric"])  # no such series in any phase: not a column
    unknown = frame({"t_send": 11.0, "prompt_tokens": 100, "ttft_s": 0.1}, phase="agent", scenario="agent", round=1)
    row = agreement.metrics_agreement(unknown, readings({k: 0.0 for k in llama}, llama), names).iloc[0]
    assert math.isnan(row["client_prompt_tokens"])  # cached tokens unknown: the like-for-like sum is unknown


# -- loading --------------------------------------------------------------------------------------

def test_load_runs_merges_client_machines_of_one_run(tmp_path):
    one, two = tmp_path / "client-a", tmp_path / "client-b"
    one.mkdir()
    two.mkdir()
    burst = {"scenario": "burst", "phase": "burst-4", "concurrency": 4, "round": 1, "completion_tokens": 100}
    write_csv(rows({**burst, "release_offset_s": 0.0, "e2e_s": 2.0}, {**burst, "release_offset_s": 0.01, "e2e_s": 2.5},
                   client_host="a", setup="vllm"), one / "requests.csv")
    write_csv(rows({**burst, "release_offset_s": 0.02, "e2e_s": 3.98}, {**burst, "release_offset_s": 0.0, "e2e_s": 2.0},
                   client_host="b", setup="vllm"), two / "requests.csv")
    records, problems = load.load_runs([one, two])
    assert problems == []
    assert sorted(records["client_host"].unique()) == ["a", "b"] and set(records["setup"]) == {"vllm"}
    check(study.burst_tables(records), "burst", "burst-4", "total_tps", 400 / 4.0, 400 / 4.0, 400 / 4.0, 1)


def test_load_runs_labels_and_duplicates(tmp_path):
    one, two, three = (tmp_path / n for n in ("run-one", "run-two", "run-three"))
    for d in (one, two, three):
        d.mkdir()
    write_csv(rows({"scenario": "chat", "phase": "chat"}), one / "requests.csv")
    write_csv(rows({"scenario": "chat", "phase": "chat"}, setup="named"), two / "requests.csv")
    write_csv(rows({"scenario": "chat", "phase": "chat"}), three / "requests.csv")
    records, _ = load.load_runs([one, two, three], labels=["given", "ignored"])
    assert list(records["setup"]) == ["given", "named", "run-three"]
    records, problems = load.load_runs([one, one], labels=["x", "x"])
    assert len(records) == 1 and any("found in more than one directory" in p for p in problems)


def test_malformed_rows_and_unknown_columns_are_reported(tmp_path):
    header = ",".join([*COLUMNS, "surprise"])
    good = Record(scenario="chat", phase="chat", ok=True, ttft_s=0.5).to_dict()
    cell = {k: "" if v is None else str(v) for k, v in good.items()}
    line = ",".join([*(cell[c] for c in COLUMNS), "x"])
    bad_value = line.replace(",0.5,", ",abc,", 1)
    (tmp_path / "requests.csv").write_text("\n".join([header, line, "chat,too,short", bad_value]) + "\n")
    records, info = load.load_run(tmp_path)
    assert len(records) == 2 and info["complete"]
    text = "\n".join(info["problems"])
    assert "unknown column 'surprise'" in text
    assert "requests.csv line 3: 3 cells" in text
    assert "column ttft_s: 1 value(s) not of type" in text and "requests.csv line 4" in text
    assert records["ttft_s"].isna().sum() == 1  # read as missing, never 0


def test_a_killed_run_loads_from_jsonl_and_is_marked_incomplete(tmp_path):
    good = json.dumps(Record(scenario="chat", phase="chat", ok=True, ttft_s=0.5, round=1).to_dict())
    (tmp_path / "records.jsonl").write_text(good + "\n" + good[:40] + "\n")
    records, problems = load.load_runs([tmp_path])
    assert len(records) == 1 and not records["run_complete"].any()
    assert any("records.jsonl line 2: not a JSON object" in p for p in problems)
    assert records["ttft_s"].iloc[0] == 0.5 and records["ok"].iloc[0]


def test_worker_files_are_read_together(tmp_path):
    for host in ("a", "b"):
        record = Record(scenario="chat", phase="chat", ok=True, client_host=host, decode_tps=None)
        (tmp_path / f"worker-{host}-1.jsonl").write_text(json.dumps(record.to_dict()) + "\n")
    records, info = load.load_run(tmp_path)
    assert sorted(records["client_host"]) == ["a", "b"] and not info["complete"] and info["problems"] == []
    assert records["decode_tps"].isna().all()


def test_analysis_never_imports_locust_or_gevent():
    code = ("import sys, analysis.report, analysis.agreement, analysis.overview; "
            "assert not {'locust', 'gevent'} & set(sys.modules), sorted(sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0


# -- reading every kind of file alike ---------------------------------------------------------------

def messy_csv(path, extra_rows: int = 0) -> None:
    """requests.csv with what hands and other tools do to one: quoted cells holding commas, quotes and
    newlines, a short row, a long row, a blank line, values of the wrong type, an unknown column."""
    def line(**fields) -> list[str]:
        record = Record(**{**DEFAULTS, "scenario": "chat", "phase": "chat", "round": 1, "ttft_s": 0.5, **fields})
        return ["" if v is None else str(v) for v in record.to_dict().values()] + ["x"]

    lines = [line(error_detail='said "no", twice\nthen, again\r\nand stopped', ok=False),  # file line 2-4
             ["chat", "too", "short"],  # 5
             line() + ["one too many"],  # 6
             [],  # 7: blank
             line(ok="maybe"), line(round="1.5"), line(round="nan"), line(ttft_s="abc"),  # 8-11
             line(ttft_s="nan"), line(ttft_s=" 0.25 "), line(needle_found="yes"), line(turn=None)]  # 12-15
    lines += [line(round=r) for r in range(2, 2 + extra_rows)]
    import csv
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*COLUMNS, "surprise"])
        writer.writerows(lines)


def test_a_messy_csv_is_read_with_each_problem_named_by_its_line(tmp_path, monkeypatch):
    messy_csv(tmp_path / "requests.csv", extra_rows=40)
    for rows in (load.CHUNK_ROWS, 7):  # 7: chunks cut the records
        monkeypatch.setattr(load, "CHUNK_ROWS", rows)
        records, info = load.load_run(tmp_path)
        assert info["bad_lines"] == 2
    width = len(COLUMNS) + 1
    assert info["problems"] == [
        f"requests.csv line 5: 3 cells where the header has {width}; row skipped",
        f"requests.csv line 6: {width + 1} cells where the header has {width}; row skipped",
        "unknown column 'surprise': kept, not analysed",
        "column round: 2 value(s) not of type int | None (requests.csv line 9, requests.csv line 10), read as missing",
        "column ok: 1 value(s) not of type bool (requests.csv line 8), read as missing",
        "column ttft_s: 1 value(s) not of type float | None (requests.csv line 11), read as missing"]
    assert len(records) == 49 and records["error_detail"].iloc[0] == 'said "no", twice\nthen, again\r\nand stopped'
    shown = records.iloc[:8]
    assert shown["ttft_s"].isna().tolist() == [False, False, False, False, True, True, False, False]
    assert shown["ttft_s"].iloc[6] == 0.25 and shown["needle_found"].iloc[7]
    assert shown["round"].isna().tolist() == [False, False, True, True, False, False, False, False]
    assert shown["turn"].isna().all() and shown["ok"].isna().tolist() == [False, True] + [False] * 6
    assert (records["surprise"] == "x").all()


def sound_csv(path, rows: int = 30) -> None:
    """requests.csv as csv.writer writes it, with what it quotes: commas, quotes and line breaks in cells."""
    import csv
    details = ['said "no", twice\nthen, again\r\nand stopped', "a, b", "", 'q"uote']
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*COLUMNS, "surprise"])
        for i in range(rows):
            record = Record(**{**DEFAULTS, "scenario": "chat", "phase": "chat", "round": i + 1, "ttft_s": i / 10,
                               "error_detail": details[i % len(details)], "ok": i % 3 > 0})
            writer.writerow([*("" if v is None else str(v) for v in record.to_dict().values()), f"x{i}"])


def test_a_sound_csv_is_read_by_pandas_as_the_csv_module_reads_it(tmp_path, monkeypatch):
    sound_csv(tmp_path / "requests.csv")
    monkeypatch.setattr(load, "CHUNK_ROWS", 7)
    by_pandas, by_module = load._Reading(), load._Reading()
    load._read_sound_csv(tmp_path / "requests.csv", by_pandas)  # sound: no _Damaged
    load._read_csv(tmp_path / "requests.csv", by_module)
    (records, problems), (expected, expected_problems) = by_pandas.result(), by_module.result()
    pd.testing.assert_frame_equal(records, expected)
    assert problems == expected_problems == ["unknown column 'surprise': kept, not analysed"]
    details = ['said "no", twice\nthen, again\r\nand stopped', "a, b", "", 'q"uote']
    assert records["error_detail"].tolist()[:4] == details
    assert records["ttft_s"].iloc[3] == 0.3 and records["ok"].tolist()[:3] == [False, True, True]


def test_a_quote_inside_a_cell_is_text_as_the_csv_module_reads_it(tmp_path):
    sound_csv(tmp_path / "requests.csv", rows=3)
    text = (tmp_path / "requests.csv").read_text()
    (tmp_path / "requests.csv").write_text(text.replace(",sim,", ',si"m,', 1))
    records, info = load.load_run(tmp_path)
    assert records["engine"].tolist() == ['si"m', "sim", "sim"] and info["bad_lines"] == 0


@pytest.mark.parametrize("damage, problem", [
    (lambda line: line.rsplit(",", 2)[0], "line {line}: {short} cells where the header has {width}; row skipped"),
    (lambda line: line.rsplit(",", 1)[0], "line {line}: {shorter} cells where the header has {width}; row skipped"),
    (lambda line: line.replace(",0.2,", ",fast,", 1), "column ttft_s: 1 value(s) not of type float | None "
                                                      "(requests.csv line {line}), read as missing"),
    (lambda line: line + ",extra", "line {line}: {long} cells where the header has {width}; row skipped")])
def test_one_damaged_row_of_an_otherwise_sound_csv_is_named_by_its_line(tmp_path, damage, problem):
    # A row cut short by one empty cell or two is seen too: by its commas, as the C parser pads it silently.
    sound_csv(tmp_path / "requests.csv", rows=6)
    with open(tmp_path / "requests.csv", newline="", encoding="utf-8") as f:
        lines = f.read().split("\r\n")
    third = next(i for i, line in enumerate(lines) if line.startswith("chat,chat,3,"))
    lines[third] = damage(lines[third])
    (tmp_path / "requests.csv").write_text("\r\n".join(lines), encoding="utf-8", newline="")
    with pytest.raises(load._Damaged):
        load._read_sound_csv(tmp_path / "requests.csv", load._Reading())
    records, info = load.load_run(tmp_path)
    width = len(COLUMNS) + 1
    said = problem.format(line="\r\n".join(lines[:third]).count("\n") + 2, short=width - 2, shorter=width - 1, long=width + 1, width=width)
    assert any(p.endswith(said) for p in info["problems"]), info["problems"]
    assert len(records) == (6 if "column" in said else 5) and records["error_detail"].iloc[0].startswith("said")


def test_json_values_of_the_wrong_type_are_read_as_missing_and_said(tmp_path):
    good = Record(scenario="chat", phase="chat", round=1, ok=True, ttft_s=0.5, needle_found=None).to_dict()
    odd = [{"ttft_s": "abc"}, {"ttft_s": True}, {"round": 2.5}, {"ok": "yes"}, {"needle_found": 1},
           {"ttft_s": "0.75", "round": "3"}, {"decode_tps": None, "surprise": [1, 2]}]
    lines = [json.dumps(good)] + [json.dumps({**good, **change}) for change in odd] + ["not json", "[1, 2]"]
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n")
    records, info = load.load_run(tmp_path)
    assert info["bad_lines"] == 2 and info["problems"] == [
        "records.jsonl line 9: not a JSON object (cut by a kill?); skipped",
        "records.jsonl line 10: not a JSON object (cut by a kill?); skipped",
        "unknown column 'surprise': kept, not analysed",
        "column round: 1 value(s) not of type int | None (records.jsonl line 4), read as missing",
        "column ttft_s: 2 value(s) not of type float | None (records.jsonl line 2, records.jsonl line 3), "
        "read as missing"]
    assert records["ttft_s"].tolist()[:3] == [0.5, pd.NA, pd.NA] and records["ttft_s"].iloc[6] == 0.75
    assert records["round"].isna().tolist() == [False, False, False, True, False, False, False, False]
    assert records["round"].iloc[6] == 3 and records["ok"].all() and records["needle_found"].iloc[5]
    assert records["decode_tps"].isna().all()  # null, and a field never sent: missing, never 0
    assert records["surprise"].tolist() == [""] * 7 + ["[1, 2]"]


# -- charts at real size ----------------------------------------------------------------------------

def many_requests(count: int, seed: int = 1) -> pd.DataFrame:
    """``count`` typed records over four phases and two setups, itl_s drawn at random; some without
    itl_s (one event: missing, never 0), some failed, some warm-ups."""
    rng = np.random.default_rng(seed)
    base = frame({"scenario": "chat", "phase": "chat", "round": 1, "itl_s": 0.01})
    records = base.loc[np.zeros(count, dtype=int)].reset_index(drop=True)
    phases = np.array(["chat", "prompt-4k", "burst-4", "warmup-chat"])[rng.integers(0, 4, count)]
    itl = pd.array(rng.lognormal(-4.5, 0.5, count), dtype="Float64")
    itl[rng.random(count) < 0.05] = pd.NA
    return records.assign(phase=phases, scenario=np.where(phases == "warmup-chat", "warmup", "chat"),
                          setup=np.where(rng.random(count) < 0.5, "one", "two"), itl_s=itl,
                          ok=pd.array(rng.random(count) > 0.02, dtype="boolean"))


def test_the_token_latency_chart_of_100k_requests_holds_a_box_per_phase_and_setup():
    from analysis import charts

    records = many_requests(100_000)
    spec = charts.spec(charts.token_latency_chart(records, {"one": "A", "two": "B"}))
    data = [rows for rows in spec["datasets"].values()]
    assert len(data) == 1 and len(data[0]) == 3 * 2  # three measured phases, two setups: six boxes
    assert len(json.dumps(spec)) < 20_000


def test_latency_boxes_are_pandas_quantiles_of_the_requests_that_have_itl():
    from analysis import charts

    records = many_requests(5_000, seed=2)
    boxes = charts.latency_boxes(records, {"one": "A", "two": "B"}).set_index(["phase", "setup"])
    counted = records[(records["scenario"] != "warmup") & ok_mask(records)]
    for (phase, setup), mine in counted.groupby(["phase", "setup"]):
        values = mine["itl_s"].dropna().astype(float) * 1000
        box = boxes.loc[(phase, setup)]
        assert box["n"] == len(values) < len(mine)  # requests without itl_s are left out, not read as 0
        assert box["q1"] == pytest.approx(values.quantile(0.25)) and box["q3"] == pytest.approx(values.quantile(0.75))
        assert box["median"] == pytest.approx(values.median())
        assert (box["min"], box["max"]) == pytest.approx((values.min(), values.max()))
        assert box["key"] == {"one": "A", "two": "B"}[setup]


def test_a_phase_without_any_itl_has_no_box_rather_than_a_box_at_zero():
    from analysis import charts

    records = frame({"phase": "chat", "itl_s": 0.02}, {"phase": "chat", "itl_s": 0.04},
                    {"phase": "burst-4", "itl_s": None}, {"phase": "burst-4", "itl_s": None},
                    {"phase": "prompt-4k", "itl_s": 0.5, "ok": False, "error": "timeout"},
                    scenario="chat", round=1, setup="s")
    boxes = charts.latency_boxes(records, {"s": "A"})
    assert boxes["phase"].tolist() == ["chat"] and boxes["n"].tolist() == [2]
    assert boxes[["min", "median", "max"]].iloc[0].tolist() == pytest.approx([20.0, 30.0, 40.0])
    assert charts.latency_boxes(records[records["phase"] == "burst-4"], {"s": "A"}).empty
    assert charts.token_latency_chart(records[records["phase"] != "chat"], {"s": "A"}) is None


# -- a lost worker --------------------------------------------------------------------------------

def test_a_lost_worker_is_named_with_what_it_lost_and_who_carried_on():
    from analysis import lost_workers

    records = frame(
        {"client_host": "laptop-1", "client_pid": 11, "round": 1, "t_start": 100.0},
        {"client_host": "laptop-2", "client_pid": 22, "round": 2, "t_start": 101.0},
        {"client_host": "laptop-2", "client_pid": 22, "round": 3, "t_start": 130.0},  # after the loss
        {"client_host": "laptop-3", "client_pid": 33, "round": 4, "t_start": 131.0},
        {"client_host": "laptop-3", "client_pid": 33, "round": 5, "t_start": 132.0},
        {"client_host": "laptop-2", "client_pid": 22, "phase": "burst-4", "scenario": "burst", "t_start": 140.0},
        scenario="chat", phase="chat")
    lost = pd.DataFrame([
        {"worker": "w1", "client_host": "laptop-1", "client_pid": 11, "lost_at": 120.0, "phase": "chat",
         "in_flight_jobs": 1, "in_flight": [{"phase": "chat", "round": 2, "index": 4}], "records_finished": 3,
         "records_received": 1},
        {"worker": "w9", "client_host": None, "client_pid": None, "lost_at": 125.0, "phase": "chat",
         "in_flight_jobs": 0, "in_flight": [], "records_finished": 0, "records_received": 0},
        {"worker": "w4", "client_host": "laptop-4", "client_pid": 44, "lost_at": 150.0, "phase": "",
         "in_flight_jobs": 1, "in_flight": ["burst-4 round 3 #1"], "records_finished": None,
         "records_received": None}])  # an older file: jobs as text, no counts
    table = lost_workers.losses(records, lost)
    assert table["carried_by"].iloc[0] == {"laptop-2": 1, "laptop-3": 2}
    said = lost_workers.sentences(table)
    assert said[0] == (
        "**laptop-1** was lost at 1970-01-01T00:02:00Z, during chat; 1 of the 3 measured records its finished jobs "
        "made reached the master (2 may be missing from the records; its own worker-*.jsonl holds them if its disk "
        "survived); 1 of its jobs in flight was closed and never recorded: chat round 2; laptop-2 (1 record sent "
        "after the loss) and laptop-3 (2 records sent after the loss) carried the rest of chat.")
    assert said[1].startswith("worker w9 (no record of it reached the master: its machine is unknown) was lost")
    assert "; it had nothing in flight;" in said[1]
    assert said[2] == ("**laptop-4** was lost at 1970-01-01T00:02:30Z, after the last phase; how many of its records "
                       "arrived is not known; 1 of its jobs in flight was closed and never recorded: "
                       "burst-4 round 3 #1.")


def test_processes_of_one_machine_are_told_apart_by_pid():
    from analysis import lost_workers

    records = frame({"client_pid": 1, "t_start": 10.0}, {"client_pid": 2, "t_start": 30.0},
                    scenario="chat", phase="chat", round=1, client_host="vm")
    lost = pd.DataFrame([{"worker": "w", "client_host": "vm", "client_pid": 1, "lost_at": 20.0, "phase": "chat",
                          "in_flight_jobs": 0, "in_flight": [], "records_finished": 1, "records_received": 1}])
    said = lost_workers.sentences(lost_workers.losses(records, lost))[0]
    assert said.startswith("**vm (pid 1)** was lost") and "vm (pid 2) (1 record sent after the loss)" in said
    assert "reached the master;" in said  # nothing missing: no "may be missing"


def test_every_figure_of_the_study_that_estimates_something_carries_its_interval():
    from analysis import headline
    from tests.test_report import synthetic_rows

    records = frame(*({k: v for k, v in r.items() if k in COLUMNS} for r in synthetic_rows("s", 1.0, runs=3,
                                                                                          jitter=0.2)))
    long = study.study(records).assign(setup="s")
    lines = headline.headline(long, ["s"])
    assert len(lines) == 11 and lines["ci_level"].notna().all()  # every headline figure
    assert (lines.loc[lines["metric"] != "found", "ci_level"].round(4) == 0.75).all()  # 3 runs: min–max, 75%
    assert (lines.loc[lines["second"] != "", "second_ci_level"].round(4) == 0.75).all()
    chat = figure(long, "chat", "chat", "decode_tps")
    assert (chat["ci_low"], chat["ci_high"], chat["ci_method"]) == (chat["min"], chat["max"], "order statistics")
    # A round's p95 first token: the p95 of its 12 requests, by order statistics (the 10th to the 12th, 44%).
    round_p95 = figure(long, "burst_rounds", "burst-12 round 1", "ttft_p95_s")
    assert (round_p95["ci_low"], round_p95["ci_high"]) == pytest.approx((1.0, 1.2))
    assert round_p95["ci_level"] == pytest.approx(1 - 0.95 ** 12 - 0.0196, abs=1e-3)
    valid = figure(long, "agent_turns", "turn 3", "tool_call_valid_share")
    assert valid["median"] == 0.0 and valid["ci_method"] == "Clopper-Pearson" and valid["ci_high"] > 0.5
    for count in (figure(long, "requests", "chat", "requests"), figure(long, "burst_rounds", "burst-4 round 1",
                                                                         "total_tps")):
        assert math.isnan(count["ci_level"]) and count["ci_method"] == ""  # a count, one measurement: none
