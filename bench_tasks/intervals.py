"""Confidence intervals that say how sure a figure is, honest at small n. Stdlib only.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ORDER_STATISTICS, CLOPPER_PEARSON = "order statistics", "Clopper-Pearson"
_SLACK = 1e-12  # binomial tails computed in floating point: a tail of exactly (1 - level)/2 counts as within it


@dataclass(frozen=True)
class Interval:
    low: float | None  # None: the values cannot place this end at the level (open_ends=True)
    high: float | None
    level: float  # the coverage achieved: the chance, before sampling, that the interval holds the truth
    method: str

    def text(self, digits: int = 3) -> str:
        """``0.712–0.968``, with an open end as ``?``."""
        return "–".join("?" if end is None else f"{end:.{digits}g}" for end in (self.low, self.high))


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
    # The r-th smallest misses above the truth when fewer than r values are under it: P(B <= r - 1).
    lows = [r for r in range(1, n + 1) if below[r - 1] <= share + _SLACK]
    # The s-th smallest misses below the truth when s or more values are under it: P(B >= s).
    highs = [s for s in range(1, n + 1) if 1 - below[s - 1] <= share + _SLACK]
    r, low_miss = (lows[-1], below[lows[-1] - 1]) if lows else (1, below[0])
    s, high_miss = (highs[0], 1 - below[highs[0] - 1]) if highs else (n, 1 - below[n - 1])
    low, high = ordered[r - 1], ordered[s - 1]
    if open_ends:
        low, low_miss = (low, low_miss) if lows else (None, 0.0)
        high, high_miss = (high, high_miss) if highs else (None, 0.0)
    return Interval(low, high, _clip(1 - low_miss - high_miss), ORDER_STATISTICS)


def median_interval(values, level: float = 0.90, open_ends: bool = False) -> Interval | None:
    return quantile_interval(values, 0.5, level, open_ends)


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
    """[P(B <= i) for i in 0..n], B ~ binomial(n, p)."""
    total, cdf = 0.0, []
    for i in range(n + 1):
        total += math.exp(_log_pmf(n, p, i))
        cdf.append(min(total, 1.0))
    return cdf


def _binomial_cdf_at(n: int, p: float, k: int) -> float:
    return min(1.0, sum(math.exp(_log_pmf(n, p, i)) for i in range(k + 1)))


def _solve(rising) -> float:
    """The p in [0, 1] where the rising function crosses 0, by bisection (to float precision)."""
    low, high = 0.0, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if rising(middle) < 0 else (low, middle)
    return (low + high) / 2
