"""Figures as text, written one way everywhere: the terminal's lines, the progress line, the LLM tab and
the report's tables and sentences all take their numbers, missing values and intervals from here.

- A missing figure (None, NaN, pandas' NA) is ``MISSING`` ("–"), never 0.
- ``shown(value, digits)``: fixed decimals (no "-0.0"); ``in_unit(value, metric)``: as its name's unit
  says (``_share`` a whole percent, ``_pct`` a signed percent, ``_ms`` one decimal, ``_s`` three,
  ``_tps`` one, else a whole number or one decimal); ``brief(value, metric)``: the headline's shorter
  form (tok/s whole from 100 up, seconds to about three significant digits); ``percent(share)``.
- ``interval(low, high, write)``: ``0.71–0.97``, each end written by ``write``, an end the values
  cannot place as ``OPEN`` ("?"); ``ci(level, low, high, write)``: ``90% CI 0.71–0.97``.
- ``apart_from(value, limit, digits)``: a value beside the limit it is judged against, with as many
  more digits as it takes not to read as the limit when it is not (0.9505 against 0.95, not 0.95).

Pure and stdlib-only; the SSE decoder never needs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from bench_tasks.figures import number

MISSING = "–"  # a missing figure, as every table and line shows it
OPEN = "?"  # an interval's end the values cannot place (a capacity step's p95 from fewer than 87 requests)
DIGITS = (("_ms", 1), ("_s", 3), ("_tps", 1))  # a metric's unit, as its name ends, and the decimals it shows


def shown(value, digits: int) -> str:
    """A figure as text with ``digits`` decimals (no "-0.0"); MISSING when it is missing."""
    value = number(value)
    if value is None:
        return MISSING
    return f"{0.0 if abs(value) < 0.5 * 10 ** -digits else value:.{digits}f}"


def percent(share) -> str:
    """A share as a whole percent: ``0.93`` -> ``93%``; MISSING when it is missing."""
    share = number(share)
    return MISSING if share is None else f"{share:.0%}"


def in_unit(value, metric: str) -> str:
    """A value in the unit its metric name says."""
    value = number(value)
    if value is None or metric.endswith("_share"):
        return percent(value)  # MISSING when missing
    if metric.endswith("_pct"):
        return f"{0.0 if abs(value) < 0.05 else value:+.1f}%"  # no "-0.0%"
    digits = next((digits for end, digits in DIGITS if metric.endswith(end)), 0 if value.is_integer() else 1)
    return shown(value, digits)


def brief(value, metric: str) -> str:
    """A headline number: tok/s whole from 100 up, seconds to about three significant digits, a share as
    a percent."""
    value = number(value)
    if value is None or metric.endswith("_share"):
        return percent(value)  # MISSING when missing
    if metric.endswith("_tps"):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"
    if metric.endswith("_s"):
        digits = 1 if abs(value) >= 10 else 2 if abs(value) >= 1 else 3 if abs(value) >= 0.01 else 4
        return f"{value:.{digits}f}"
    return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"


def interval(low, high, write: Callable[[float], str]) -> str:
    """``0.71–0.97``: each end by ``write``; an end the values cannot place (missing) is OPEN."""
    return "–".join(OPEN if number(end) is None else write(number(end)) for end in (low, high))


def ci(level, low, high, write: Callable[[float], str]) -> str:
    """``90% CI 0.71–0.97``: an interval at the level it reached."""
    return f"{number(level):.0%} CI {interval(low, high, write)}"


def apart_from(value: float, limit: float, digits: int, style: str = "f") -> str:
    """``value`` with ``digits`` (decimals for style ``f``, significant digits for ``g``), or as many more (up
    to five) as it takes not to read as ``limit`` when it is not the limit."""
    for more in range(digits, digits + 6):
        text = f"{value:.{more}{style}}"
        if value == limit or text != f"{limit:.{more}{style}}":
            break
    return text


def decimals(value: float, significant: int = 2) -> int:
    """The decimals that show ``value`` to ``significant`` digits (0.83 -> 2, 12.5 -> 0)."""
    if not value:
        return significant
    return max(0, significant - 1 - math.floor(math.log10(abs(value))))
