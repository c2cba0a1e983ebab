"""The report and the comparison written for synthetic run directories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.cells import header_name
from analysis.report import write_compare, write_report
from analysis.spread import LONG_COLUMNS
from bench_tasks.record import Record
from bench_tasks.records_file import write_csv

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"]


def synthetic_rows(setup: str, speed: float, runs: int = 2) -> list[dict]:
    """A small quick suite: every scenario, a failed and a saturated request; ``speed`` scales every rate."""
    rows = []

    def add(**fields):
        base = {"setup": setup, "engine": "sim", "model": "tiny", "client_host": "c1", "ok": True, "done": True,
                "usage_source": "usage", "t_start": 1.7e9}
        rows.append(Record(**{**base, **fields}).to_dict())

    add(scenario="warmup", phase="warmup-chat", ttft_s=0.05, e2e_s=0.1, completion_tokens=8, t_send=9.0)
    for rnd in range(1, runs + 1):
        for q in range(3):
            decode_s = 49 / (40 * speed)
            add(scenario="chat", phase="chat", round=rnd, ttft_s=0.1 / speed + 0.01 * q, decode_s=decode_s,
                e2e_s=0.1 + decode_s, prompt_tokens=30, completion_tokens=50, first_event_tokens=1,
                decode_tps=49 / decode_s, itl_s=decode_s / 49, t_send=10.0 + rnd + q * 0.1,
                engine_predicted_n=50, engine_predicted_ms=decode_s * 1020, engine_prompt_ms=80 / speed)
        for size, label in ((4096, "4k"), (16384, "16k")):
            ttft = size / (2000 * speed)
            add(scenario="prompt", phase=f"prompt-{label}", round=rnd, prompt_size=size, prompt_tokens=size,
                ttft_s=ttft, prompt_tps=size / ttft, e2e_s=ttft + 0.2, completion_tokens=8, itl_s=0.025)
        for turn in range(1, 7):
            add(scenario="agent", phase="agent", round=rnd, turn=turn, ttft_s=0.2 * turn / speed,
                decode_tps=35 * speed, prompt_tokens=1000 * turn, cached_tokens=900 * (turn - 1),
                tool_name="read_file", tool_call_valid=turn != 3, e2e_s=1.0, completion_tokens=30, itl_s=0.03)
        for n in (1, 4, 12):
            for i in range(n):
                add(scenario="burst", phase=f"burst-{n}", concurrency=n, round=rnd, ttft_s=0.1 * (i + 1),
                    e2e_s=128 / (30 * speed) * (1 + 0.05 * i), release_offset_s=0.001 * i,
                    completion_tokens=128, decode_tps=30 * speed, itl_s=1 / (30 * speed),
                    flags="client_saturated" if n == 12 and i == 0 else "")
    for depth in (0.1, 0.5, 0.9):
        add(scenario="needle", phase="needle-32k", round=1, prompt_size=32768, needle_depth=depth,
            needle_found=depth != 0.5, e2e_s=3.0 / speed, ttft_s=2.5 / speed)
    add(scenario="chat", phase="chat", round=1, ok=False, error="http_500", http_status=500)
    return rows


def synthetic_run(directory: Path, setup: str, speed: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_csv(synthetic_rows(setup, speed), directory / "requests.csv")
    readings = [{"phase": "chat", "when": "before", "t": 10.5,
                 "metrics": {"vllm:time_to_first_token_seconds_sum": 1.0, "vllm:time_to_first_token_seconds_count": 2,
                             "vllm:prompt_tokens_total": 100, "vllm:generation_tokens_total": 1000}},
                {"phase": "chat", "when": "after", "t": 13.0,
                 "metrics": {"vllm:time_to_first_token_seconds_sum": 1.7, "vllm:time_to_first_token_seconds_count": 8,
                             "vllm:prompt_tokens_total": 280, "vllm:generation_tokens_total": 1300}}]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in readings))
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    slow = synthetic_run(base / "slow", "", 1.0)  # no --setup: labelled on the command line
    fast = synthetic_run(base / "fast", "fast-engine", 2.0)
    return {"slow": slow, "fast": fast, "report": write_report(slow),
            "compare": write_compare([slow, fast], ["slow-engine", "ignored"], base / "compare"),
            "compare_dir": base / "compare"}


def tables_in(markdown: str) -> list[list[str]]:
    """Header cells of every Markdown table."""
    lines = markdown.splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line, below in zip(lines, lines[1:])
            if line.startswith("| ") and below.startswith("| ---")]


def test_report_files_exist(runs):
    names = {p.name for p in runs["report"]}
    assert names == {"summary.md", "summary.csv", "report.html", "total_tps.png", "ttft_by_prompt.png",
                     "token_latency.png", "engine_clock.csv"}
    assert all(p.exists() and p.stat().st_size > 0 and p.parent == runs["slow"] for p in runs["report"])
    assert (runs["slow"] / "total_tps.png").read_bytes()[:4] == b"\x89PNG"


def test_summary_markdown_has_the_header_warnings_and_tables(runs):
    text = (runs["slow"] / "summary.md").read_text()
    assert "- setup: slow" in text and "- model: tiny" in text and "- engine: sim" in text
    assert "- requests: 59 ok, 1 failed" in text
    assert "burst-12: 2 of 24 requests ran while the client was saturated" in text
    assert "Incomplete run" not in text
    headers = {tuple(h) for h in tables_in(text)}
    assert ("row", "decode_tps", "ttft_s", "n") in headers
    assert ("row", "total_tps", "ttft_p95_s", "start_spread_s", "per_user_decode_tps", "n") in headers
    assert "| chat | 40.0 (40.0–40.0) | 0.110 (0.110–0.110) | 2 |" in text
    assert "| chat | 1 | 7 |" in text  # errors: one http_500 of 7 chat requests


def test_summary_csv_is_long_form(runs):
    long = pd.read_csv(runs["slow"] / "summary.csv", keep_default_na=False)
    assert list(long.columns) == LONG_COLUMNS
    assert set(long["setup"]) == {"slow"}
    assert {"requests", "chat", "prompt", "agent", "agent_turns", "burst", "burst_rounds", "needle", "errors",
            "engine_clock", "engine_metrics"} <= set(long["table"])
    found = long[(long["table"] == "needle") & (long["row"] == "needle-32k all depths") & (long["metric"] == "found")]
    assert found[["median", "min", "max", "n"]].values.tolist() == [[2.0, "", "", 3]]  # a count: min, max empty


def test_html_is_self_contained(runs):
    html = (runs["slow"] / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "<table" in html and 'src="total_tps.png"' not in html


def test_compare_shows_the_faster_setup_ahead(runs):
    assert {p.name for p in runs["compare"]} == {"compare.md", "compare.csv", "compare.png", "compare.html"}
    long = pd.read_csv(runs["compare_dir"] / "compare.csv")
    assert list(long.columns) == LONG_COLUMNS
    total = long[(long["table"] == "burst") & (long["metric"] == "total_tps")].pivot(
        index="row", columns="setup", values="median")
    assert list(total.index.sort_values()) == ["burst-1", "burst-12", "burst-4"]
    assert (total["fast-engine"] > total["slow-engine"]).all()
    text = (runs["compare_dir"] / "compare.md").read_text()
    assert "| row | slow-engine: total_tps |" in text and "fast-engine: total_tps" in text


def test_every_output_column_is_documented(runs):
    docs = "\n".join(p.read_text() for p in DOCS if p.exists())
    names = set(LONG_COLUMNS)
    for path in (runs["slow"] / "summary.md", runs["compare_dir"] / "compare.md"):
        names |= {header_name(h) for table in tables_in(path.read_text()) for h in table}
    for path in (runs["slow"] / "summary.csv", runs["compare_dir"] / "compare.csv"):
        names |= set(pd.read_csv(path)["metric"])
    names |= set(pd.read_csv(runs["slow"] / "engine_clock.csv").columns)
    assert sorted(n for n in names if f"`{documented_as(n)}`" not in docs) == []


def documented_as(name: str) -> str:
    """HTTP error classes are documented once, as http_<status>."""
    return re.sub(r"^http_\d+$", "http_<status>", name)


def test_a_killed_run_is_reported_as_incomplete(tmp_path):
    finished = Record(scenario="chat", phase="chat", round=1, ok=True, ttft_s=0.2, decode_tps=30.0, setup="s")
    (tmp_path / "records.jsonl").write_text(json.dumps(finished.to_dict()) + "\n{\"scenario\": \"ch")
    written = {p.name for p in write_report(tmp_path)}
    assert {"summary.md", "summary.csv", "report.html"} <= written and "total_tps.png" not in written
    text = (tmp_path / "summary.md").read_text()
    assert "**Incomplete run**" in text and "records.jsonl line 2: not a JSON object" in text
