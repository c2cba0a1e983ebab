"""The SLO and its verdict on a step, on hand-made records: exact percentiles and intervals, failures, saturation."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from bench_tasks import slo
from bench_tasks.capacity.lines import verdict_line
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
    """A window of 100 independent requests with TTFTs 0.01, 0.02, ... 1.00 s: its p95 is 0.9505 s, and its
    90% interval by order statistics runs from the 91st to the 99th value (0.91 to 0.99 s), each end missing
    with at most 5%. (The verdict's rule on an interval is the same whichever way the interval was made.)"""
    rows = [row(ttft_s=i / 100) for i in range(1, 101)]
    return slo.judge(slo.parse(f"ttft_p95={limit}"), rows, final=final, independent=True)


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


def test_a_window_is_judged_in_the_order_its_requests_were_asked_and_a_run_of_slow_ones_widens_its_interval():
    goal = slo.parse("ttft_p95=1.0")
    ttfts = [0.2 + i / 1000 for i in range(200)]  # 200 questions, one every 2 s
    ttfts[100:120] = [1.5 + i / 100 for i in range(20)]  # a busy period: 20 slow first tokens in a row
    asked = [row(ttft_s=t, t_start=1000.0 + 2 * i) for i, t in enumerate(ttfts)]
    shuffled = asked[:]
    random.Random(3).shuffle(shuffled)
    # As independent draws the 20 slow ones say the p95 is surely above 1 s ...
    independent = slo.judge(goal, shuffled, independent=True)
    assert (independent["ttft_p95_low_s"], independent["ttft_p95_high_s"]) == (1.54, 1.65)
    assert independent["outcome"] == slo.MISSES
    # ... but they came together, once: another window might have had no busy period at all. The batches (in
    # the order asked, by t_start, whatever order the records came in) disagree, and the window cannot tell.
    window = slo.judge(goal, shuffled)
    assert window["ttft_p95_s"] == independent["ttft_p95_s"] == pytest.approx(1.5905)
    assert window["ttft_p95_low_s"] == 0.388 and window["ttft_p95_high_s"] is None
    assert window["outcome"] == slo.UNSURE and window["ttft_p95_level"] == slo.LEVEL
    # The same values spread evenly over the window (no time order known: as given) agree with the order statistics.
    spread = slo.judge(goal, [row(ttft_s=r["ttft_s"]) for r in shuffled])
    assert (spread["ttft_p95_low_s"], spread["ttft_p95_high_s"]) == (1.5, 1.69) and spread["outcome"] == slo.MISSES


def test_a_window_that_would_not_tell_by_its_limit_is_decided_now_on_its_point_estimate():
    # p95 0.95 s, 90% CI 0.91-0.99 at 100 questions: a limit of 0.96 lies in it.
    goal = slo.parse("ttft_p95=0.96")
    rows = [row(ttft_s=i / 100) for i in range(1, 101)]
    # Held three times as long (shrink 1/sqrt(3)), the upper end 0.99 would come to about 0.973: still above 0.96.
    hopeless = slo.judge(goal, rows, independent=True, shrink=3 ** -0.5)
    assert (hopeless["outcome"], hopeless["decided_on"], hopeless["hopeless"]) == (slo.MEETS, slo.BY_POINT, True)
    assert verdict_line(goal, 24, hopeless).endswith(
        "meets on its point estimate (the interval straddles the goal, and would still at the window's limit)")
    # Held a hundred times as long (shrink 0.1) the upper end would come to 0.954, below the limit: hold on.
    longer = slo.judge(goal, rows, independent=True, shrink=0.1)
    assert (longer["outcome"], longer["decided_on"], longer["hopeless"]) == (slo.UNSURE, None, False)
    # A point estimate beyond a limit of 0.935, its lower end 0.91: with shrink 0.5 the end comes to 0.930, still
    # within the limit (a miss the window would not show); with shrink 0.1 to 0.946, beyond it (it might).
    beyond = slo.judge(slo.parse("ttft_p95=0.935"), rows, independent=True, shrink=0.5)
    assert (beyond["outcome"], beyond["decided_on"], beyond["hopeless"]) == (slo.MISSES, slo.BY_POINT, True)
    assert slo.judge(slo.parse("ttft_p95=0.935"), rows, independent=True, shrink=0.1)["outcome"] == slo.UNSURE
    # An end the requests cannot place yet could go anywhere: the window goes on.
    few = slo.judge(goal, rows[::2], shrink=0.9)
    assert few["ttft_p95_high_s"] is None and few["outcome"] == slo.UNSURE and not few["hopeless"]

def test_a_rate_goal_meets_on_its_interval_s_lower_end():
    goal = slo.parse("decode_p5=10")
    rows = [row(decode_tps=10.0 + i / 10) for i in range(1, 101)]  # 10.1 .. 20.0 tok/s
    figures = slo.judge(goal, rows, independent=True)
    assert (figures["decode_tps_p5_low"], figures["decode_tps_p5_high"]) == (10.2, 11.0)  # 2nd and 10th
    assert figures["outcome"] == slo.MEETS
    assert slo.judge(slo.parse("decode_p5=11.5"), rows, independent=True)["outcome"] == slo.MISSES
    assert slo.judge(slo.parse("decode_p5=10.5"), rows, independent=True)["outcome"] == slo.UNSURE
    assert slo.judge(goal, rows[:50], independent=True)["decode_tps_p5_low"] is None  # 50 cannot place a p5's low end
    assert slo.judge(goal, rows[:80])["decode_tps_p5_low"] is None  # by batch means (the default) 80 cannot either


def test_the_verdict_line_gives_each_goal_s_figure_with_its_interval_and_how_it_was_decided():
    goal = slo.parse("ttft_p95=1.0")
    assert verdict_line(goal, 24, hundred(1.0)) == "24 students: TTFT p95 0.95 s (90% CI 0.91–0.99): meets"
    assert verdict_line(goal, 24, hundred(0.95), up_to_s=360.0) == (
        "24 students: TTFT p95 0.95 s (90% CI 0.91–0.99): can't tell yet, the interval straddles the goal; the window "
        "goes on, up to 360 s")
    assert verdict_line(goal, 24, hundred(0.96, final=True)) == (
        "24 students: TTFT p95 0.95 s (90% CI 0.91–0.99): meets on its point estimate (the interval still straddles "
        "the goal)")
    assert verdict_line(slo.parse("ttft_p95=0.9"), 25, hundred(0.9)) == (
        "25 students: TTFT p95 0.95 s (90% CI 0.91–0.99): misses (ttft_p95 > 0.9)")


def test_the_verdict_line_shows_more_decimals_only_where_fewer_would_read_as_the_limit():
    # p95 0.9505 s against a limit of 0.95: at 2 decimals it would read as the limit and seem to meet it.
    near = slo.parse("ttft_p95=0.95")
    assert verdict_line(near, 24, hundred(0.95)).startswith("24 students: TTFT p95 0.9505 s (90% CI 0.91–0.99): ")


def test_the_verdict_line_of_a_miss_says_why_once_failures_included():
    failing = slo.parse("ttft_p95=1.0,errors=0.5")
    figures = slo.judge(failing, [row(ok=False, error="http_500")])
    assert verdict_line(failing, 3, figures) == "3 students: TTFT p95 not measured: misses (1 of 1 requests failed)"


def test_a_step_in_which_the_client_was_saturated_is_not_judged_and_its_figures_withheld():
    rows = [row(ttft_s=0.1, decode_tps=30.0) for _ in range(9)] + [row(ttft_s=0.1, flags="client_saturated")]
    figures = slo.judge(slo.parse("ttft_p95=1.0"), rows)
    assert figures["outcome"] == slo.SATURATED and figures["client_saturated"] == 1
    assert figures["ttft_p95_s"] is None and figures["goodput_share"] is None and figures["requests"] == 10
    assert figures["ttft_p95_low_s"] is None and figures["decided_on"] is None
    assert "add workers" in verdict_line(slo.parse("ttft_p95=1.0"), 4, figures)


def test_a_step_without_a_successful_request_misses_with_its_figures_missing_not_zero():
    figures = slo.judge(slo.parse("ttft_p95=1.0,errors=0.5"), [row(ok=False, error="http_500")])
    assert figures["ttft_p95_s"] is None and figures["goodput_share"] == 0.0
    assert figures["outcome"] == slo.MISSES and figures["missed"] == [
        "ttft_p95 not measured (no successful request had it)", "1 of 1 requests failed"]
    assert figures["ttft_p95_low_s"] is None and figures["ttft_p95_level"] is None


