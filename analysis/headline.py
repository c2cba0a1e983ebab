"""The study's three tables: one row per test, one column per setup, the headline figures only.

Pure: the long frame of ``summary.summary`` / ``summary.comparison`` in, DataFrames out. Nothing
here computes a figure: each cell quotes figures of the long frame (``chat``, ``prompt``,
``agent``, ``burst`` and ``needle`` tables), so the headline and the detail tables cannot disagree.

- ``one_at_a_time``: chat decode tok/s; chat first token s; per fresh size ``NK prompt tok/s
  (first token s)``; agent turn first token s; agent turn decode tok/s.
- ``at_once``: per burst size ``N at once: total tok/s (slowest first token s)``, the slowest
  being the round's p95 first token (``ttft_p95_s``), both medians over rounds.
- ``needles``: per size ``found / total`` over the answered requests, and the answer time range.

Each line carries its figures' intervals (``ci_low``, ``ci_high``, ``ci_level``, ``ci_method`` and
``second_ci_*`` for the bracketed figure), as the long frame has them; for ``found`` the interval is
its share's (``found_share``: Clopper-Pearson), so it is a share, not a count. The cell shows the
median; the interval and its level are one click (or a hover) away (``detail_text``).
"""

from __future__ import annotations

import pandas as pd

from analysis.spread import CI_COLUMNS, NAN, NO_INTERVAL
from bench_tasks.formatting import MISSING, brief, ci, interval, percent

HEADLINE_TITLES = {"one_at_a_time": "One person at a time", "at_once": "N at once", "needles": "Needles"}
TEST_COLUMNS = ["table", "test", "source", "row", "metric", "second", "words", "second_words"]
SECOND_NAMES = {"ttft_s": "first token s", "ttft_p95_s": "slowest first token s"}
FIGURE_COLUMNS = ["median", "min", "max", "n", *CI_COLUMNS]
SECOND_COLUMNS = ["median", "min", "max", *CI_COLUMNS]
HEADLINE_COLUMNS = ["table", "test", "setup", "metric", *FIGURE_COLUMNS, "second",
                    *(f"second_{c}" for c in SECOND_COLUMNS), "words", "second_words"]
INTERVAL_OF = {"found": "found_share"}  # a count whose interval is its share's


def _rows(long: pd.DataFrame, table: str) -> list[str]:
    return list(dict.fromkeys(long.loc[long["table"] == table, "row"]))


def _size(row: str, prefix: str) -> str:
    """``prompt-16k`` -> ``16K``; a size that is not whole K stays in tokens (``prompt-1500`` -> ``1500``)."""
    return row.removeprefix(prefix).split(" ", 1)[0].upper()


def tests(long: pd.DataFrame) -> pd.DataFrame:
    """The headline rows the long frame can fill, in the study's order (TEST_COLUMNS).

    ``words`` names the figure in the result's sentences (empty: no winner is named, as for the
    answer time), ``second_words`` the bracketed figure where it gets a sentence too.
    """
    found = []
    if "chat" in _rows(long, "chat"):
        found += [("one_at_a_time", "chat decode tok/s", "chat", "chat", "decode_tps", "",
                   "fastest chat decode for one user", ""),
                  ("one_at_a_time", "chat first token s", "chat", "chat", "ttft_s", "",
                   "quickest chat first token", "")]
    for row in _rows(long, "prompt"):
        size = _size(row, "prompt-")
        found.append(("one_at_a_time", f"{size} prompt tok/s (first token s)", "prompt", row, "prompt_tps",
                      "ttft_s", f"fastest {size} prompt reading", ""))
    if "agent" in _rows(long, "agent"):
        found += [("one_at_a_time", "agent turn first token s", "agent", "agent", "ttft_s", "",
                   "quickest agent turn first token", ""),
                  ("one_at_a_time", "agent turn decode tok/s", "agent", "agent", "decode_tps", "",
                   "fastest agent turn decode", "")]
    for row in _rows(long, "burst"):
        n = row.removeprefix("burst-")
        found.append(("at_once", f"{n} at once: total tok/s (slowest first token s)", "burst", row, "total_tps",
                      "ttft_p95_s", f"most total tok/s with {n} at once",
                      f"quickest slowest first token with {n} at once"))
    for row in _rows(long, "needle"):
        if row.endswith(" all depths"):
            size = _size(row, "needle-")
            found += [("needles", f"{size} needle: found / total", "needle", row, "found", "",
                       f"most needles found at {size}", ""),
                      ("needles", f"{size} needle: answer time s", "needle", row, "e2e_s", "", "", "")]
    return pd.DataFrame(found, columns=TEST_COLUMNS)


def headline(long: pd.DataFrame, setups: list[str]) -> pd.DataFrame:
    """One line per test and setup (HEADLINE_COLUMNS): the quoted figure and its bracketed one.

    A setup that lacks a figure has it missing (NaN, n = 0), never 0.
    """
    by_key = {(r["setup"], r["table"], r["row"], r["metric"]): r for r in long.to_dict("records")}
    empty = {"median": NAN, "min": NAN, "max": NAN, "n": 0, **NO_INTERVAL}
    lines = []
    for test in tests(long).to_dict("records"):
        for setup in setups:
            main = by_key.get((setup, test["source"], test["row"], test["metric"]), empty)
            interval = by_key.get((setup, test["source"], test["row"], INTERVAL_OF.get(test["metric"], test["metric"])),
                                  empty)
            second = by_key.get((setup, test["source"], test["row"], test["second"]), empty)
            lines.append({**{k: test[k] for k in ("table", "test", "metric", "second", "words", "second_words")},
                          "setup": setup, **{k: main[k] for k in ("median", "min", "max", "n")},
                          **{k: interval[k] for k in CI_COLUMNS},
                          **{f"second_{k}": second[k] for k in SECOND_COLUMNS}})
    return pd.DataFrame(lines, columns=HEADLINE_COLUMNS)


def _range(low: float, high: float, metric: str) -> str:
    return interval(low, high, lambda end: brief(end, metric))


def cell_text(line: dict) -> str:
    """What the cell shows: the median (and the bracketed figure's), found / total, or the answer time range."""
    if line["metric"] == "found":
        return f"{brief(line['median'], 'found')}/{line['n']}" if line["n"] else MISSING
    if line["metric"] == "e2e_s":
        return _range(line["min"], line["max"], "e2e_s") if line["n"] else MISSING
    text = brief(line["median"], line["metric"])
    if line["second"] and text != MISSING:
        text += f" ({brief(line['second_median'], line['second'])})"
    return text


def interval_text(line: dict, metric: str, prefix: str = "") -> str:
    """``75% CI 30.0–50.0``, the interval of a line's figure at the level it reached; empty when it has none."""
    level = line[f"{prefix}ci_level"]
    if pd.isna(level):
        return ""
    write = percent if metric.endswith("_share") or metric == "found" else (lambda end: brief(end, metric))
    return ci(level, line[f"{prefix}ci_low"], line[f"{prefix}ci_high"], write)


def detail_text(line: dict) -> str:
    """What is one click (or a hover) away: the interval at its level and how it was made, the range the
    cell's medians were taken over, and n."""
    if not line["n"]:
        return "no value"
    if line["metric"] == "found":
        share = interval_text(line, "found")
        return (f"found in {brief(line['median'], 'found')} of {line['n']} answered requests"
                + (f"; the share found: {share} ({line['ci_method']})" if share else ""))
    interval = interval_text(line, line["metric"])
    how = f"{interval} ({_method(line)})" if interval else "one value, no interval"
    if line["metric"] == "e2e_s":
        return f"median {brief(line['median'], 'e2e_s')}, {how}, {line['n']} answers"
    text = f"{how}; range {_range(line['min'], line['max'], line['metric'])}, n={line['n']}"
    if line["second"] and pd.notna(line["second_median"]):
        second = interval_text(line, line["second"], "second_")
        text += (f"; {SECOND_NAMES[line['second']]} {second or 'no interval'}, range "
                 f"{_range(line['second_min'], line['second_max'], line['second'])}")
    return text


def _method(line: dict) -> str:
    """How the interval was made, and what it is at a small n: ``order statistics: min–max of 3``."""
    if line["ci_method"] == "order statistics" and pd.notna(line["ci_low"]) and (
            line["ci_low"], line["ci_high"]) == (line["min"], line["max"]):
        return f"order statistics: the min–max of {line['n']}"
    return line["ci_method"]


def cells(lines: pd.DataFrame, keys: dict[str, str], text=cell_text) -> pd.DataFrame:
    """One table's lines as strings: ``test``, then a column per setup headed by its key."""
    tests_in_order = list(dict.fromkeys(lines["test"]))
    out = pd.DataFrame({"test": tests_in_order})
    for setup, key in keys.items():
        mine = {line["test"]: line for line in lines[lines["setup"] == setup].to_dict("records")}
        out[key] = [text(mine[test]) if test in mine else MISSING for test in tests_in_order]
    return out
