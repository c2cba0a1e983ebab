"""How long the capacity search will still take, if the queueing model is right.

The steps the policy still expects against the model's capacity (kept within what the verdicts so
far allow), each timed from the model's figures for its class (or the nearest class it ran): settle,
the window held until the model's requests would decide it (``expected_outcome``: the model's
requests cut into windows of that many, each judged as a step is), the last answer; the current
step counts what is left of it. Without a model (a numbered start, a probe that measured too little)
there is no estimate. Pure: the clock's reading is passed in.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from bench_tasks import slo as slos
from bench_tasks.capacity import queue_model
from bench_tasks.capacity.policy import conclude, walk
from bench_tasks.capacity.search_options import SearchOptions
from bench_tasks.capacity.steps import Steps

MODEL_WINDOWS = 16  # windows of the model's requests judged to say what a step's window would likely conclude


@dataclass
class TimeLeft:
    options: SearchOptions
    slo: slos.Slo
    prediction: queue_model.Prediction
    _windows: dict = field(default_factory=dict, repr=False)  # expected_window_s by class: the model does not change

    def remaining_s(self, steps: Steps, now: float) -> float:
        """Seconds the search will still take from ``now``; 0 once it is done."""
        step = steps.step
        if step is None:
            return 0.0
        good, bound, _why = conclude(steps.policy.verdicts)
        capacity = max(self.prediction.capacity, good)
        capacity = capacity if bound is None else min(capacity, bound - 1)
        current = self.expected_step_s(step.students)
        if step.window_started is not None:  # a window held longer than expected: at least its target
            current = max(current, step.window_started - step.started + step.target_s + self._answer_s(step.students))
        later = walk(steps.policy, step.students, capacity)
        return max(current - (now - step.started), 0.0) + sum(self.expected_step_s(n) for n in later)

    def expected_step_s(self, students: int) -> float:
        """Settle, the window as long as the model says its requests take to decide it, the last answer."""
        return self.options.settle_s + self.expected_window_s(students) + self._answer_s(students)

    def expected_window_s(self, students: int) -> float:
        if students not in self._windows:
            o = self.options
            figures = self.figures(students)
            held = o.step_s
            while held < o.max_step_s:
                requests = int(figures.requests_per_s * held)
                if requests >= o.min_requests and expected_outcome(self.slo, figures, requests) != slos.UNSURE:
                    break
                held = min(2 * held, o.max_step_s)
            self._windows[students] = held
        return self._windows[students]

    def _answer_s(self, students: int) -> float:
        return self.figures(students).response_s

    def figures(self, students: int) -> queue_model.ClassFigures:
        """The model's class, or the nearest class it ran, asking as often per student: running the model
        again while a class asks would hold the loop that stamps its answers."""
        classes = self.prediction.classes
        if students in classes:
            return classes[students]
        near = min(classes.values(), key=lambda c: (abs(c.students - students), c.students))
        return dataclasses.replace(near, students=students,
                                   requests_per_s=near.requests_per_s * students / near.students)


def expected_outcome(slo: slos.Slo, figures: queue_model.ClassFigures, requests: int) -> str:
    """The verdict a window of ``requests`` would likely reach if the model's requests are the class's: the
    model's requests, in the order they were asked, cut into windows of that many, each judged as a step is
    (``slo.interval``); the verdict most of them reach, or UNSURE when none has a majority."""
    outcomes = []
    for goal in slo.goals:
        series = figures.series.get(goal.column) or []
        if requests < 1 or len(series) < requests:
            return slos.UNSURE
        windows = [series[start:start + requests] for start in range(0, len(series) - requests + 1, requests)]
        step = max(1, len(windows) // MODEL_WINDOWS)  # a few spread over the model's run are enough
        verdicts = Counter(goal.verdict(slos.interval(window, goal.quantile)) for window in windows[::step])
        outcome, count = verdicts.most_common(1)[0]
        outcomes.append(outcome if 2 * count > sum(verdicts.values()) else slos.UNSURE)
    if slos.MISSES in outcomes:
        return slos.MISSES
    return slos.MEETS if all(o == slos.MEETS for o in outcomes) else slos.UNSURE
