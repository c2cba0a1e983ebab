"""The result, in words: which setup is best at each headline figure, when the intervals say so.

Pure: ``headline.headline`` lines in, sentences out. Each setup's figure comes with its confidence
interval (``spread``: the median over runs by order statistics, a share by Clopper-Pearson). A setup
is named only when every competing setup's interval reaches ``LEVEL`` (90%) and the best one's
interval lies wholly on the better side of every other's (and its value, as the tables show it,
differs from every other's: otherwise naming it would contradict the tables). Where an interval is
below the level (the median of 3 runs: min–max, 75%) the sentence says so, and how many runs would
bring it to the level: "can't tell at n = 3; run with --runs 5". Where the intervals reach the level
and overlap it says that. Two intervals at 90% that do not overlap are a cautious test: the
difference they show is real with well over 90% confidence, so a figure among many that differ by
noise is seldom named. Setups without the figure do not compete; with fewer than two that have it
there is nothing to say.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.spread import LEVEL
from bench_tasks.formatting import brief, ci, percent
from bench_tasks.statistics import smallest_n

UNITS = {"tps": "tok/s", "s": "s"}


@dataclass(frozen=True)
class Figure:
    value: float  # what decides the best: the median, or for needles the share found
    low: float | None  # the interval (None: none)
    high: float | None
    level: float | None
    n: int
    quoted: str  # the value as the tables show it


def _unit(metric: str) -> str:
    return UNITS.get(metric.rsplit("_", 1)[-1], "")


def _end(value) -> float | None:
    return None if pd.isna(value) else float(value)


def candidates(lines: dict[str, dict], prefix: str, metric: str) -> dict[str, Figure]:
    """setup -> its Figure, for the setups that have the figure. Needles found are compared as shares
    (found / answered), with their share's interval."""
    if metric == "found":
        return {s: Figure(r["median"] / r["n"], _end(r["ci_low"]), _end(r["ci_high"]), _end(r["ci_level"]), r["n"],
                          f"{brief(r['median'], 'found')}/{r['n']}")
                for s, r in lines.items() if r["n"] and pd.notna(r["median"])}
    return {s: Figure(r[f"{prefix}median"], _end(r[f"{prefix}ci_low"]), _end(r[f"{prefix}ci_high"]),
                      _end(r[f"{prefix}ci_level"]), r["n"],
                      f"{brief(r[f'{prefix}median'], metric)} {_unit(metric)}")
            for s, r in lines.items() if pd.notna(r[f"{prefix}median"])}


def higher_is_better(metric: str) -> bool:
    """Rates and counts: more is better; durations (``_s``): less is."""
    return not metric.endswith("_s")


def runs_needed(level: float = LEVEL) -> int:
    """How many runs give the median's interval at ``level`` (90%: 5)."""
    return smallest_n(0.5, level)


def short(figures: dict[str, Figure]) -> list[str]:
    """The setups whose interval does not reach the level (or that have none)."""
    return [s for s, f in figures.items() if f.level is None or f.level < LEVEL - 1e-9]


def apart(best: Figure, other: Figure, higher: bool) -> bool:
    """The best's interval wholly on the better side of the other's."""
    return best.low > other.high if higher else best.high < other.low


def levels_text(figures: list[Figure]) -> str:
    """``94%``, or ``93–94%`` when the intervals reached different levels."""
    levels = sorted({round(f.level * 100) for f in figures})
    return f"{levels[0]}%" if len(levels) == 1 else f"{levels[0]}–{levels[-1]}%"


def sentence(words: str, figures: dict[str, Figure], higher: bool, keys: dict[str, str], metric: str) -> str:
    below = short(figures)
    if below:
        n = min(figures[s].n for s in below)
        which = "" if len(below) == len(figures) else f" for {', '.join(keys[s] for s in below)}"
        return f"{words}: can't tell at n = {n}{which}; run with --runs {runs_needed()}"
    best = (max if higher else min)(figures, key=lambda s: figures[s].value)
    others = [f for s, f in figures.items() if s != best]
    if not all(apart(figures[best], other, higher) for other in others):
        n = sorted({f.n for f in figures.values()})
        counted = f"n = {n[0]}" if len(n) == 1 else f"n = {n[0]}–{n[-1]}"
        return f"{words}: can't tell at {counted}: the {levels_text(list(figures.values()))} intervals overlap"
    if any(f.quoted == figures[best].quoted for f in others):
        # Apart by less than the figures show: naming a winner would contradict the tables.
        return f"{words}: no clear winner (equal as shown)"
    mine = figures[best]
    return (f"{words}: {keys[best]} ({best}), {mine.quoted} ({_interval(mine, metric)}; its interval clear of every "
            f"other setup's, at {levels_text(list(figures.values()))})")


def _interval(figure: Figure, metric: str) -> str:
    if metric == "found":
        return f"{ci(figure.level, figure.low, figure.high, percent)} found"
    return ci(figure.level, figure.low, figure.high, lambda end: brief(end, metric))


def winners(lines: pd.DataFrame, keys: dict[str, str]) -> list[str]:
    """One sentence per headline figure that at least two setups measured, in the tables' order."""
    sentences = []
    for _test, group in lines.groupby("test", sort=False):
        by_setup = {r["setup"]: r for r in group.to_dict("records")}
        first = next(iter(by_setup.values()))
        for words, prefix, metric in ((first["words"], "", first["metric"]),
                                      (first["second_words"], "second_", first["second"])):
            figures = candidates(by_setup, prefix, metric) if words else {}
            if len(figures) >= 2:
                sentences.append(sentence(words, figures, higher_is_better(metric), keys, metric))
    return sentences
