"""The capacity search from its records: each class size's judged window, and the largest class that met the SLO.

The verdict is ``bench_tasks.slo.judge``, the very function the search judged each step with while
it ran, applied to the same records (the phases ``class-N``; ``settle-N`` requests are never
judged), and the capacity is ``bench_tasks.capacity.policy.conclude`` over those verdicts. Each window in
the records is final: the search held on to a window it could not tell until ``--max-step-s`` and
then decided it on its point estimates, so a window whose intervals still cannot tell is decided
so here too (``decided_on``). Pure: records and an SLO in, DataFrames and sentences out.
"""

from __future__ import annotations

import re

import pandas as pd

from analysis.records import measured
from analysis.spread import long_frame, long_rows, single
from bench_tasks import slo as slos
from bench_tasks.capacity.lines import figures_text
from bench_tasks.capacity.policy import conclude
from bench_tasks.capacity.steps import SCENARIO
from bench_tasks.formatting import MISSING, interval, percent, shown

WINDOW = re.compile(r"class-(\d+)(?:-\d+)?")  # class-N, or class-N-2: the class again after a refused window
STEP_COLUMNS = ["phase", "students", "step", "requests", "ok", "failed", "client_saturated", "overdue", "ttft_p50_s",
                "ttft_p95_s", "per_user_decode_tps", "goodput_share", "meets_slo", "outcome", "decided_on", "missed"]
TEXT_COLUMNS = ("phase", "ok", "outcome", "decided_on", "missed", "straddling")  # not figures: not in the long table
PER_REQUEST = ("students", "step", "requests", "failed", "client_saturated", "overdue", "goodput_share", "meets_slo")


def steps(records: pd.DataFrame, slo: slos.Slo, overdue: dict[str, int] | None = None) -> pd.DataFrame:
    """One row per judged window, by class size: its figures (``slo.judge``'s keys, the goals' own
    figures and their intervals included), ``step`` (the order the search ran it in), ``meets_slo``
    (1 met, 0 missed, missing when the client was saturated), ``decided_on`` and ``missed`` (the
    goals it broke, in words), and ``overdue`` (answers the search judged the window without, by
    phase as ``load.load_overdue`` reads them; missing where it is not known)."""
    classroom = measured(records)
    classroom = classroom[classroom["scenario"] == SCENARIO]
    windows = [(phase, int(match[1]), group) for phase, group in classroom.groupby("phase", sort=False)
               if (match := WINDOW.fullmatch(phase))]
    order = sorted(windows, key=lambda w: pd.to_numeric(w[2]["t_start"], errors="coerce").min())
    judged_columns = list(dict.fromkeys(["scenario", "ok", "flags", "ttft_s", "decode_tps",
                                         *(goal.column for goal in slo.goals)]))  # all judge reads
    rows = []
    for number, (phase, students, group) in enumerate(order, start=1):
        figures = slos.judge(slo, group[judged_columns].to_dict("records"), final=True)
        meets = {slos.MEETS: 1.0, slos.MISSES: 0.0}.get(figures["outcome"], float("nan"))
        rows.append({**figures, "phase": phase, "students": students, "step": number, "meets_slo": meets,
                     "missed": "; ".join(figures["missed"]), "overdue": (overdue or {}).get(phase)})
    goal_columns = [c for g in slo.goals for c in (g.figure, g.low, g.high, g.level)]
    columns = STEP_COLUMNS + list(dict.fromkeys(c for c in goal_columns if c not in STEP_COLUMNS))
    return pd.DataFrame(rows, columns=columns).sort_values(["students", "step"], ignore_index=True)


def result(steps: pd.DataFrame) -> tuple[int, int | None, str]:
    """(capacity, the class that bounds it, why) as the search concluded: see bench_tasks.capacity.policy.conclude
    (a class run twice counts by its later window)."""
    return conclude(dict(zip(steps["students"].astype(int), steps["outcome"])))


def capacity_table(steps: pd.DataFrame, slo: slos.Slo | None = None) -> pd.DataFrame:
    """The steps in long form (table ``capacity``): one value per figure (see ``_n`` for its n); each goal's
    figure with the interval its verdict was decided on (``slo.METHOD``; an end it could not place empty)."""
    metrics = [c for c in steps.columns if c not in TEXT_COLUMNS]
    rows = []
    for step in steps.to_dict("records"):
        figures = {m: single(slos.number(step[m]), _n(step, m)) for m in metrics}
        for goal in slo.goals if slo is not None else ():
            level = slos.number(step[goal.level])
            if level is not None and slos.number(step[goal.figure]) is not None:
                figures[goal.figure] |= {"ci_low": _or_nan(step[goal.low]), "ci_high": _or_nan(step[goal.high]),
                                         "ci_level": level, "ci_method": slos.METHOD}
        rows += long_rows("capacity", step["phase"], figures)
    return long_frame(rows)


def _or_nan(value) -> float:
    number = slos.number(value)
    return float("nan") if number is None else number


def _n(step: dict, metric: str) -> int:
    """What a figure counts over: the window's requests, or for a latency figure its successful
    requests (0 when the figure is missing: withheld for a saturated client, or nothing succeeded)."""
    if metric in PER_REQUEST:
        return int(step["requests"])
    return int(step["ok"]) if slos.number(step[metric]) is not None else 0


def result_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Table ``capacity_result``: ``capacity_students`` (the largest class that met the SLO) and
    ``bound_students`` (the smallest that did not, or was not judged); n = judged windows."""
    if steps.empty:
        return long_frame([])
    capacity, bound, _why = result(steps)
    return long_frame(long_rows("capacity_result", "search", {
        "capacity_students": single(capacity, len(steps)), "bound_students": single(bound, len(steps))}))


def tables(records: pd.DataFrame, slo: slos.Slo | None, overdue: dict[str, int] | None = None) -> pd.DataFrame:
    """Both tables, or none when the records hold no judged window or the SLO is unknown."""
    judged = steps(records, slo, overdue) if slo is not None else pd.DataFrame()
    if judged.empty:
        return long_frame([])
    return pd.concat([capacity_table(judged, slo), result_table(judged)], ignore_index=True)


def conclusion(steps: pd.DataFrame, slo: slos.Slo) -> str:
    """The result in one sentence, with what bounds it, and which verdicts were decided on point estimates."""
    if steps.empty:
        return "No step of the capacity search was judged."
    capacity, bound, why = result(steps)
    head = f"Largest class that met the SLO ({slo.text()})"
    met = _deciding_figures(steps, slo, capacity)
    if why == "untested":
        return (f"{head}: {capacity} students{met}, the largest class tried; the server may take more (raise "
                f"--max-students).{_on_point_estimates(steps, [capacity])}")
    windows = steps[steps["students"] == bound]
    missed = windows["missed"].iloc[-1]
    if why == slos.SATURATED:
        twice = " in both of its windows" if len(windows) > 1 else ""
        return (f"{head}: at least {capacity} students{met}. At {bound} students the client itself was saturated"
                f"{twice} ({missed}): that step is not reported and the search stopped there. Add workers "
                f"(--processes N, or worker machines) and search again.{_on_point_estimates(steps, [capacity])}")
    if why == slos.UNSURE:
        return f"{head}: {capacity} students{met}; at {bound} students its requests could not tell."
    return (f"{head}: {capacity} students{met}; {bound} students missed it ({missed})."
            + _on_point_estimates(steps, [capacity, bound]))


def _deciding_figures(steps: pd.DataFrame, slo: slos.Slo, students: int) -> str:
    """``, TTFT p95 0.83 s (90% CI 0.71–0.97)``: the goals' figures of the class the capacity rests on
    (its last window), as its verdict line gave them; empty when no class met the SLO."""
    windows = steps[(steps["students"] == students) & (steps["outcome"] == slos.MEETS)]
    if windows.empty:
        return ""
    step = windows.iloc[-1].to_dict()
    columns = [c for g in slo.goals for c in (g.figure, g.low, g.high, g.level)]
    return ", " + figures_text(slo, {c: slos.number(step.get(c)) for c in columns})


def _on_point_estimates(steps: pd.DataFrame, classes: list[int]) -> str:
    """A sentence naming the deciding classes whose (last) verdict was made on point estimates, if any."""
    last = steps.drop_duplicates("students", keep="last").set_index("students")["decided_on"]
    named = [n for n in classes if last.get(n) == slos.BY_POINT]
    level = f"{slos.LEVEL:.0%}"
    if len(named) == 1:
        return (f" The verdict on {named[0]} students was decided on its point estimate: its {level} interval "
                "still straddled the goal at --max-step-s, or would have.")
    if named:
        return (f" The verdicts on {named[0]} and {named[1]} students were decided on their point estimates: "
                f"their {level} intervals still straddled the goal at --max-step-s, or would have.")
    return ""


def format_steps(steps: pd.DataFrame, slo: slos.Slo) -> str:
    """The steps as the terminal shows them after a search: one line per class size, each goal's
    figure with its interval (and the answers a window was judged without, when any was)."""
    goals = [g for g in slo.goals if g.figure not in ("ttft_p50_s", "ttft_p95_s")]
    intervals = [(g, f"{g.label} {slos.LEVEL:.0%} CI", 3 if g.at_most else 1) for g in slo.goals]
    overdue = bool(pd.to_numeric(steps["overdue"], errors="coerce").fillna(0).gt(0).any())
    header = [("students", 9), ("requests", 9), ("failed", 7), *([("overdue", 8)] if overdue else []),
              ("TTFT p50 s", 11), ("TTFT p95 s", 11),
              ("decode p50", 11), *[(g.figure, max(12, len(g.figure) + 1)) for g in goals],
              *[(name, max(15, len(name) + 1)) for _g, name, _digits in intervals], ("goodput", 8)]
    lines = ["".join(f"{name:>{width}}" for name, width in header) + "  verdict"]
    for step in steps.to_dict("records"):
        cells = [str(step["students"]), str(step["requests"]), str(step["failed"]),
                 *([shown(step["overdue"], 0)] if overdue else []), shown(step["ttft_p50_s"], 3),
                 shown(step["ttft_p95_s"], 3), shown(step["per_user_decode_tps"], 1),
                 *[shown(step[g.figure], 3 if g.at_most else 1) for g in goals],
                 *[_interval_shown(step, g, digits) for g, _name, digits in intervals],
                 percent(step["goodput_share"])]
        lines.append("".join(f"{cell:>{width}}" for cell, (_name, width) in zip(cells, header)) + "  " + _verdict(step))
    return "\n".join(lines)


def _verdict(step: dict) -> str:
    point = " (on its point estimate)" if step["decided_on"] == slos.BY_POINT else ""
    return {slos.MEETS: f"meets{point}", slos.MISSES: f"misses{point}: {step['missed']}",
            slos.UNSURE: "can't tell", slos.SATURATED: "not judged: the client was saturated"}[step["outcome"]]


def _interval_shown(step: dict, goal: slos.Goal, digits: int) -> str:
    """``0.712–0.968``; an end the window's requests cannot place is ``?``; MISSING when not measured."""
    if slos.number(step[goal.figure]) is None:
        return MISSING
    return interval(step[goal.low], step[goal.high], lambda end: shown(end, digits))


