"""The SLO and its verdict on a step, on hand-made records: exact percentiles, failures, saturation."""

from __future__ import annotations

import pandas as pd
import pytest

from bench_tasks import slo
from bench_tasks.record import Record


def test_slo_parses_goals_and_names_their_figures_with_units_last():
    parsed = slo.parse("ttft_p95=1.0, decode_p5=10,errors=0.02")
    assert [(g.column, g.quantile, g.limit, g.at_most) for g in parsed.goals] == [
        ("ttft_s", 0.95, 1.0, True), ("decode_tps", 0.05, 10.0, False)]
    assert [g.figure for g in parsed.goals] == ["ttft_p95_s", "decode_tps_p5"] and parsed.errors == 0.02
    assert slo.parse("e2e_p99=30").goals[0].figure == "e2e_p99_s"
    assert parsed.text() == "ttft_p95 ≤ 1 s, decode_p5 ≥ 10 tok/s, failed ≤ 2.0%"
    for bad in ("", "ttft=1", "ttft_p95", "ttft_p95=fast", "speed_p95=1", "ttft_p0=1", "ttft_p101=1", "errors=1"):
        with pytest.raises(ValueError):
            slo.parse(bad)


def row(**fields) -> dict:
    return Record(**{"scenario": "classroom", "phase": "class-4", "ok": True, **fields}).to_dict()


def test_a_request_meets_the_slo_only_when_every_named_figure_is_known_and_within_it():
    goal = slo.parse("ttft_p95=1.0,decode_p5=10")
    assert slo.meets(goal, row(ttft_s=1.0, decode_tps=10.0))
    assert not slo.meets(goal, row(ttft_s=1.01, decode_tps=50.0))
    assert not slo.meets(goal, row(ttft_s=0.2, decode_tps=9.9))
    assert not slo.meets(goal, row(ttft_s=0.2, decode_tps=None))  # one event: not shown to meet
    assert not slo.meets(goal, row(ok=False, ttft_s=0.2, decode_tps=50.0))
    assert not slo.meets(goal, {"ok": pd.NA, "ttft_s": 0.2, "decode_tps": 50.0})


def test_a_step_is_judged_on_its_successful_requests_percentiles_and_its_failures():
    goal = slo.parse("ttft_p95=1.0,decode_p5=10")
    rows = [row(ttft_s=t / 10, decode_tps=20.0 + t) for t in range(1, 11)]  # ttft 0.1 .. 1.0
    rows.append(row(ok=False, error="timeout", ttft_s=99.0))  # failed: counted, never in a percentile
    rows.append(row(scenario="warmup", phase="warmup-classroom", ttft_s=50.0))  # never counted
    figures = slo.judge(goal, rows)
    assert (figures["requests"], figures["ok"], figures["failed"]) == (11, 10, 1)
    assert figures["ttft_p95_s"] == pytest.approx(0.955)  # 0.9 + 0.55 * (1.0 - 0.9): linear, as numpy
    assert figures["ttft_p50_s"] == pytest.approx(0.55) and figures["decode_tps_p5"] == pytest.approx(21.45)
    assert figures["per_user_decode_tps"] == pytest.approx(25.5)
    assert figures["goodput_share"] == pytest.approx(10 / 11)
    assert figures["outcome"] == slo.MISSES and figures["missed"] == ["1 of 11 requests failed"]
    assert slo.judge(slo.parse("ttft_p95=1.0,errors=0.1"), rows)["outcome"] == slo.MEETS
    tight = slo.judge(slo.parse("ttft_p95=0.9,errors=0.1"), rows)
    assert tight["outcome"] == slo.MISSES and tight["missed"] == ["ttft_p95 0.955 s > 0.9"]


def test_a_step_in_which_the_client_was_saturated_is_not_judged_and_its_figures_withheld():
    rows = [row(ttft_s=0.1, decode_tps=30.0) for _ in range(9)] + [row(ttft_s=0.1, flags="client_saturated")]
    figures = slo.judge(slo.parse("ttft_p95=1.0"), rows)
    assert figures["outcome"] == slo.SATURATED and figures["client_saturated"] == 1
    assert figures["ttft_p95_s"] is None and figures["goodput_share"] is None and figures["requests"] == 10
    assert "add workers" in slo.verdict_line(4, figures)


def test_a_step_without_a_successful_request_misses_with_its_figures_missing_not_zero():
    figures = slo.judge(slo.parse("ttft_p95=1.0,errors=0.5"), [row(ok=False, error="http_500")])
    assert figures["ttft_p95_s"] is None and figures["goodput_share"] == 0.0
    assert figures["outcome"] == slo.MISSES and figures["missed"] == [
        "ttft_p95 not measured (no successful request had it)", "1 of 1 requests failed"]


