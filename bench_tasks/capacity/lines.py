"""The capacity search in words: the lines the progress output prints as it goes (what the probe measured,
each window's verdict), each goal's figure with its interval (also the report's result sentence), and
what the search is waiting for (the stall watchdog's message). Numbers and intervals are written by
``bench_tasks.formatting``; the search itself builds no text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench_tasks import slo as slos
from bench_tasks.formatting import apart_from, ci, decimals
from bench_tasks.statistics import median

if TYPE_CHECKING:  # the search imports this module
    from bench_tasks.capacity.search import Search


def probe_line(search: Search) -> str:
    """What the probe measured and what the model predicts, in one line: ``probe: 4 slots, 100 tok/s per request
    ...; the model predicts 24 students (TTFT p95 0.92 s; 25: 1.2 s)``."""
    server, prediction, probe, start = search.server, search.prediction, search.probe, search.policy.start
    if server is None:
        return (f"probe: {probe.why() or 'too little measured'}; the search climbs from {start} students "
                f"({search.options.step}) instead")
    slots = f"{server.slots} slots" if probe.slots else f"no slot limit seen up to {probe.max_burst} at once"
    busy = min(server.slots, 8)
    prefill = f"prefill {server.prefill_tps:.0f} tok/s" if server.prefill_tps else "prefill too fast to see"
    if server.prefill_pause_share:
        prefill += f" (the answers beside a prompt stand still for {server.prefill_pause_share:.0%} of its reading)"
    parts = [f"probe: {slots}, decode {1 / server.token_s:.0f} tok/s per request alone "
             f"({1 / server.token_time_s(busy):.0f} with {busy} at once), {prefill}, first token "
             f"{server.first_token_s:.3f} s, answers {min(server.answer_tokens)}-{max(server.answer_tokens)} tokens "
             f"(median {median(server.answer_tokens):.0f})"]
    if probe.notes:
        parts.append(probe.why())
    knee = prediction.capacity
    shown = [prediction.classes[n] for n in (knee, knee + 1) if n in prediction.classes]
    figures = "; ".join(f"{c.students}: " + ", ".join(f"{g.label} {c.figures[g.figure]:.3g} {g.unit}"
                                                       for g in search.slo.goals if c.figures[g.figure] is not None)
                        for c in shown)
    parts.append(f"the model predicts {knee} students ({figures}); the search starts at {start}")
    return "; ".join(parts)


def verdict_line(slo: slos.Slo, students: int, figures: dict, again: bool = False, up_to_s: float | None = None,
                 level: float = slos.LEVEL) -> str:
    """One line for the progress output, each goal's figure with the interval its verdict rests on:
    ``24 students: TTFT p95 0.83 s (90% CI 0.71–0.97): meets`` (``again``: a refused step will be run
    once more; ``up_to_s``: how long an unsure window may go on). A window judged without its overdue
    answers, or without those lost with a worker, says so."""
    overdue, missing = figures.get("overdue") or 0, figures.get("missing") or 0
    short = []
    if overdue:
        short.append(f"{overdue} answer(s) overdue")
    if missing > overdue:
        short.append(f"{missing - overdue} answer(s) never came")
    came = f" (judged on what came: {', '.join(short)})" if short else ""
    if figures["outcome"] == slos.SATURATED:
        then = "running the class once more" if again else "add workers (--processes or worker machines)"
        return (f"{students} students, {figures['requests']} requests{came}, not judged: {figures['missed'][0]}; "
                f"{then}")
    head = f"{students} students: {figures_text(slo, figures, level)}{came}"
    if figures["outcome"] == slos.UNSURE:
        longer = f"; the window goes on, up to {up_to_s:g} s" if up_to_s is not None else ""
        return f"{head}: can't tell yet, the interval straddles the goal{longer}"
    how = ""
    if figures["decided_on"] == slos.BY_POINT:
        how = (" on its point estimate (the interval straddles the goal, and would still at the window's limit)"
               if figures.get("hopeless") else " on its point estimate (the interval still straddles the goal)")
    if figures["outcome"] == slos.MEETS:
        return f"{head}: meets{how}"
    return f"{head}: misses{how} ({'; '.join(_reasons(slo, figures))})"


def _reasons(slo: slos.Slo, figures: dict) -> list[str]:
    """Why a step missed, short (its figures are on the line already): ``ttft_p95 > 1``, ``3 of 100 requests
    failed``."""
    broken = [goal for goal in slo.goals if figures[goal.figure] is not None and not goal.holds(figures[goal.figure])]
    names = tuple(f"{goal.name} " for goal in slo.goals)
    return ([f"{goal.name} {'>' if goal.at_most else '<'} {goal.limit:g}" for goal in broken]
            + [text for text in figures["missed"] if not text.startswith(names)])


def figures_text(slo: slos.Slo, figures: dict, level: float = slos.LEVEL) -> str:
    """Each goal's figure with its interval: ``TTFT p95 0.83 s (90% CI 0.71–0.97)``."""
    return "; ".join(_figure_text(goal, figures, level) for goal in slo.goals)


def _figure_text(goal: slos.Goal, figures: dict, level: float) -> str:
    """``TTFT p95 0.83 s (90% CI 0.71–0.97)``: the figure to two significant digits and its interval's ends
    to as many decimals, more where fewer would read as the limit when the value is not; an end the
    requests cannot place is ``?``."""
    value = figures[goal.figure]
    if value is None:
        return f"{goal.label} not measured"
    digits = decimals(value)

    def near(end: float) -> str:
        return apart_from(end, goal.limit, digits)

    within = (f"no {level:.0%} CI" if figures[goal.level] is None
              else ci(level, figures[goal.low], figures[goal.high], near))
    return f"{goal.label} {near(value)} {goal.unit} ({within})"


def waiting(search: Search) -> str:
    """What the search is waiting for, in words (the stall watchdog's message)."""
    if search.probing:
        return f"the probe: {search.probe.waiting_on()}"
    step = search.step
    if step is None:
        return "the search has ended"
    return (f"step {step.number} ({step.students} students, {step.state}), {step.open} question(s) of its window in "
            "flight")
