"""The open loop's schedule: its gaps follow the process asked for (a Kolmogorov-Smirnov test over 2,000
sends), its rate and coefficient of variation are within their sampling error, constant times are exact,
and the same seed gives the same times."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from bench_tasks.arrivals import CONSTANT, GAMMA, POISSON, Arrivals, Schedule, given, parse
from tests.goodness import exponential_cdf, gamma_cdf, ks_test, lower_gamma_regularized

SENDS = 2000
SEEDS = (0, 1, 2, 3, 4)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times], times)]


def test_the_three_processes_parse_and_say_themselves():
    assert parse("constant") == Arrivals(CONSTANT, 0.0)
    assert parse(" Poisson ") == Arrivals(POISSON, 1.0)
    assert parse("gamma:2") == Arrivals(GAMMA, 2.0)
    assert [parse(t).text for t in ("constant", "poisson", "gamma:0.5")] == ["constant", "poisson", "gamma:0.5"]
    for wrong in ("gamma", "gamma:0", "gamma:-1", "gamma:x", "uniform", "poisson:2", "gamma:inf"):
        with pytest.raises(ValueError, match="constant, poisson or gamma:CV"):
            parse(wrong)


def test_goodness_of_fit_is_exact_where_it_can_be_checked():
    # P(1, x) is the exponential's CDF, P(a, x) for whole a a Poisson tail: the incomplete gamma on both branches.
    for x in (0.1, 0.9, 2.5, 7.0):
        assert lower_gamma_regularized(1.0, x) == pytest.approx(-math.expm1(-x), rel=1e-12)
        poisson_tail = 1 - sum(math.exp(-x) * x ** k / math.factorial(k) for k in range(3))
        assert lower_gamma_regularized(3.0, x) == pytest.approx(poisson_tail, rel=1e-10)
    rng = random.Random(7)
    sample = [rng.random() for _ in range(1000)]
    _d, p = ks_test(sample, lambda x: min(max(x, 0.0), 1.0))
    assert p > 0.01  # a uniform sample against its own CDF
    _d, p = ks_test([x ** 0.7 for x in sample], lambda x: min(max(x, 0.0), 1.0))
    assert p < 1e-4  # and a distorted one is caught


@pytest.mark.parametrize("seed", SEEDS)
def test_poisson_gaps_are_exponential(seed):
    rate = 7.5
    times = list(Schedule(rate, parse("poisson"), seed, requests=SENDS))
    assert len(times) == SENDS
    _d, p = ks_test(gaps(times), exponential_cdf(rate))
    assert p > 0.001
    _d, wrong = ks_test(gaps(times), exponential_cdf(rate * 1.2))  # the test has the power to tell a wrong rate
    assert wrong < 0.001


@pytest.mark.parametrize(("cv", "seed"), list(itertools.product((0.5, 2.0, 3.0), SEEDS)))
def test_gamma_gaps_follow_their_gamma(cv, seed):
    rate = 4.0
    times = list(Schedule(rate, parse(f"gamma:{cv}"), seed, requests=SENDS))
    shape = 1 / cv ** 2
    _d, p = ks_test(gaps(times), gamma_cdf(shape, 1 / (rate * shape)))
    assert p > 0.001
    _d, poisson = ks_test(gaps(times), exponential_cdf(rate))  # and are not Poisson's
    assert poisson < 0.001


@pytest.mark.parametrize("arrivals", ["poisson", "gamma:0.5", "gamma:2"])
def test_rate_and_variation_are_within_their_sampling_error(arrivals):
    rate, process = 12.0, parse(arrivals)
    found = gaps(list(Schedule(rate, process, "seed", requests=SENDS)))
    mean, sd = statistics.fmean(found), statistics.stdev(found)
    cv = process.cv
    assert abs(mean - 1 / rate) < 4 * (cv / rate) / math.sqrt(SENDS)
    kurtosis = 3 + 6 * cv ** 2  # a gamma's (shape 1 / cv^2)
    cv_error = cv * math.sqrt((kurtosis - 1) / (4 * SENDS) + cv ** 2 / SENDS)
    assert abs(sd / mean - cv) < 4 * cv_error


def test_constant_times_are_exact_even_far_into_a_long_run():
    times = Schedule(3.0, parse("constant"), requests=1_000_000)
    for k, due in enumerate(times, start=1):
        if k in (1, 2, 3, 999_999, 1_000_000):
            assert due == k / 3.0
    assert k == 1_000_000


def test_the_same_seed_gives_the_same_times_and_another_seed_others():
    one = list(Schedule(5.0, parse("gamma:2"), 42, requests=100))
    assert one == list(Schedule(5.0, parse("gamma:2"), 42, requests=100))
    assert one != list(Schedule(5.0, parse("gamma:2"), 43, requests=100))
    # Drawn lazily: the first 100 of an endless schedule are the same 100.
    assert one == list(itertools.islice(Schedule(5.0, parse("gamma:2"), 42), 100))


def test_a_schedule_ends_at_its_duration_or_its_requests():
    timed = list(Schedule(10.0, parse("constant"), duration_s=2.0))
    assert timed[-1] < 2.0 and len(timed) == 19  # 0.1 ... 1.9: the send due at 2.0 is outside
    assert len(list(Schedule(10.0, parse("poisson"), requests=7))) == 7
    for wrong in ({"duration_s": 0}, {"requests": 0}):
        with pytest.raises(ValueError):
            Schedule(1.0, **wrong)
    with pytest.raises(ValueError):
        Schedule(0.0)


def test_a_trace_keeps_its_own_times_and_may_not_go_back():
    assert list(given([0.0, 0.5, 0.5, 3.25])) == [0.0, 0.5, 0.5, 3.25]
    with pytest.raises(ValueError, match="earlier"):
        list(given([1.0, 0.5]))
    with pytest.raises(ValueError, match="not a number"):
        list(given([1.0, float("nan")]))
