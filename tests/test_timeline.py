"""The timeline: periods, lanes and the engine's readings on the records' clock; and the report that holds it."""

import json

import pandas as pd
import pytest

from analysis import load, stalls, timeline
from analysis.report import write_report
from bench_tasks import metrics
from bench_tasks.record import COLUMNS, Record
from bench_tasks.records_file import write_csv


def rows_of(*rows: dict) -> pd.DataFrame:
    return load.typed(pd.DataFrame(rows, columns=list(COLUMNS)))


def request(phase, user, t_send, ttft_s, e2e_s, scenario="paste", **more) -> dict:
    return {"scenario": scenario, "phase": phase, "user": user, "client_host": "laptop", "client_pid": 7, "ok": True,
            "setup": "s", "t_send": t_send, "t_start": 1.7e9 + t_send, "ttft_s": ttft_s, "e2e_s": e2e_s,
            "request_id": f"{phase}-{user}-{t_send}", **more}


def test_concurrent_phases_are_one_period_sequential_ones_apart_and_warm_ups_join_their_period():
    frame = rows_of(request("warmup-paste", "a", 0.0, 0.01, 0.05, scenario="warmup"),
                    request("paste-chat", "a", 0.1, 0.1, 5.0), request("paste-4k", "p", 0.5, 2.0, 2.5),
                    request("burst-4", "b", 10.0, 0.1, 1.0, scenario="burst", round=1),
                    request("burst-4", "b", 12.0, 0.1, 1.0, scenario="burst", round=2),
                    request("settle-4", "s", 20.0, 0.1, 5.0, scenario="classroom", students=4),
                    request("class-4", "s", 26.0, 0.1, 5.0, scenario="classroom", students=4),
                    request("class-8", "s", 30.5, 0.1, 5.0, scenario="classroom", students=8))
    requests, clock, origin = timeline.requests_on_clock(frame)
    assert clock == stalls.PERF_CLOCK and origin == 0.0
    assert timeline.periods(requests).tolist() == [
        "paste-chat + paste-4k", "paste-chat + paste-4k", "paste-chat + paste-4k", "burst-4 round 1",
        "burst-4 round 2", "class-4", "class-4", "class-8"]  # a capacity step: its settling and its window
    chart = timeline.timeline_chart(frame, stalls.stalls(frame), pd.DataFrame(columns=load.SERIES_COLUMNS))
    subtitles = [panel["vconcat"][0]["title"]["subtitle"] for panel in chart.to_dict()["vconcat"]]
    assert "2 users; 2 requests and 1 warm-up" in subtitles  # as the run counts them: warm-ups apart


def test_the_engines_readings_are_placed_on_the_records_clock():
    frame = rows_of(request("paste-chat", "a", 100.0, 0.1, 5.0), request("paste-4k", "p", 101.0, 2.0, 2.5))
    series = pd.DataFrame({"t": [100.5, 101.5], "t_wall": [1.7e9 + 100.5, 1.7e9 + 101.5], "runner": ["local"] * 2,
                           "requests_running": [1.0, 2.0], "requests_waiting": [0.0, 1.0],
                           "kv_cache_usage": [0.1, float("nan")]})
    long = timeline.engine_on_clock(series, frame, stalls.PERF_CLOCK, 100.0)
    assert long[long["series"] == "running"]["t_s"].tolist() == [0.5, 1.5]
    assert long[long["series"] == "KV cache %"]["value"].tolist() == [pytest.approx(10.0)]  # a missing reading stays out
    # Read by another process (the master) than the one whose clock the records are on: by wall time.
    moved = series.assign(runner="master", t=[5.0, 6.0])
    assert timeline.engine_on_clock(moved, frame, stalls.PERF_CLOCK, 100.0)["t_s"].tolist()[:2] == \
        pytest.approx([0.5, 1.5])


def test_the_engines_legend_lists_only_the_series_it_gave_each_in_its_own_colour():
    frame = rows_of(request("paste-chat", "a", 100.0, 0.1, 5.0), request("paste-4k", "p", 101.0, 2.0, 2.5))
    series = pd.DataFrame({"t": [100.5, 101.5], "t_wall": [1.7e9 + 100.5, 1.7e9 + 101.5], "runner": ["local"] * 2,
                           "requests_running": [1.0, 2.0], "requests_waiting": [0.0, 1.0],
                           "kv_cache_usage": [float("nan")] * 2})  # llama.cpp: no KV cache gauge
    chart = timeline.timeline_chart(frame, stalls.stalls(frame), series).to_dict()
    engine = chart["vconcat"][0]["vconcat"][1]
    scale = engine["encoding"]["color"]["scale"]
    assert scale == {"domain": ["running", "waiting"], "range": timeline.SERIES_COLORS[:2]}


def test_lanes_are_sampled_evenly_beyond_the_limit_and_the_title_says_so():
    frame = rows_of(*[request("class-40", f"u{i:02d}", float(i), 0.1, 1.0, scenario="classroom", students=40)
                      for i in range(45)])
    chart = timeline.timeline_chart(frame, stalls.stalls(frame), pd.DataFrame(columns=load.SERIES_COLUMNS))
    panel = chart.to_dict()["vconcat"][0]["vconcat"][0]
    assert panel["title"]["subtitle"] == "23 of 45 users shown (one in 2, in laptop order); 23 requests"
    assert panel["layer"][0]["encoding"]["y"]["sort"] == [f"laptop · u{i:02d} (7)" for i in range(0, 45, 2)]


def test_gauges_are_read_from_their_own_lines_only():
    text = "\n".join(["# HELP vllm:num_requests_running x", 'vllm:num_requests_running{model_name="m",engine="0"} 3.0',
                      'vllm:num_requests_running{model_name="m",engine="1"} 1.0',
                      'vllm:num_requests_running_total{model_name="m"} 99', "vllm:kv_cache_usage_perc 0.25",
                      "vllm:num_requests_waiting nonsense"])
    names = {"requests_running": "vllm:num_requests_running", "requests_waiting": "vllm:num_requests_waiting",
             "kv_cache_usage": "vllm:kv_cache_usage_perc"}
    assert metrics.gauges(text, names) == {"requests_running": 4.0, "kv_cache_usage": 0.25}


def test_a_paste_runs_report_has_its_stalls_their_causes_and_the_timeline(tmp_path):
    def add(**fields):
        return Record(**{"setup": "s", "engine": "sim", "client_host": "laptop", "client_pid": 7, "ok": True,
                         "done": True, "t_start": 1.7e9, "scenario": "paste", **fields}).to_dict()

    rows = [add(phase="paste-chat", user="chat-1", round=1, request_id="c1", t_send=10.0, ttft_s=0.1, e2e_s=6.0,
                decode_s=5.9, prompt_tokens=20, completion_tokens=200, decode_tps=33.0, stall_count=2, stall_s=2.5,
                stall_threshold_s=0.1, stalls="1.0000:1.5000;3.0000:1.0000"),
            add(phase="paste-4k", user="paster", round=1, request_id="p1", t_send=10.9, ttft_s=3.2, e2e_s=3.5,
                decode_s=0.3, prompt_tokens=4096, completion_tokens=32, stall_count=0, stall_s=0.0,
                stall_threshold_s=0.1, stalls="")]
    write_csv(rows, tmp_path / "requests.csv")
    (tmp_path / "engine_series.jsonl").write_text("".join(
        json.dumps({"t": 10.0 + i, "t_wall": 1.7e9 + i, "runner": "local", "requests_running": 2.0,
                    "requests_waiting": 0.0}) + "\n" for i in range(7)))
    names = {p.name for p in write_report(tmp_path)}
    assert {"stalls.csv", "timeline.png"} <= names
    found = pd.read_csv(tmp_path / "stalls.csv", keep_default_na=False)
    assert found["cause_request_id"].tolist() == ["p1", "p1"] and found["stall_s"].tolist() == [1.5, 1.0]
    assert found["stall_at_s"].tolist() == [1.0, 3.0] and set(found["clock"]) == {"perf_counter"}
    summary = (tmp_path / "summary.md").read_text()
    assert "## Stalls: why did an answer pause?" in summary and "paste-4k (paster, laptop)" in summary
    assert "![timeline.png](timeline.png)" in summary
    html = (tmp_path / "report.html").read_text()
    assert 'data-name="timeline.png"' in html and "paste-4k (paster, laptop)" in html
