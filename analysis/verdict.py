"""The result, in words: which setup is best at each headline figure, when the runs say so clearly.

Pure: ``headline.headline`` lines in, sentences out. A setup wins a figure only when its whole
min–max range is better than every other setup's whole range (for a count, such as needles found,
its share found is higher than every other's) and its value, as the tables show it, differs from
every other's: otherwise the sentence says "no clear winner". Setups without the figure do not
compete; with fewer than two that have it there is nothing to say.
"""

from __future__ import annotations

import pandas as pd

from analysis.headline import value_text

UNITS = {"tps": "tok/s", "s": "s"}


def _unit(metric: str) -> str:
    return UNITS.get(metric.rsplit("_", 1)[-1], "")


def _bounds(line: dict, prefix: str) -> tuple[float, float, float]:
    """median, low, high of a figure; a single value (no range) is its own low and high."""
    median = line[f"{prefix}median"]
    low, high = line[f"{prefix}min"], line[f"{prefix}max"]
    return median, (median if pd.isna(low) else low), (median if pd.isna(high) else high)


def candidates(lines: dict[str, dict], prefix: str, metric: str) -> dict[str, tuple]:
    """setup -> (median, low, high, the value as quoted) for the setups that have the figure.

    Needles found are compared as shares (found / answered), one value each."""
    if metric == "found":
        return {s: (r["median"] / r["n"],) * 3 + (f"{value_text(r['median'], 'found')}/{r['n']}",)
                for s, r in lines.items() if r["n"] and pd.notna(r["median"])}
    return {s: (*_bounds(r, prefix), f"{value_text(r[f'{prefix}median'], metric)} {_unit(metric)}")
            for s, r in lines.items() if pd.notna(r[f"{prefix}median"])}


def higher_is_better(metric: str) -> bool:
    """Rates and counts: more is better; durations (``_s``): less is."""
    return not metric.endswith("_s")


def winner(figures: dict[str, tuple], higher: bool) -> str | None:
    """The setup whose whole range beats every other's, or None."""
    best = (max if higher else min)(figures, key=lambda s: figures[s][0])
    low, high = figures[best][1:3]
    others = [f for s, f in figures.items() if s != best]
    return best if all(low > o[2] if higher else high < o[1] for o in others) else None


def sentence(words: str, figures: dict[str, tuple], higher: bool, keys: dict[str, str]) -> str:
    best = winner(figures, higher)
    if best is not None and any(f[3] == figures[best][3] for s, f in figures.items() if s != best):
        # Apart by less than the figures show: naming a winner would contradict the tables.
        return f"{words}: no clear winner (equal as shown)"
    if best is None:
        ranged = any(f[1] != f[2] for f in figures.values())
        return f"{words}: no clear winner ({'the ranges overlap' if ranged else 'a tie'})"
    return f"{words}: {keys[best]} ({best}), {figures[best][3]}"


def verdicts(lines: pd.DataFrame, keys: dict[str, str]) -> list[str]:
    """One sentence per headline figure that at least two setups measured, in the tables' order."""
    sentences = []
    for _test, group in lines.groupby("test", sort=False):
        by_setup = {r["setup"]: r for r in group.to_dict("records")}
        first = next(iter(by_setup.values()))
        for words, prefix, metric in ((first["words"], "", first["metric"]),
                                      (first["second_words"], "second_", first["second"])):
            figures = candidates(by_setup, prefix, metric) if words else {}
            if len(figures) >= 2:
                sentences.append(sentence(words, figures, higher_is_better(metric), keys))
    return sentences
