"""Goodness of fit for the tests (scipy is not a dependency): the Kolmogorov-Smirnov statistic of a sample
against a continuous distribution, its p-value, and the CDFs the open loop's gaps follow.

The p-value is the Kolmogorov distribution's tail at sqrt(n) D, with Stephens' small-sample correction
(sqrt(n) + 0.12 + 0.11 / sqrt(n)) D (Stephens 1970; Numerical Recipes' ``probks``): good to a few
percent from n = 4 on, far finer than the 0.001 the tests ask. The gamma CDF is the regularized lower
incomplete gamma function, by its series below a + 1 and its continued fraction above (Numerical
Recipes' ``gser`` and ``gcf``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable


def ks_statistic(sample: Iterable[float], cdf: Callable[[float], float]) -> float:
    """The largest distance between the sample's empirical CDF and ``cdf``."""
    ordered = sorted(sample)
    n = len(ordered)
    distance = 0.0
    for i, x in enumerate(ordered):
        f = cdf(x)
        distance = max(distance, (i + 1) / n - f, f - i / n)
    return distance


def kolmogorov_tail(lam: float) -> float:
    """P(K > lam) for Kolmogorov's K: 2 sum_{k>=1} (-1)^(k-1) exp(-2 k^2 lam^2)."""
    if lam < 0.2:
        return 1.0
    total, sign = 0.0, 1.0
    for k in range(1, 101):
        term = sign * math.exp(-2 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
        sign = -sign
    return min(1.0, max(0.0, 2 * total))


def ks_test(sample: list[float], cdf: Callable[[float], float]) -> tuple[float, float]:
    """(D, p-value) of the sample against ``cdf``."""
    n = len(sample)
    d = ks_statistic(sample, cdf)
    root = math.sqrt(n)
    return d, kolmogorov_tail((root + 0.12 + 0.11 / root) * d)


def exponential_cdf(rate: float) -> Callable[[float], float]:
    return lambda x: 0.0 if x <= 0 else -math.expm1(-rate * x)


def gamma_cdf(shape: float, scale: float) -> Callable[[float], float]:
    return lambda x: 0.0 if x <= 0 else lower_gamma_regularized(shape, x / scale)


def lower_gamma_regularized(a: float, x: float) -> float:
    """P(a, x) = gamma(a, x) / Gamma(a)."""
    if x <= 0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # the series converges fast here
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    # Lentz's continued fraction for Q(a, x) = 1 - P(a, x)
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)
