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
    long = study.burst_table(burst_records())
    a, b = 300 / 4.02, 200 / 1.7
    check(long, "burst", "burst-4", "total_tps", (a + b) / 2, a, b, 2)
    check(long, "burst", "burst-4", "ttft_p95_s", 0.43, 0.38, 0.48, 2)
    check(long, "burst", "burst-4", "start_spread_s", 0.05, 0.05, 0.05, 1)
    check(long, "burst", "burst-4", "per_user_decode_tps", 40.0, 40.0, 40.0, 2)
    rounds = study.burst_rounds_table(burst_records())
    check(rounds, "burst_rounds", "burst-4 round 1", "total_tps", a, NAN, NAN, 3)


def test_a_burst_round_that_all_failed_has_no_throughput():
    records = frame({"round": 1, "ok": False, "error": "timeout", "release_offset_s": 0.0, "e2e_s": 300.0},
                    scenario="burst", phase="burst-1", concurrency=1)
    check(study.burst_table(records), "burst", "burst-1", "total_tps", NAN, NAN, NAN, 0)


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
    assert any(n.startswith("prompt-4k: 1 of 2 fresh prompts were served from the cache") for n in notes)


def test_study_has_the_long_columns_and_overview_still_works():
    records = burst_records()
    long = study.study(records)
    assert list(long.columns) == LONG_COLUMNS
    table = overview.overview(records)
    assert list(table["phase"]) == ["burst-4"] and table.loc[0, "errors"] == 1


def test_overview_burst_total_is_the_reports_median_over_rounds_not_over_the_phase_with_its_pauses():
    table = overview.overview(burst_records()).set_index("phase")
    assert table.loc["burst-4", "total_tps"] == pytest.approx((300 / 4.02 + 200 / 1.7) / 2)
    long = study.burst_table(burst_records())
    assert table.loc["burst-4", "total_tps"] == pytest.approx(figure(long, "burst", "burst-4", "total_tps")["median"])


def test_overview_total_tps_without_any_token_count_is_missing_not_zero():
    records = frame({"t_send": 1.0, "e2e_s": 2.0, "ttft_s": 0.5}, {"t_send": 1.5, "e2e_s": 2.0, "ttft_s": 0.6},
                    scenario="chat", phase="chat", round=1)
    table = overview.overview(records)
    assert table.loc[0, "total_tps"] is None and table.loc[0, "ttft_median_s"] == pytest.approx(0.55)


def test_a_phase_with_lumped_streams_is_warned_about():
    records = frame({"flags": "bunched"}, {"flags": ""}, scenario="chat", phase="chat", round=1)
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
    check(study.burst_table(records), "burst", "burst-4", "total_tps", 400 / 4.0, 400 / 4.0, 400 / 4.0, 1)


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
