"""The report and the comparison written for synthetic run directories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis import document
from analysis.report import write_compare, write_report
from analysis.spread import LONG_COLUMNS
from bench_tasks.record import Record
from bench_tasks.records_file import write_csv
from tests.documents import blocks_of, labelled, lists, section, tables

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def synthetic_rows(setup: str, speed: float, runs: int = 2, jitter: float = 0.0) -> list[dict]:
    """A small quick suite: every scenario, a failed and a saturated request; ``speed`` scales every rate,
    run r of ``runs`` at ``speed * (1 - jitter)`` to ``speed * (1 + jitter)``."""
    rows = []
    base_speed = speed

    def add(**fields):
        base = {"setup": setup, "engine": "sim", "model": "tiny", "client_host": "c1", "ok": True, "done": True,
                "usage_source": "usage", "t_start": 1.7e9}
        rows.append(Record(**{**base, **fields}).to_dict())

    add(scenario="warmup", phase="warmup-chat", ttft_s=0.05, e2e_s=0.1, completion_tokens=8, t_send=9.0)
    for rnd in range(1, runs + 1):
        speed = base_speed * (1 + jitter * (2 * (rnd - 1) / max(runs - 1, 1) - 1))
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
            needle_found=depth != 0.5, e2e_s=3.0 / base_speed, ttft_s=2.5 / base_speed)
    add(scenario="chat", phase="chat", round=1, ok=False, error="http_500", http_status=500)
    return rows


# The pooled decode histograms and the speculation counters: with them the engine_metrics table has
# every column a real engine gives it (its widest table).
DECODE_AND_SPEC_BEFORE = {"vllm:request_generation_tokens_sum": 1000, "vllm:request_generation_tokens_count": 2,
                          "vllm:request_decode_time_seconds_sum": 20.0,
                          "vllm:spec_decode_num_draft_tokens_total": 30, "vllm:spec_decode_num_accepted_tokens_total": 20}
DECODE_AND_SPEC_AFTER = {"vllm:request_generation_tokens_sum": 1300, "vllm:request_generation_tokens_count": 8,
                         "vllm:request_decode_time_seconds_sum": 26.0,
                         "vllm:spec_decode_num_draft_tokens_total": 90, "vllm:spec_decode_num_accepted_tokens_total": 50}


def synthetic_run(directory: Path, setup: str, speed: float, jitter: float = 0.0, runs: int = 2) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_csv(synthetic_rows(setup, speed, runs=runs, jitter=jitter), directory / "requests.csv")
    readings = [{"phase": "chat", "when": "before", "t": 10.5,
                 "metrics": {"vllm:time_to_first_token_seconds_sum": 1.0, "vllm:time_to_first_token_seconds_count": 2,
                             "vllm:prompt_tokens_total": 100, "vllm:generation_tokens_total": 1000, **DECODE_AND_SPEC_BEFORE}},
                {"phase": "chat", "when": "after", "t": 13.0,
                 "metrics": {"vllm:time_to_first_token_seconds_sum": 1.7, "vllm:time_to_first_token_seconds_count": 8,
                             "vllm:prompt_tokens_total": 280, "vllm:generation_tokens_total": 1300, **DECODE_AND_SPEC_AFTER}}]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in readings))
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    slow = synthetic_run(base / "slow", "", 1.0)  # no --setup: labelled on the command line
    fast = synthetic_run(base / "fast", "fast-engine", 2.0)
    close = synthetic_run(base / "close", "", 1.0, jitter=0.3)  # as slow, give or take 30% per run
    return {"slow": slow, "fast": fast, "report": write_report(slow),
            "compare": write_compare([slow, fast, close], ["slow-engine", "ignored", "close-engine"],
                                     base / "compare"),
            "compare_dir": base / "compare"}


def tables_in(markdown: str) -> list[list[str]]:
    """Header cells of every Markdown table."""
    return [table[0] for table in markdown_tables(markdown)]


def markdown_tables(markdown: str) -> list[list[list[str]]]:
    """Every table of a report's Markdown as its lines of cells, the header first."""
    return [[list(cells.columns), *cells.values.tolist()] for cells in tables(blocks_of(markdown))]


def the_result_in_words(markdown: str) -> tuple[str, ...]:
    """The sentences of a comparison's "The result, in words": its list, read by the document's structure."""
    found, = lists(section(blocks_of(markdown), "The result, in words"))
    return found


def test_a_report_reads_back_by_its_structure_whatever_its_lists_say():
    cells = pd.DataFrame({"row": ["a|b", ""], "x": ["1", "–"]})
    blocks = [document.Heading("llm-bench compare: A vs B", 1), document.Items(("**A**: one", "**B**: two")),
              document.Heading("The result, in words"), document.Paragraph(document.WINNERS_NOTE),
              document.Items(("fastest chat decode for one user: can't tell at n = 3; run with --runs 5",)),
              document.Labelled("Lost workers", ("**w1** was lost",), "the run went on without them"),
              document.Labelled("Warnings", ("5 of 15 streams arrived in lumps (bunched): the client read late",)),
              document.Heading("Details"), document.Heading("A: one", 3), document.Table(cells),
              document.Chart("compare.png", {}, b"")]
    back = blocks_of(document.markdown(blocks))
    assert [type(block) for block in back] == [type(block) for block in blocks]
    assert [b for b in back if not isinstance(b, (document.Table, document.Chart))] == [
        b for b in blocks if not isinstance(b, (document.Table, document.Chart))]
    assert back[9].cells.equals(cells) and back[10].name == "compare.png"
    # The warnings sit in the section's text, after its list: they are not the result in words.
    assert the_result_in_words(document.markdown(blocks)) == blocks[4].items
    assert labelled(back, "Warnings").items == blocks[6].items


STUDY_ROWS = [
    ["chat decode tok/s", "chat first token s", "4K prompt tok/s (first token s)", "16K prompt tok/s (first token s)",
     "agent turn first token s", "agent turn decode tok/s"],
    ["1 at once: total tok/s (slowest first token s)", "4 at once: total tok/s (slowest first token s)",
     "12 at once: total tok/s (slowest first token s)"],
    ["32K needle: found / total", "32K needle: answer time s"]]


def test_report_files_exist(runs):
    names = {p.name for p in runs["report"]}
    assert names == {"summary.md", "summary.csv", "report.html", "total_tps.png", "ttft_by_prompt.png",
                     "token_latency.png", "timeline.png", "engine_clock.csv"}  # no stall figures: no stalls.csv
    assert all(p.exists() and p.stat().st_size > 0 and p.parent == runs["slow"] for p in runs["report"])
    assert (runs["slow"] / "total_tps.png").read_bytes()[:4] == b"\x89PNG"


def test_summary_opens_with_the_studys_three_tables_then_the_details(runs):
    text = (runs["slow"] / "summary.md").read_text()
    tables = markdown_tables(text)
    for table, rows in zip(tables[:3], STUDY_ROWS):
        assert table[0] == ["test", "A"] and [line[0] for line in table[1:]] == rows
    one, at_once, needles = tables[:3]
    assert one[1:3] == [["chat decode tok/s", "40.0"], ["chat first token s", "0.110"]]
    assert one[3] == ["4K prompt tok/s (first token s)", "2000 (2.05)"]
    assert at_once[1] == ["1 at once: total tok/s (slowest first token s)", "30.0 (0.100)"]
    assert needles[1:] == [["32K needle: found / total", "2/3"], ["32K needle: answer time s", "3.00–3.00"]]
    assert "- **A**: slow (engine sim, model tiny)" in text
    assert "The result, in words" not in text  # one setup: nothing to compare
    assert text.index("## Needles") < text.index("## Charts") < text.index("## Details")


def test_summary_markdown_has_the_header_warnings_and_tables(runs):
    text = (runs["slow"] / "summary.md").read_text()
    assert "- setup: slow" in text and "- model: tiny" in text and "- engine: sim" in text
    assert "- requests: 59 ok, 1 failed" in text
    assert "burst-12: 2 of 24 requests were read too late by a saturated client" in text
    assert "Incomplete run" not in text
    headers = {tuple(h) for h in tables_in(text)}
    assert ("row", "decode_tps", "ttft_s", "n") in headers
    assert ("row", "total_tps", "ttft_p95_s", "start_spread_s", "per_user_decode_tps", "n") in headers
    assert "| chat | 40.0 (50% CI 40.0–40.0) | 0.110 (50% CI 0.110–0.110) | 2 |" in text  # 2 runs: min–max, 50%
    assert "| chat | 1 | 7 |" in text  # errors: one http_500 of 7 chat requests


def test_summary_csv_is_long_form(runs):
    long = pd.read_csv(runs["slow"] / "summary.csv", keep_default_na=False)
    assert list(long.columns) == LONG_COLUMNS
    assert set(long["setup"]) == {"slow"}
    assert {"requests", "chat", "prompt", "agent", "agent_turns", "burst", "burst_rounds", "needle", "errors",
            "engine_clock", "engine_metrics"} <= set(long["table"])
    found = long[(long["table"] == "needle") & (long["row"] == "needle-32k all depths") & (long["metric"] == "found")]
    assert found[["median", "min", "max", "n"]].astype(str).values.tolist() == [["2.0", "", "", "3"]]  # a count


def test_each_headline_cell_of_the_html_carries_its_interval_on_hover(runs):
    # The browser's own tooltip (a title) holds what a click opens: the interval at the level it reached.
    for page in (runs["slow"] / "report.html", runs["compare_dir"] / "compare.html"):
        titles = re.findall(r'<details title="([^"]*)">', page.read_text())
        assert titles and any(re.search(r"\d+% CI [\d.]+–[\d.]+ \(order statistics", t) for t in titles)
    long = pd.read_csv(runs["slow"] / "summary.csv")
    medians = long[long["ci_method"] == "order statistics"]
    assert len(medians) and ((medians["ci_low"] <= medians["median"]) & (medians["median"] <= medians["ci_high"])).all()


def test_html_is_self_contained(runs):
    for page, charts in ((runs["slow"] / "report.html", 4), (runs["compare_dir"] / "compare.html", 3)):
        html = page.read_text()
        assert "<table" in html and html.count("vegaEmbed('#chart-") == charts
        assert html.count("window.vegaEmbed=") == 1  # Vega's script inlined once
        outside_scripts = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
        assert not re.search(r"<(script|img|link)\b[^>]*\b(src|href)=", outside_scripts)  # nothing to fetch


def test_compare_opens_with_the_studys_three_tables_one_column_per_setup(runs):
    assert {p.name for p in runs["compare"]} == {"compare.md", "compare.csv", "compare.png", "compare.html",
                                                 "ttft_by_prompt.png", "token_latency.png"}
    text = (runs["compare_dir"] / "compare.md").read_text()
    tables = markdown_tables(text)
    for table, rows in zip(tables[:3], STUDY_ROWS):
        assert table[0] == ["test", "A", "B", "C"] and [line[0] for line in table[1:]] == rows
    assert tables[0][1] == ["chat decode tok/s", "40.0", "80.0", "40.0"]
    assert tables[1][3] == ["12 at once: total tok/s (slowest first token s)", "232 (1.15)", "463 (1.15)",
                            "232 (1.15)"]
    legend = ["- **A**: slow-engine (engine sim, model tiny)", "- **B**: fast-engine (engine sim, model tiny)",
              "- **C**: close-engine (engine sim, model tiny)"]
    assert "\n".join(legend) in text
    assert "| chat | A | 40.0 (50% CI 40.0–40.0) | 0.110 (50% CI 0.110–0.110) | 2 |" in text  # a line per setup
    assert "| chat | C | 40.0 (50% CI 28.0–52.0) |" in text
    assert "| needle-32k all depths | A | 2 | 67% (90% CI 14%–98%) | 3.000 (75% CI 3.000–3.000) | 3 |" in text


def test_runs_that_differ_only_in_their_api_are_a_column_each_named_by_it(tmp_path):
    """One --setup, three --api: three setups (not one run's three client machines), each named by its API."""
    dirs = []
    for api, speed in (("chat", 1.0), ("responses", 1.0), ("messages", 2.0)):
        directory = tmp_path / api
        directory.mkdir()
        write_csv([{**row, "api": api} for row in synthetic_rows("llama.cpp", speed)], directory / "requests.csv")
        dirs.append(directory)
    write_compare(dirs, None, tmp_path / "cmp")
    text = (tmp_path / "cmp" / "compare.md").read_text()
    tables = markdown_tables(text)
    assert tables[0][0] == ["test", "A", "B", "C"] and tables[0][1] == ["chat decode tok/s", "40.0", "40.0", "80.0"]
    legend = ["- **A**: llama.cpp (engine sim, model tiny, API chat)",
              "- **B**: llama.cpp via responses (engine sim, model tiny, API responses)",
              "- **C**: llama.cpp via messages (engine sim, model tiny, API messages)"]
    assert "\n".join(legend) in text
    write_report(dirs[2])
    summary = (dirs[2] / "summary.md").read_text()
    assert "setup: llama.cpp via messages" in summary and "API: messages" in summary


def test_compare_says_the_result_in_words(runs):
    text = (runs["compare_dir"] / "compare.md").read_text()
    words = the_result_in_words(text)
    # Two runs each: B decodes twice as fast in both, but the median of 2 runs has a 50% interval.
    assert "fastest chat decode for one user: can't tell at n = 2; run with --runs 5" in words
    assert "most total tok/s with 12 at once: can't tell at n = 2; run with --runs 5" in words
    assert "most needles found at 32K: can't tell at n = 3: the 90% intervals overlap" in words  # 2/3 each


def test_with_five_runs_compare_names_the_setup_whose_interval_is_clear_of_the_others(tmp_path):
    slow = synthetic_run(tmp_path / "slow", "slow", 1.0, runs=5, jitter=0.1)
    fast = synthetic_run(tmp_path / "fast", "fast", 2.0, runs=5, jitter=0.1)
    near = synthetic_run(tmp_path / "near", "near", 1.05, runs=5, jitter=0.1)  # 5% faster than slow, within its noise
    write_compare([slow, fast, near], None, tmp_path / "cmp")
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("fastest chat decode for one user: B (fast), 80.0 tok/s (94% CI 72.0–88.0; its interval clear of "
            "every other setup's, at 94%)") in the_result_in_words(text)
    two = "fastest chat decode for one user: can't tell at n = 5: the 94% intervals overlap"
    write_compare([slow, near], None, tmp_path / "close")
    assert two in the_result_in_words((tmp_path / "close" / "compare.md").read_text())


def test_compare_shows_the_faster_setup_ahead(runs):
    long = pd.read_csv(runs["compare_dir"] / "compare.csv")
    assert list(long.columns) == LONG_COLUMNS
    total = long[(long["table"] == "burst") & (long["metric"] == "total_tps")].pivot(
        index="row", columns="setup", values="median")
    assert list(total.index.sort_values()) == ["burst-1", "burst-12", "burst-4"]
    assert (total["fast-engine"] > total["slow-engine"]).all()
    text = (runs["compare_dir"] / "compare.md").read_text()
    assert ("row", "setup", "total_tps", "ttft_p95_s", "start_spread_s", "per_user_decode_tps", "n") in \
        {tuple(h) for h in tables_in(text)}


def test_every_output_column_is_documented(runs):
    docs = "\n".join(p.read_text() for p in DOCS if p.exists())
    names = set(LONG_COLUMNS)
    for path in (runs["slow"] / "summary.md", runs["compare_dir"] / "compare.md"):
        tables = markdown_tables(path.read_text())
        names |= {h for table in tables[3:] for h in table[0]}
        names |= {documented_test(line[0]) for table in tables[:3] for line in table[1:]}
    for path in (runs["slow"] / "summary.csv", runs["compare_dir"] / "compare.csv"):
        names |= set(pd.read_csv(path)["metric"]) | set(pd.read_csv(path)["table"])
    names |= set(pd.read_csv(runs["slow"] / "engine_clock.csv").columns)
    assert sorted(n for n in names if f"`{documented_as(n)}`" not in docs) == []


def documented_as(name: str) -> str:
    """HTTP error classes are documented once, as http_<status>."""
    return re.sub(r"^http_\d+$", "http_<status>", name)


def documented_test(label: str) -> str:
    """A headline row as the README names it: sizes as NK, burst sizes as N."""
    return re.sub(r"^\d+K ", "NK ", re.sub(r"^\d+ at once", "N at once", label))


def test_a_killed_run_is_reported_as_incomplete(tmp_path):
    finished = Record(scenario="chat", phase="chat", round=1, ok=True, ttft_s=0.2, decode_tps=30.0, setup="s")
    (tmp_path / "records.jsonl").write_text(json.dumps(finished.to_dict()) + "\n{\"scenario\": \"ch")
    written = {p.name for p in write_report(tmp_path)}
    assert {"summary.md", "summary.csv", "report.html"} <= written and "total_tps.png" not in written
    text = (tmp_path / "summary.md").read_text()
    assert "**Incomplete run**" in text and "records.jsonl line 2: not a JSON object" in text


def test_a_lost_worker_is_in_the_summary_and_the_comparison(tmp_path):
    run = synthetic_run(tmp_path / "room", "room", 1.0)
    lost = {"worker": "node-1", "client_host": "c1", "client_pid": 4242, "lost_at": 1.7e9 + 5, "phase": "agent",
            "in_flight_jobs": 1, "in_flight": [{"phase": "agent", "round": 2, "index": 1}], "records_finished": 8,
            "records_received": 6}
    (run / "lost-workers.jsonl").write_text(json.dumps(lost) + "\n")
    write_report(run)
    text = (run / "summary.md").read_text()
    sentence = ("**c1** was lost at 2023-11-14T22:13:25Z, during agent; 6 of the 8 measured records its finished jobs "
                "made reached the master (2 may be missing from the records; its own worker-*.jsonl holds them if its "
                "disk survived); 1 of its jobs in flight was closed and never recorded: agent round 2; no other client "
                "sent a record of agent after the loss.")
    assert f"**Lost workers**: the run went on without them\n\n- {sentence}" in text
    assert "- client hosts: c1 (lost)" in text
    write_compare([run, synthetic_run(tmp_path / "other", "other", 2.0)], None, tmp_path / "cmp")
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"- A (room): {sentence}" in text and text.count("was lost at") == 1


def test_a_reading_that_failed_leaves_its_phase_without_engine_figures_and_says_so(tmp_path):
    run = synthetic_run(tmp_path / "run", "", 1.0)
    failed = {"phase": "chat", "when": "after", "t": 13.0, "error": "TimeoutError: timed out"}
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text(f"{lines[0]}\n{json.dumps(failed)}\n")
    write_report(run)
    long = pd.read_csv(run / "summary.csv")
    figures = set(long.loc[long["table"] == "engine_metrics", "metric"])
    assert "client_ttft_mean_s" in figures and not {"engine_ttft_mean_s", "engine_requests"} & figures  # not 0
    assert ("the engine's /metrics could not be read after chat (TimeoutError: timed out): those phases have no "
            "engine figures") in (run / "summary.md").read_text()
