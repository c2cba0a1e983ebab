"""How often does a capacity step's interval hold the class's true percentile, and what does an honest one
cost the search? A benchmark on the queueing model (bench_tasks/capacity/queue_model.py), not a test (pytest does not
collect it: it runs for a few minutes).

    python tests/benchmarks/window_coverage.py                      # the coverage table, then the searches
    python tests/benchmarks/window_coverage.py --students 23,24 --windows 360 --seeds 40 --no-search

The server is the issue's (4 slots, 256-token answers at 100 tok/s, prompts read at 40000 tok/s, a kept
prefix), the class thinks 10-40 s. For each class size the truth is the model's long-run TTFT p95 (900,000
requests over three seeds). Each seed runs the class once, steadily, and cuts it into consecutive windows of
the given length; every window's requests, in the order they were asked, get each method's 90% interval:

- ``order statistics``: ``statistics.quantile_interval`` (open ends), as if the requests were independent;
- ``batch means``: ``statistics.window_quantile_interval``, what ``slo.judge`` now uses;
- ``t on batch p95s``: sectioning on each batch's own p95 (the window's p95 +/- Student's t times the spread
  of five batch p95s): the textbook alternative, kept here to show why it was not chosen.

A row says how often the interval held the truth, how often its lower end was above it or its upper end
below it (each should be at most 5%: each end is a one-sided 95% bound), how often an end stayed open (the
window cannot place it: a verdict on that side must wait), and the mean width of the intervals with both ends.

The searches: the default search (``Gallop`` from the model's predicted knee; settle 40 s, windows of 120 s
held twice as long while they cannot tell, up to 360 s, then decided on the point estimate, sooner when
holding on would not tell either) run against the
model with ``ttft_p95=1.0``, each step a fresh seeded class, judged by ``slo.judge`` with either interval: first each
class's step alone (how long its window is held before it decides, and how often it is decided on its point
estimate at the limit), then whole searches: how often they land on each capacity, and how long they take.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter

from bench_tasks import slo as slos
from bench_tasks.capacity.policy import Gallop, conclude
from bench_tasks.capacity.queue_model import Server, predict, simulate
from bench_tasks.capacity.steps import shrink_at_limit
from bench_tasks.classroom import ThinkTime
from bench_tasks.statistics import quantile, quantile_interval, t_quantile, window_quantile_interval

SERVER = Server(slots=4, token_s=1 / 100, answer_tokens=(256,), first_token_s=0.001, prefill_tps=40000.0,
                first_prompt_tokens=60, cached_history=True)
THINK = ThinkTime(10, 40)
Q, LEVEL, BATCHES = 0.95, 0.90, 5


def sectioning(values: list[float]) -> tuple[float, float] | None:
    n = len(values)
    if n < 2 * BATCHES:
        return None
    whole = quantile(sorted(values), Q)
    batches = [quantile(sorted(values[b * n // BATCHES:(b + 1) * n // BATCHES]), Q) for b in range(BATCHES)]
    half = t_quantile((1 + LEVEL) / 2, BATCHES - 1) * math.sqrt(
        sum((p - whole) ** 2 for p in batches) / (BATCHES - 1) / BATCHES)
    return whole - half, whole + half


def ends(interval) -> tuple[float, float] | None:
    if interval is None:
        return None
    return (-math.inf if interval.low is None else interval.low, math.inf if interval.high is None else interval.high)


METHODS = {"order statistics": lambda v: ends(quantile_interval(v, Q, LEVEL, open_ends=True)),
           "batch means": lambda v: ends(window_quantile_interval(v, Q, LEVEL)),
           "t on batch p95s": sectioning}


def ttft(row: dict) -> float:
    """To the nanosecond: the model's times are differences of times thousands of seconds into its run, so two
    questions that never waited differ in their last bits, and a p95 on that tie would be decided by them."""
    return round(row["ttft_s"], 9)


def truth(students: int) -> float:
    values = []
    for seed in range(3):
        rows, _span = simulate(SERVER, THINK, students, 300000, 1000 + seed)
        values += [ttft(row) for row in rows]
    return quantile(sorted(values), Q)


def windows(students: int, window_s: float, seeds: int, per_seed: int) -> list[list[float]]:
    """Consecutive windows of a steady class: each window's TTFTs in the order they were asked."""
    found = []
    for seed in range(seeds):
        asks_per_s = students / (sum((THINK.min_s, THINK.max_s)) / 2)
        rows, _span = simulate(SERVER, THINK, students, int(asks_per_s * window_s * (per_seed + 1)) + 200, seed)
        rows.sort(key=lambda row: row["t_send"])
        start, cut = rows[0]["t_send"], [[] for _ in range(per_seed)]
        for row in rows:
            index = int((row["t_send"] - start) // window_s)
            if index < per_seed:
                cut[index].append(ttft(row))
        found += [window for window in cut if window]
    return found


def coverage(students_list, windows_s, seeds, per_seed) -> None:
    print("| method | students | window s | requests (median) | coverage | lower end above | upper end below "
          "| an end open | mean width s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for students in students_list:
        true_p95 = truth(students)
        for window_s in windows_s:
            cut = windows(students, window_s, seeds, per_seed)
            requests = statistics.median(len(w) for w in cut)
            for name, method in METHODS.items():
                held = above = below = opened = 0
                widths = []
                for window in cut:
                    low, high = method(window) or (-math.inf, math.inf)
                    above += low > true_p95
                    below += high < true_p95
                    held += low <= true_p95 <= high
                    if math.isfinite(high - low):
                        widths.append(high - low)
                    else:
                        opened += 1
                k = len(cut)
                width = f"{statistics.fmean(widths):.3f}" if widths else "–"
                print(f"| {name} | {students} (p95 {true_p95:.3g} s) | {window_s:g} | {requests:.0f} | {held / k:.3f} "
                      f"| {above / k:.3f} | {below / k:.3f} | {opened / k:.2f} | {width} |", flush=True)


def step(students: int, seed: int, goal: slos.Slo, independent: bool, settle_s=40.0, step_s=120.0, max_step_s=360.0):
    """One step of the search against the model: (outcome, seconds it took, seconds its window was held,
    whether it was decided on the point estimate)."""
    rows, _span = simulate(SERVER, THINK, students, int(students / 25 * (max_step_s + 200)) + 200, seed)
    rows.sort(key=lambda row: row["t_send"])
    start, held = rows[0]["t_send"], step_s
    while True:
        window = [row for row in rows if row["t_send"] < start + held]
        figures = slos.judge(goal, window, final=held >= max_step_s, independent=independent,
                             shrink=shrink_at_limit(held, max_step_s))  # as the search judges (Search._judge)
        if figures["outcome"] != slos.UNSURE:
            last = max(row["t_send"] + row["e2e_s"] for row in window) - (start + held)
            return figures["outcome"], settle_s + held + max(last, 0.0), held, figures["decided_on"] == slos.BY_POINT
        held = min(2 * held, max_step_s)


def searches(runs: int, goal_text: str) -> None:
    goal = slos.parse(goal_text)
    start = predict(SERVER, THINK, goal, max_students=256).capacity
    print(f"\nThe default search from the model's knee ({start}), {goal_text}, {runs} searches per method:")
    for name, independent in (("order statistics", True), ("batch means", False)):
        found, minutes, steps = Counter(), [], []
        for run in range(runs):
            ladder, students, took, number = Gallop(start, 256), start, 0.0, 0
            while students is not None:
                number += 1
                outcome, seconds, _held, _point = step(students, 7919 * run + number, goal, independent)
                took += seconds
                students = ladder.next(students, outcome)
            found[conclude(ladder.verdicts)[0]] += 1
            minutes.append(took / 60)
            steps.append(number)
        shares = ", ".join(f"{n}: {count / runs:.0%}" for n, count in sorted(found.items()))
        print(f"- {name}: found {shares}; {statistics.fmean(steps):.1f} steps, {statistics.fmean(minutes):.1f} min "
              f"on average (median {statistics.median(minutes):.1f}, 90th percentile "
              f"{sorted(minutes)[int(0.9 * runs)]:.1f})", flush=True)


def step_lengths(students_list, runs: int, goal_text: str) -> None:
    """Each class's step alone: how long its window was held, how often it was decided on its point estimate."""
    goal = slos.parse(goal_text)
    print(f"\nOne step per class, {runs} seeds, {goal_text}: the window held (mean s), how often it was decided on its "
          "point estimate, its verdicts, and how often it was wrong (against the long-run p95) on its interval, "
          "that is while claiming 95% confidence")
    print("| students | method | window held s | on the point estimate | meets | misses | wrong on its interval |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for students in students_list:
        right = slos.MEETS if all(g.holds(truth(students)) for g in goal.goals) else slos.MISSES
        for name, independent in (("order statistics", True), ("batch means", False)):
            steps = [step(students, 104729 + seed, goal, independent) for seed in range(runs)]
            held = statistics.fmean(s[2] for s in steps)
            point = sum(s[3] for s in steps) / runs
            meets = sum(s[0] == slos.MEETS for s in steps) / runs
            wrong = sum(s[0] != right and not s[3] for s in steps) / runs
            print(f"| {students} | {name} | {held:.0f} | {point:.0%} | {meets:.0%} | {1 - meets:.0%} | {wrong:.1%} |",
                  flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", default="12,18,21,23,24,25,27,30")
    parser.add_argument("--windows", default="120,240,360", help="window lengths, seconds")
    parser.add_argument("--seeds", type=int, default=100, help="classes run per size and length")
    parser.add_argument("--per-seed", type=int, default=8, help="consecutive windows cut from each")
    parser.add_argument("--searches", type=int, default=200, help="searches run per method")
    parser.add_argument("--slo", default="ttft_p95=1.0")
    parser.add_argument("--no-search", action="store_true")
    parser.add_argument("--no-coverage", action="store_true")
    args = parser.parse_args()
    if not args.no_coverage:
        coverage([int(n) for n in args.students.split(",")], [float(w) for w in args.windows.split(",")], args.seeds,
                 args.per_seed)
    if not args.no_search:
        step_lengths([n for n in (18, 21, 23, 24, 25, 27, 30)], args.searches, args.slo)
        searches(args.searches, args.slo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
