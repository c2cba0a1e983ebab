"""The SLO and its verdict on a step, on hand-made records: exact percentiles and intervals, failures, saturation."""

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
    assert [(g.low, g.high, g.level) for g in parsed.goals] == [
        ("ttft_p95_low_s", "ttft_p95_high_s", "ttft_p95_level"), ("decode_tps_p5_low", "decode_tps_p5_high",
                                                                 "decode_tps_p5_level")]
    assert [g.label for g in parsed.goals] == ["TTFT p95", "decode p5"]
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
    # A failure beyond the allowance misses outright, whatever the intervals say.
    assert figures["outcome"] == slo.MISSES and figures["missed"] == ["1 of 11 requests failed"]
    assert figures["decided_on"] == slo.BY_INTERVAL
    # Ten values place the p95 above the 8th (0.8 s), but cannot bound it from above: can't tell yet.
    allowed = slo.judge(slo.parse("ttft_p95=1.0,errors=0.1"), rows)
    assert (allowed["ttft_p95_low_s"], allowed["ttft_p95_high_s"]) == (0.8, None)
    assert allowed["outcome"] == slo.UNSURE and allowed["decided_on"] is None and allowed["missed"] == []
    assert allowed["straddling"] == ["ttft_p95 0.955 s ≤ 1, 90% CI 0.8–?"]
    final = slo.judge(slo.parse("ttft_p95=1.0,errors=0.1"), rows, final=True)
    assert (final["outcome"], final["decided_on"]) == (slo.MEETS, slo.BY_POINT)
    tight = slo.judge(slo.parse("ttft_p95=0.9,errors=0.1"), rows, final=True)
    assert (tight["outcome"], tight["decided_on"]) == (slo.MISSES, slo.BY_POINT)
    assert tight["missed"] == ["ttft_p95 0.955 s > 0.9, 90% CI 0.8–?"]
    assert slo.judge(slo.parse("ttft_p95=0.5,errors=0.1"), rows)["outcome"] == slo.MISSES  # 0.8 s and up: > 0.5


def hundred(limit: float, final: bool = False) -> dict:
    """A window of 100 requests with TTFTs 0.01, 0.02, ... 1.00 s: its p95 is 0.9505 s, and its 90%
    interval runs from the 91st to the 99th value (0.91 to 0.99 s), each end missing with at most 5%."""
    return slo.judge(slo.parse(f"ttft_p95={limit}"), [row(ttft_s=i / 100) for i in range(1, 101)], final=final)


def test_a_step_meets_when_the_interval_is_within_the_goal_misses_when_beyond_and_else_cannot_tell():
    met = hundred(1.0)
    assert (met["ttft_p95_low_s"], met["ttft_p95_high_s"]) == (0.91, 0.99)
    assert met["ttft_p95_level"] == pytest.approx(0.9347, abs=1e-4) and met["ttft_p95_s"] == pytest.approx(0.9505)
    assert (met["outcome"], met["decided_on"], met["missed"]) == (slo.MEETS, slo.BY_INTERVAL, [])
    beyond = hundred(0.9)
    assert (beyond["outcome"], beyond["decided_on"]) == (slo.MISSES, slo.BY_INTERVAL)
    assert beyond["missed"] == ["ttft_p95 0.95 s > 0.9, 90% CI 0.91–0.99"]
    for limit in (0.91, 0.95, 0.96, 0.989):  # inside the interval: the window cannot tell
        assert hundred(limit)["outcome"] == slo.UNSURE, limit
    # Told to decide, an unsure window goes by its point estimate, 0.9505 s, and says so.
    assert (hundred(0.95, final=True)["outcome"], hundred(0.96, final=True)["outcome"]) == (slo.MISSES, slo.MEETS)
    assert hundred(0.96, final=True)["decided_on"] == slo.BY_POINT
    assert hundred(0.95, final=True)["missed"] == ["ttft_p95 0.9505 s > 0.95, 90% CI 0.91–0.99"]  # not "0.95 > 0.95"
    assert hundred(0.99, final=True)["decided_on"] == slo.BY_INTERVAL  # the interval's end may touch the limit


def test_a_rate_goal_meets_on_its_interval_s_lower_end():
    goal = slo.parse("decode_p5=10")
    rows = [row(decode_tps=10.0 + i / 10) for i in range(1, 101)]  # 10.1 .. 20.0 tok/s
    figures = slo.judge(goal, rows)
    assert (figures["decode_tps_p5_low"], figures["decode_tps_p5_high"]) == (10.2, 11.0)  # 2nd and 10th
    assert figures["outcome"] == slo.MEETS
    assert slo.judge(slo.parse("decode_p5=11.5"), rows)["outcome"] == slo.MISSES
    assert slo.judge(slo.parse("decode_p5=10.5"), rows)["outcome"] == slo.UNSURE
    assert slo.judge(goal, rows[:50])["decode_tps_p5_low"] is None  # 50 values cannot place a p5's lower end


def test_the_verdict_line_gives_each_goal_s_figure_with_its_interval_and_how_it_was_decided():
    goal = slo.parse("ttft_p95=1.0")
    assert slo.verdict_line(goal, 24, hundred(1.0)) == (
        "24 students, 100 requests: TTFT p95 0.95 s (90% CI 0.91–0.99): meets the SLO")
    assert slo.verdict_line(goal, 24, hundred(0.95), up_to_s=360.0) == (
        "24 students, 100 requests: TTFT p95 0.95 s (90% CI 0.91–0.99): can't tell yet, the interval straddles "
        "the goal; the window goes on, up to 360 s")
    assert slo.verdict_line(goal, 24, hundred(0.96, final=True)) == (
        "24 students, 100 requests: TTFT p95 0.95 s (90% CI 0.91–0.99): meets the SLO, decided on its point "
        "estimate: the interval still straddles the goal")
    assert slo.verdict_line(slo.parse("ttft_p95=0.9"), 25, hundred(0.9)) == (
        "25 students, 100 requests: misses the SLO (ttft_p95 0.95 s > 0.9, 90% CI 0.91–0.99)")


def test_a_step_in_which_the_client_was_saturated_is_not_judged_and_its_figures_withheld():
    rows = [row(ttft_s=0.1, decode_tps=30.0) for _ in range(9)] + [row(ttft_s=0.1, flags="client_saturated")]
    figures = slo.judge(slo.parse("ttft_p95=1.0"), rows)
    assert figures["outcome"] == slo.SATURATED and figures["client_saturated"] == 1
    assert figures["ttft_p95_s"] is None and figures["goodput_share"] is None and figures["requests"] == 10
    assert figures["ttft_p95_low_s"] is None and figures["decided_on"] is None
    assert "add workers" in slo.verdict_line(slo.parse("ttft_p95=1.0"), 4, figures)


def test_a_step_without_a_successful_request_misses_with_its_figures_missing_not_zero():
    figures = slo.judge(slo.parse("ttft_p95=1.0,errors=0.5"), [row(ok=False, error="http_500")])
    assert figures["ttft_p95_s"] is None and figures["goodput_share"] == 0.0
    assert figures["outcome"] == slo.MISSES and figures["missed"] == [
        "ttft_p95 not measured (no successful request had it)", "1 of 1 requests failed"]
    assert figures["ttft_p95_low_s"] is None and figures["ttft_p95_level"] is None


