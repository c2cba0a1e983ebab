"""A phase's figures, defined once (bench_tasks.figures): the live table, the printed overview and the report agree."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import overview, study
from bench_tasks import figures, formatting
from bench_tasks.live_table import LiveTable
from tests.test_analysis import burst_records, frame


def chat_on_two_machines() -> pd.DataFrame:
    """Two clients whose perf_counter clocks are 1000 s apart; the worker says by how much (clock_offset_s)."""
    return frame({"round": 1, "t_send": 10.0, "e2e_s": 2.0, "ttft_s": 0.1, "decode_tps": 50.0,
                  "completion_tokens": 100},
                 {"round": 1, "t_send": 1011.0, "clock_offset_s": -1000.0, "e2e_s": 2.0, "ttft_s": 0.3,
                  "decode_tps": 30.0, "completion_tokens": 100, "client_host": "c2"},
                 {"round": 1, "ok": False, "error": "timeout", "t_send": 0.0, "e2e_s": 300.0},
                 scenario="chat", phase="chat")


def test_the_live_table_the_overview_and_the_report_quote_the_same_figures():
    records = pd.concat([chat_on_two_machines(), burst_records()], ignore_index=True)
    live = LiveTable()
    for row in records.to_dict("records"):
        live.add(row)
    shown = {row["phase"]: row for row in live.rows()}
    printed = overview.overview(records).set_index("phase")
    for phase in ("chat", "burst-4"):
        for name in figures.FIGURES:
            assert shown[phase][name] == pytest.approx(printed.loc[phase, name]), (phase, name)
    assert printed.loc["chat", "total_tps"] == pytest.approx(200 / 3.0)  # 10 .. 13 on the master's clock
    assert (printed.loc["chat", "requests"], printed.loc["chat", "errors"]) == (3, 1)
    rounds = study.burst_rounds(records)
    assert printed.loc["burst-4", "total_tps"] == pytest.approx(rounds["total_tps"].median())
    assert printed.loc["burst-4", "ttft_p95_s"] == pytest.approx(figures.phase(
        burst_records().to_dict("records"))["ttft_p95_s"])


def test_a_phase_without_a_figure_shows_it_missing_never_0():
    assert figures.phase([{"ok": False, "error": "timeout"}]) == {
        "requests": 1, "errors": 1, "ttft_p50_s": None, "ttft_p95_s": None, "decode_tps_p50": None, "total_tps": None}
    no_counts = figures.phase([{"ok": True, "t_send": 1.0, "e2e_s": 2.0, "ttft_s": 0.5}])
    assert no_counts["total_tps"] is None and no_counts["ttft_p50_s"] == 0.5
    assert [formatting.shown(v, 3) for v in (None, math.nan, pd.NA, -0.0001, 1.23456)] == ["–", "–", "–", "0.000",
                                                                                          "1.235"]
    table = overview.format_overview(overview.overview(frame({"ok": False, "error": "timeout"}, scenario="chat",
                                                              phase="chat")))
    assert table.splitlines()[1].split() == ["chat", "1", "1", "–", "–", "–", "–"]
