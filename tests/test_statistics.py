"""Confidence intervals: exact coverage at small n, coverage by simulation, and the edge cases."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import pytest

from bench_tasks import statistics as bench_statistics
from bench_tasks.statistics import (BATCH_MEANS, CLOPPER_PEARSON, ORDER_STATISTICS, median_interval, quantile_interval,
                                   share_interval, smallest_n, t_quantile, window_quantile_interval)


def binomial_between(n: int, q: float, r: int, s: int) -> float:
    """P(r <= B <= s - 1), B ~ binomial(n, q): the chance that (r-th, s-th smallest) holds the q-quantile."""
    return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(r, s))


def test_at_three_values_the_median_interval_is_min_to_max_and_says_it_covers_75_percent():
    interval = median_interval([3.0, 1.0, 2.0])
    assert (interval.low, interval.high, interval.method) == (1.0, 3.0, ORDER_STATISTICS)
    assert interval.level == pytest.approx(0.75)  # 1 - 2 * 0.5 ** 3: not the 90% asked for
    assert median_interval([1.0, 2.0]).level == pytest.approx(0.5)
    opened = median_interval([1.0, 2.0, 3.0], open_ends=True)
    assert (opened.low, opened.high, opened.level) == (None, None, 1.0)  # no end can be placed at 90%


@pytest.mark.parametrize("n", [5, 6, 10, 20, 59, 100])
@pytest.mark.parametrize("q", [0.5, 0.95])
def test_the_level_is_the_exact_binomial_coverage_of_the_ranks_chosen(n, q):
    values = [float(i) for i in range(1, n + 1)]  # the value is its rank
    interval = quantile_interval(values, q)
    r, s = int(interval.low), int(interval.high)
    assert interval.level == pytest.approx(binomial_between(n, q, r, s))
    # Equal-tailed: each end misses on its own side with a chance of at most 5%, and no narrower pair does.
    below, above = binomial_between(n, q, 0, r), binomial_between(n, q, s, n + 1)
    if interval.level >= 0.9:
        assert below <= 0.05 + 1e-12 and above <= 0.05 + 1e-12
        assert r == n or binomial_between(n, q, 0, r + 1) > 0.05
        assert s == 1 or binomial_between(n, q, s - 1, n + 1) > 0.05


def test_a_p95_has_a_90_percent_upper_end_from_59_values_on_and_a_p99_from_299():
    assert quantile_interval(range(58), 0.95, open_ends=True).high is None
    at_59 = quantile_interval(range(59), 0.95, open_ends=True)
    assert (at_59.low, at_59.high) == (52.0, 58.0)  # the 53rd and the 59th (largest) of 59
    assert at_59.level == pytest.approx(binomial_between(59, 0.95, 53, 59)) and 0.95 ** 59 <= 0.05 < 0.95 ** 58
    assert quantile_interval(range(298), 0.99, open_ends=True).high is None
    assert quantile_interval(range(299), 0.99, open_ends=True).high == 298.0
    assert quantile_interval(range(58), 0.05, open_ends=True).low is None  # a rate's p5: its lower end
    assert quantile_interval(range(59), 0.05, open_ends=True).low == 0.0
    # Without open ends the missing end falls back to the max, and the level says what that covers.
    closed = quantile_interval(range(20), 0.95)
    assert closed.high == 19.0 and closed.level == pytest.approx(binomial_between(20, 0.95, 17, 20))
    assert closed.level < 0.9
    opened = quantile_interval(range(20), 0.95, open_ends=True)
    assert opened.low == closed.low and opened.high is None and opened.level >= 0.9


def lognormal_quantile(q: float) -> float:
    return math.exp(NormalDist().inv_cdf(q))


@pytest.mark.parametrize("n,q", [(5, 0.5), (11, 0.5), (30, 0.9), (60, 0.95), (100, 0.95)])
def test_coverage_by_simulation_on_a_skewed_distribution_matches_the_level(n, q):
    rng, samples = random.Random(20261204 + n), 2000
    truth = lognormal_quantile(q)
    hits, level = 0, None
    for _ in range(samples):
        interval = quantile_interval([rng.lognormvariate(0.0, 1.0) for _ in range(n)], q)
        hits += interval.low <= truth <= interval.high
        level = interval.level  # the same ranks for every sample of n values
    error = 3 * math.sqrt(level * (1 - level) / samples)
    assert level >= 0.9 and abs(hits / samples - level) <= error, (hits / samples, level)


def test_ties_and_equal_values_keep_the_interval_on_the_values():
    same = median_interval([2.0] * 7)
    assert (same.low, same.high) == (2.0, 2.0) and same.level >= 0.9
    tied = quantile_interval([1.0, 1.0, 1.0, 5.0, 5.0, 9.0, 9.0, 9.0, 9.0, 9.0], 0.5)
    assert tied.low in (1.0, 5.0) and tied.high == 9.0
    rng = random.Random(7)  # many ties (a discrete distribution whose median is 0): coverage at least the level
    samples = [median_interval([rng.choice((0, 0, 1)) for _ in range(15)]) for _ in range(2000)]
    assert sum(s.low <= 0 <= s.high for s in samples) / 2000 >= 0.9


def test_no_value_no_interval_and_one_value_covers_nothing():
    assert quantile_interval([], 0.95) is None and median_interval([]) is None and share_interval(0, 0) is None
    one = quantile_interval([4.2], 0.95)
    assert (one.low, one.high, one.level) == (4.2, 4.2, 0.0)  # one value is the p95 with chance 0
    assert quantile_interval([4.2], 0.95, open_ends=True).high is None
    for bad in (lambda: quantile_interval([1.0], 1.5), lambda: quantile_interval([1.0], 0.5, level=1.0),
                lambda: share_interval(3, 2), lambda: share_interval(-1, 2), lambda: share_interval(1, 2, level=0)):
        with pytest.raises(ValueError):
            bad()


def test_clopper_pearson_matches_its_closed_forms_and_published_values():
    half = share_interval(5, 10, level=0.95)
    assert (half.low, half.high) == pytest.approx((0.187086, 0.812914), abs=1e-6) and half.method == CLOPPER_PEARSON
    none = share_interval(0, 10, level=0.95)
    assert none.low == 0.0 and none.high == pytest.approx(1 - 0.025 ** (1 / 10))
    every = share_interval(10, 10, level=0.95)
    assert every.high == 1.0 and every.low == pytest.approx(0.025 ** (1 / 10))
    assert none.level == pytest.approx(0.975) and half.level == pytest.approx(0.95)
    # The ends are where the binomial tails are exactly (1 - level)/2.
    third = share_interval(3, 100)
    assert binomial_between(100, third.low, 3, 101) == pytest.approx(0.05)
    assert binomial_between(100, third.high, 0, 4) == pytest.approx(0.05)


def test_clopper_pearson_covers_at_least_its_level_whatever_the_share():
    # Exactly: the coverage at p is the chance of the counts k whose interval holds p.
    for n in (1, 7, 20, 50):
        intervals = [share_interval(k, n) for k in range(n + 1)]
        for p in [i / 200 for i in range(1, 200)]:
            coverage = sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k)
                           for k, interval in enumerate(intervals) if interval.low <= p <= interval.high)
            assert coverage >= 0.9 - 1e-9, (n, p, coverage)


def test_student_t_quantiles_match_the_tables_and_the_median_needs_five_values_at_90_percent():
    for df, table in ((1, 6.3138), (2, 2.9200), (4, 2.1318), (9, 1.8331), (30, 1.6973)):
        assert t_quantile(0.95, df) == pytest.approx(table, abs=1e-4)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert smallest_n(0.5, 0.90) == 5 and median_interval(range(5)).level == pytest.approx(0.9375)
    assert smallest_n(0.95, 0.90) == 59 and smallest_n(0.99, 0.90) == 299


def test_on_independent_values_the_window_interval_holds_the_order_statistic_one_and_its_level():
    rng = random.Random(11)
    hits, samples, truth = 0, 1000, lognormal_quantile(0.95)
    for _ in range(samples):
        values = [rng.lognormvariate(0.0, 1.0) for _ in range(200)]
        window, plain = window_quantile_interval(values, 0.95), quantile_interval(values, 0.95, open_ends=True)
        assert window.low <= plain.low and (window.high is None or window.high >= plain.high)
        assert window.method == BATCH_MEANS and window.level == 0.90
        hits += window.low <= truth and (window.high is None or truth <= window.high)
    assert 0.90 <= hits / samples <= 0.99  # a little wider than it need be for independent values
    few = window_quantile_interval([3.0, 1.0, 2.0], 0.5)  # fewer than two per batch: the order statistics
    assert few.method == ORDER_STATISTICS and (few.low, few.high) == (None, None)
    assert window_quantile_interval([], 0.95) is None


def test_on_the_classroom_model_the_window_interval_holds_the_long_run_p95_where_order_statistics_do_not():
    from bench_tasks.capacity.queue_model import Server, simulate
    from bench_tasks.classroom import ThinkTime
    from bench_tasks.statistics import quantile

    # The server at 24 students, near its knee: one busy period delays several questions in a row.
    server = Server(slots=4, token_s=0.01, answer_tokens=(256,), first_token_s=0.001, prefill_tps=40000.0,
                    cached_history=True)
    think = ThinkTime(10, 40)
    long_run, _ = simulate(server, think, 24, 100000, 1)
    truth = quantile(sorted(row["ttft_s"] for row in long_run), 0.95)
    held = {"order statistics": 0, "batch means": 0}
    seeds = range(100, 160)
    for seed in seeds:
        rows, _ = simulate(server, think, 24, 400, seed)
        asked = sorted(rows, key=lambda row: row["t_send"])
        window = [row["ttft_s"] for row in asked if row["t_send"] < asked[0]["t_send"] + 360]  # about 310
        for name, found in (("order statistics", quantile_interval(window, 0.95, open_ends=True)),
                            ("batch means", window_quantile_interval(window, 0.95))):
            held[name] += found.low <= truth and (found.high is None or truth <= found.high)
    coverage = {name: hits / len(seeds) for name, hits in held.items()}
    assert coverage["batch means"] >= 0.85 and coverage["order statistics"] <= 0.80, coverage


def every_term_cdf(n: int, p: float) -> list[float]:
    """P(B <= i) for i in 0..n, summing all n + 1 terms in order: what bench_tasks.statistics summed before it
    left out the terms that are 0.0 in double precision (the same terms, by the same formula)."""
    total, cdf = 0.0, []
    for i in range(n + 1):
        total += math.exp(bench_statistics._log_pmf(n, p, i))
        cdf.append(min(total, 1.0))
    return cdf


@pytest.mark.parametrize("n", [1, 2, 3, 5, 19, 20, 59, 60, 100, 1_000, 3_001, 20_000])
def test_the_binomial_tails_are_the_very_sums_of_every_term(n):
    """Leaving out the terms under e^-760 changes no bit of any tail, anywhere (the intervals and their levels
    are made of these numbers, so they are unchanged too), at the quantiles the tables ask for and at shares
    between, where Clopper-Pearson's bisection evaluates them."""
    for p in (0.0, 1e-9, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1 - 1e-9, 1.0, 0.3183):
        reference = every_term_cdf(n, p)
        assert bench_statistics._binomial_cdf(n, p) == reference, (n, p)
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            assert bench_statistics._binomial_cdf_at(n, p, k) == reference[k], (n, p, k)
    first, last = bench_statistics._nonzero_terms(100_000, 0.5)
    assert last - first + 1 < 0.15 * 100_001  # what it saves at a report's 100k records


@pytest.mark.parametrize("n", [1, 2, 4, 5, 6, 19, 20, 58, 59, 60, 101, 1_000, 5_000])
def test_the_ranks_are_those_a_scan_of_every_rank_finds(n):
    """The ends' ranks come by bisection on the monotone tails: the very ranks (and levels) that trying every
    rank finds, open ends included."""
    slack = 1e-12  # bench_tasks.statistics._SLACK
    for level in (0.5, 0.75, 0.9, 0.95, 0.99):
        share = (1 - level) / 2
        for q in (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99):
            below = every_term_cdf(n, q)
            lows = [r for r in range(1, n + 1) if below[r - 1] <= share + slack]
            highs = [s for s in range(1, n + 1) if 1 - below[s - 1] <= share + slack]
            for open_ends in (False, True):
                interval = quantile_interval(range(n), q, level, open_ends)
                low = lows[-1] - 1 if lows else (None if open_ends else 0)
                high = highs[0] - 1 if highs else (None if open_ends else n - 1)
                low_miss = below[lows[-1] - 1] if lows else (0.0 if open_ends else below[0])
                high_miss = 1 - below[highs[0] - 1] if highs else (0.0 if open_ends else 1 - below[n - 1])
                assert (interval.low, interval.high) == (low, high), (n, q, level, open_ends)
                assert interval.level == min(1.0, max(0.0, 1 - low_miss - high_miss))
