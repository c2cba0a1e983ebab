"""The small statistics every figure is made with: a percentile, a median, and the confidence
intervals that say how sure a figure is, honest at small n. Pure and stdlib-only: the Recorder, the
phases' figures, the SLO's verdict, the capacity search and the report's tables all take them from here.

``quantile(sorted_values, q)``: the tables' one percentile rule, linear interpolation between the two
nearest values (numpy's and pandas' default: p95 of [1, 2] is 1.95). ``median(values)``: the same rule
at 0.5 over the known values (None and NaN left out), None when there are none.

``quantile_interval(values, q)``: where the true q-quantile (the median, a p95) of the distribution
the values came from lies, between two of the sorted values (order statistics; no assumption about
the distribution). Among n values, how many fall below the true q-quantile is binomial(n, q), so
the chance that the r-th smallest value is above it, or the s-th smallest below it, is a binomial
tail, known exactly. The interval is equal-tailed: each end misses on its side with a chance of at
most (1 - level)/2, so each end is also a one-sided bound at (1 + level)/2, which is what a verdict
on one side of a limit needs; of such pairs it is the narrowest. Its coverage, ``level``, is what
the ranks achieve (at least the level asked for; more at small n, as the binomial moves in steps).

When n is too small for an end to reach its share (the median's ends need n >= 5 at 90%, a p95's
upper end n >= 59), there are two honest answers, and the caller picks:

- ``open_ends=False`` (the default, for a table): that end falls back to the extreme value and
  ``level`` says the lower coverage achieved: at n = 3 the median's interval is (min, max) at 0.75.
- ``open_ends=True`` (for a verdict): that end is None, unknown, and ``level`` is the coverage of
  what is left (at least the level asked for): a p95 from 20 values has a lower end and no upper.

With ties (equal values) the coverage is at least ``level`` (the formulas are exact for values
without ties). ``share_interval(k, n)``: Clopper-Pearson's exact interval for a share of k in n.
``smallest_n(q, level)``: how many values it takes for both ends of a q-quantile's interval to be
placed at the level (the median at 90%: 5).

``window_quantile_interval(values, q)``: the same question for values that are NOT independent:
a capacity step's requests in the order they were asked, where one busy period of the server
delays several questions in a row. The order-statistic interval then claims too much (in the
classroom's queueing model, near the knee, a 90% interval held the class's long-run p95 in about
73% of 360-s windows). This one is batch means on the count below the estimate (sectioning, as
simulation-output analysis does it): the values are cut into ``BATCHES`` consecutive batches, the
share of each batch at or below the window's own q-quantile estimate says how much that count
really varies (clustered delays make the batches disagree), and the interval is the set of values
whose share of the window lies within Student's t (``BATCHES`` - 1 degrees of freedom) standard
errors of q: the order-statistic ranks, moved apart as far as the batches say, never narrower
than the order-statistic interval (nor than the binomial spread when the batches happen to
agree). Why on the count and not on each batch's own percentile: a batch's p95 from 20 to 60
values is biased and skewed (the t interval on batch percentiles held the truth in 65-87% of the
model's windows), while a batch's share is a mean, for which batch means are made; and the ends
stay values of the window. It is approximate, not exact: ``level`` is the level asked for, and
``tests/benchmarks/window_coverage.py`` measures what it achieves on the model.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

ORDER_STATISTICS, CLOPPER_PEARSON, BATCH_MEANS = "order statistics", "Clopper-Pearson", "batch means"
BATCHES = 5  # consecutive batches of a window (chosen on the model: see window_quantile_interval)
_SLACK = 1e-12  # binomial tails computed in floating point: a tail of exactly (1 - level)/2 counts as within it
_NEGLIGIBLE_LOG = -760.0  # exp() of this is 0.0 in double precision (the smallest double is about e^-745)


@dataclass(frozen=True)
class Interval:
    low: float | None  # None: the values cannot place this end at the level (open_ends=True)
    high: float | None
    level: float  # the coverage achieved: the chance, before sampling, that the interval holds the truth
    method: str


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on a sorted list."""
    position = (len(sorted_values) - 1) * q
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def median(values) -> float | None:
    """The median of the known values (None and NaN left out); None when none is known."""
    known = sorted(v for v in values if v is not None and v == v)
    return quantile(known, 0.5) if known else None


def quantile_interval(values, q: float, level: float = 0.90, open_ends: bool = False) -> Interval | None:
    """The order-statistic interval for the q-quantile of ``values`` (None when there is none)."""
    _check(level)
    if not 0 <= q <= 1:
        raise ValueError(f"q is a quantile from 0 to 1, got {q}")
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if n == 0:
        return None
    below = _binomial_cdf(n, q)  # below[i] = P(B <= i): at most i values under the true quantile
    share = (1 - level) / 2
    # The r-th smallest misses above the truth when fewer than r values are under it: P(B <= r - 1); the
    # s-th smallest misses below it when s or more are: P(B >= s). Both tails are monotone in the rank, so
    # the ranks within the share are found by bisection: r = 1..top_low, and s = bottom_high..n.
    top_low = bisect.bisect_right(below, share + _SLACK, 0, n)  # 0: no rank places the low end
    bottom_high = 1 + bisect.bisect_left(range(1, n + 1), True, key=lambda s: 1 - below[s - 1] <= share + _SLACK)
    placed_low, placed_high = top_low >= 1, bottom_high <= n
    r, low_miss = (top_low, below[top_low - 1]) if placed_low else (1, below[0])
    s, high_miss = (bottom_high, 1 - below[bottom_high - 1]) if placed_high else (n, 1 - below[n - 1])
    low, high = ordered[r - 1], ordered[s - 1]
    if open_ends:
        low, low_miss = (low, low_miss) if placed_low else (None, 0.0)
        high, high_miss = (high, high_miss) if placed_high else (None, 0.0)
    return Interval(low, high, _clip(1 - low_miss - high_miss), ORDER_STATISTICS)


def median_interval(values, level: float = 0.90, open_ends: bool = False) -> Interval | None:
    return quantile_interval(values, 0.5, level, open_ends)


def smallest_n(q: float = 0.5, level: float = 0.90) -> int:
    """The fewest values whose q-quantile interval has both ends placed at ``level`` (the median at 90%: 5)."""
    _check(level)
    n = 1
    while True:
        interval = quantile_interval(range(n), q, level, open_ends=True)
        if interval.low is not None and interval.high is not None:
            return n
        n += 1


def window_quantile_interval(values, q: float, level: float = 0.90, batches: int = BATCHES) -> Interval | None:
    """The q-quantile's interval from values in the order they were taken, honest when neighbours are
    alike (batch means on the count below the estimate; see the module's notes). An end the values
    cannot place is None (open), as with ``open_ends=True``; ``level`` is the level asked for."""
    _check(level)
    ordered_in_time = [float(v) for v in values]
    n = len(ordered_in_time)
    independent = quantile_interval(ordered_in_time, q, level, open_ends=True)
    if n < 2 * batches:  # too few to tell batches apart: the order statistics, as they are
        return independent
    ordered = sorted(ordered_in_time)
    estimate = quantile(ordered, q)  # the window's own estimate, as the tables and the verdict take it
    shares = []
    for b in range(batches):
        batch = ordered_in_time[b * n // batches:(b + 1) * n // batches]
        shares.append(sum(v <= estimate for v in batch) / len(batch))
    mean = sum(shares) / batches
    spread = math.sqrt(sum((s - mean) ** 2 for s in shares) / (batches - 1) / batches)
    error = max(spread, math.sqrt(q * (1 - q) / n)) * t_quantile((1 + level) / 2, batches - 1)
    # The values whose share of the window, F(x), lies within q -/+ error: ranks r..s (1-based).
    r = math.ceil(n * (q - error) - _SLACK)
    s = math.floor(n * (q + error) + _SLACK) + 1
    low = ordered[r - 1] if r >= 1 else None
    high = ordered[s - 1] if s <= n else None
    low = None if low is None or independent.low is None else min(low, independent.low)
    high = None if high is None or independent.high is None else max(high, independent.high)
    return Interval(low, high, level, BATCH_MEANS)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (p > 0.5, whole degrees of freedom), by bisection on its exact distribution."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"need 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if _t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0: the closed forms for whole degrees of freedom (Abramowitz and Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term = total = 1.0
        for k in range(3, df - 1, 2):
            term *= (k - 1) / k * cos2
            total += term
        within = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
    else:  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term = total = 1.0
        for k in range(2, df - 1, 2):
            term *= (k - 1) / k * cos2
            total += term
        within = math.sin(theta) * total
    return (1 + within) / 2


def share_interval(k: int, n: int, level: float = 0.90) -> Interval | None:
    """Clopper-Pearson: the shares p for which k in n is not in either (1 - level)/2 tail of
    binomial(n, p). Exact (coverage at least ``level`` whatever p is); None when n = 0."""
    _check(level)
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None
    share = (1 - level) / 2
    # Lower end: the p at which k or more in n has chance `share`; P(X >= k) grows with p.
    low = 0.0 if k == 0 else _solve(lambda p: 1 - _binomial_cdf_at(n, p, k - 1) - share)
    # Upper end: the p at which k or fewer has chance `share`; P(X <= k) falls as p grows.
    high = 1.0 if k == n else _solve(lambda p: share - _binomial_cdf_at(n, p, k))
    misses = (share if k > 0 else 0.0) + (share if k < n else 0.0)
    return Interval(low, high, 1 - misses, CLOPPER_PEARSON)


def _check(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level is a coverage between 0 and 1, got {level}")


def _clip(level: float) -> float:
    return min(1.0, max(0.0, level))


def _log_pmf(n: int, p: float, i: int) -> float:
    if p <= 0.0 or p >= 1.0:  # a certain count: i == 0 (p = 0) or i == n (p = 1)
        return 0.0 if i == (0 if p <= 0.0 else n) else -math.inf
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p))


def _binomial_cdf(n: int, p: float) -> list[float]:
    """[P(B <= i) for i in 0..n], B ~ binomial(n, p), summed in order over the terms that are not 0.0."""
    first, last = _nonzero_terms(n, p)
    total, cdf = 0.0, [0.0] * first
    for i in range(first, last + 1):
        total += math.exp(_log_pmf(n, p, i))
        cdf.append(min(total, 1.0))
    cdf.extend([min(total, 1.0)] * (n - last))
    return cdf


def _binomial_cdf_at(n: int, p: float, k: int) -> float:
    first, last = _nonzero_terms(n, p)
    return min(1.0, sum((math.exp(_log_pmf(n, p, i)) for i in range(first, min(k, last) + 1)), 0.0))  # 0.0 if none


def _nonzero_terms(n: int, p: float) -> tuple[int, int]:
    """The first and last i whose term exp(_log_pmf) can be more than 0.0. The terms rise to the mode and
    fall after it, and below e^-745 a double is 0.0: a term under e^-760 adds exactly nothing to a sum, so
    leaving those out gives the very sums of all n + 1 terms (at n = 100,000 and q = 0.5, 12% of them)."""
    if p <= 0.0 or p >= 1.0:
        return 0, n
    mode = min(n, math.floor((n + 1) * p))
    # The first i of 0..mode at or above the floor (the terms rise up to the mode), by bisection.
    low, high = 0, mode
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if _log_pmf(n, p, middle) < _NEGLIGIBLE_LOG else (low, middle)
    first = low
    # The last i of mode..n at or above the floor (the terms fall after the mode).
    low, high = mode, n
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (low, middle - 1) if _log_pmf(n, p, middle) < _NEGLIGIBLE_LOG else (middle, high)
    return first, low


def _solve(rising) -> float:
    """The p in [0, 1] where the rising function crosses 0, by bisection (to float precision)."""
    low, high = 0.0, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if rising(middle) < 0 else (low, middle)
    return (low + high) / 2
