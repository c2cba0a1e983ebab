"""The capacity search without Locust (its ladder and its clock), and its tables from records."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import capacity as capacity_analysis
from analysis import load
from bench_tasks import slo
from bench_tasks.capacity.lines import probe_line, verdict_line
from bench_tasks.capacity.policy import Gallop, Ladder, conclude, grow
from bench_tasks.capacity.policy import walk as capacity_walk
from bench_tasks.capacity.search import Search
from bench_tasks.capacity.search_options import SearchOptions, parse_step
from bench_tasks.capacity.time_left import TimeLeft
from bench_tasks.record import COLUMNS, Record
from tests.conftest import run_cli


def row(**fields) -> dict:
    return Record(**{"scenario": "classroom", "phase": "class-4", "ok": True, **fields}).to_dict()


# -- the ladder of class sizes -------------------------------------------------------------------------


def walk(ladder: Ladder | Gallop, capacity: int, saturated_at: int | None = None) -> list[int]:
    """The class sizes the ladder tries against a server that seats ``capacity`` students."""
    tried, students = [], ladder.start
    while students is not None:
        tried.append(students)
        outcome = slo.SATURATED if saturated_at and students >= saturated_at else (
            slo.MEETS if students <= capacity else slo.MISSES)
        students = ladder.next(students, outcome)
    return tried


def test_the_ladder_doubles_until_a_miss_then_bisects_to_the_exact_capacity():
    assert parse_step("x2") == ("x", 2) and parse_step("+4") == ("+", 4) and grow(3, ("+", 4)) == 7
    for bad in ("2", "x1", "+0", "*2", "x"):
        with pytest.raises(ValueError):
            parse_step(bad)
    ladder = Ladder(1, parse_step("x2"), 256)
    assert walk(ladder, capacity=13) == [1, 2, 4, 8, 16, 12, 14, 13]
    assert conclude(ladder.verdicts) == (13, 14, slo.MISSES)
    assert walk(Ladder(2, parse_step("+3"), 256), capacity=8) == [2, 5, 8, 11, 9]
    coarse = Ladder(1, parse_step("x2"), 256, resolution=4)
    assert walk(coarse, capacity=13) == [1, 2, 4, 8, 16, 12] and conclude(coarse.verdicts)[:2] == (12, 16)


def test_the_ladder_stops_at_a_saturated_client_at_the_largest_class_and_when_nothing_meets():
    saturated = Ladder(1, parse_step("x2"), 256)
    assert walk(saturated, capacity=100, saturated_at=16) == [1, 2, 4, 8, 16]
    assert conclude(saturated.verdicts) == (8, 16, slo.SATURATED)
    top = Ladder(4, parse_step("x2"), 20)
    assert walk(top, capacity=100) == [4, 8, 16, 20] and conclude(top.verdicts) == (20, None, "untested")
    none = Ladder(4, parse_step("x2"), 20)
    assert walk(none, capacity=0) == [4, 2, 1] and conclude(none.verdicts) == (0, 1, slo.MISSES)


# -- the search against a clock -------------------------------------------------------------------------


def test_the_search_settles_opens_its_window_waits_for_its_records_and_moves_on():
    now = [0.0]
    verdicts, phases = [], []
    # max_step_s = step_s: each window is decided when it closes (three requests cannot bound a p95).
    search = Search(SearchOptions(start=2, step="+2", max_students=4, resolution=2, settle_s=5.0, step_s=10.0,
                                  min_requests=3, max_step_s=10.0),
                    slo.parse("ttft_p95=0.5"), clock=lambda: now[0],
                    on_enter=lambda previous, phase: phases.append(phase and phase.name),
                    on_verdict=lambda step, figures: verdicts.append((step.students, figures["outcome"])))
    assert search.phase.users == 2 and phases == ["settle-2"]
    settling = search.take("classroom", "a")
    assert (settling.phase, settling.students) == ("settle-2", 2) and search.take("agent", "a") is None
    now[0] = 5.0
    jobs = [search.take("classroom", user) for user in "abc"]  # the window opened at 5 s
    assert {job.phase for job in jobs} == {"class-2"} and phases[-1] == "class-2"
    now[0] = 15.0
    search.poll()  # 10 s held and 3 questions: the window closes; its answers are awaited
    assert search.phase.name == "settle-2" and search.take("classroom", "d").phase == "settle-2"
    for job, ttft in zip(jobs, (0.1, 0.2, 0.3)):
        search.record(row(phase=job.phase, students=2, ttft_s=ttft))
        search.done(job)
    assert verdicts == [(2, slo.MEETS)] and search.phase.name == "settle-4" and search.phase.users == 4
    now[0] = 20.0
    late = [search.take("classroom", user) for user in "abc"]
    now[0] = 30.0
    search.poll()
    for job in late:
        search.done(job)  # answers done, but only one record has come (a worker's report is late)
    search.record(row(phase="class-4", ttft_s=0.9))
    assert verdicts == [(2, slo.MEETS)]
    now[0] = 30.0 + search.options.record_wait_s
    search.poll()  # judged on what came
    assert verdicts == [(2, slo.MEETS), (4, slo.MISSES)] and search.finished and phases[-1] is None
    assert search.result() == (2, 4, slo.MISSES) and search.take("classroom", "a") is None


def test_a_window_that_cannot_gather_its_questions_is_judged_after_ten_step_lengths():
    now = [0.0]
    search = Search(SearchOptions(start=1, max_students=1, settle_s=0.0, step_s=10.0, min_requests=50),
                    slo.parse("ttft_p95=0.5"), clock=lambda: now[0])
    search.poll()
    job = search.take("classroom", "a")
    search.record(row(phase=job.phase, ttft_s=0.1))
    search.done(job)
    now[0] = 99.0
    search.poll()
    assert not search.finished
    now[0] = 100.0
    search.poll()
    assert search.finished and search.judged[0][1]["requests"] == 1


def test_a_window_that_cannot_tell_goes_on_in_the_same_phase_and_is_decided_at_the_limit():
    now, verdicts, phases = [0.0], [], []
    search = Search(SearchOptions(start=4, max_students=4, settle_s=0.0, step_s=10.0, min_requests=20, max_step_s=35.0),
                    slo.parse("ttft_p95=0.5"), clock=lambda: now[0],
                    on_enter=lambda previous, phase: phases.append(phase and phase.name),
                    on_verdict=lambda step, figures: verdicts.append((figures["outcome"], figures["requests"])))
    assert search.options.max_step_s == 35.0 and SearchOptions(step_s=10.0).max_step_s == 30.0  # default: 3 x
    with pytest.raises(ValueError):
        SearchOptions(step_s=10.0, max_step_s=5.0)

    def ask(count: int, ttft: float = 0.1) -> None:
        jobs = [search.take("classroom", f"u{i}") for i in range(count)]
        for job in jobs:
            search.record(row(phase=job.phase, students=4, ttft_s=ttft))
            search.done(job)

    search.poll()
    ask(20)  # 20 quick answers: the p95 is above the 17th, but 20 cannot bound it from above
    now[0] = 10.0
    search.poll()
    assert verdicts == [(slo.UNSURE, 20)] and not search.judged
    assert phases[-3:] == ["class-4", "settle-4", "class-4"]  # the same window again, not a new step
    assert search.step.target_s == 20.0  # held twice as long
    ask(20)
    now[0] = 20.0
    search.poll()  # 40: still no upper end (a p95's needs 59)
    assert verdicts[-1] == (slo.UNSURE, 40) and search.step.target_s == 35.0  # up to the limit
    ask(10)
    now[0] = 34.0
    search.poll()
    assert len(verdicts) == 2 and search.phase.name == "class-4"
    now[0] = 35.0
    search.poll()  # 50 requests at the limit: decided on its point estimate
    step, figures = search.judged[0]
    assert (figures["outcome"], figures["decided_on"], figures["requests"]) == (slo.MEETS, slo.BY_POINT, 50)
    assert step.held_s == 35.0 and search.finished and search.result() == (4, None, "untested")


def test_a_window_that_becomes_sure_as_it_goes_on_is_decided_on_its_interval_before_the_limit():
    now = [0.0]
    search = Search(SearchOptions(start=4, max_students=4, settle_s=0.0, step_s=10.0, min_requests=20,
                                  max_step_s=100.0), slo.parse("ttft_p95=0.5"), clock=lambda: now[0])
    search.poll()
    for held, count in ((10.0, 50), (20.0, 50)):
        jobs = [search.take("classroom", f"u{i}") for i in range(count)]
        for job in jobs:
            search.record(row(phase=job.phase, ttft_s=0.1))
            search.done(job)
        now[0] = held
        search.poll()
    # 100 answers, all within the goal: the interval's upper end is their max (50 could not place it: a p95's
    # upper end by batch means needs 87 requests, as many as the binomial spread at Student's t of 4 degrees)
    step, figures = search.judged[0]
    assert (figures["outcome"], figures["decided_on"], figures["requests"]) == (slo.MEETS, slo.BY_INTERVAL, 100)
    assert (figures["ttft_p95_low_s"], figures["ttft_p95_high_s"]) == (0.1, 0.1) and step.held_s == 20.0


def test_a_window_that_misses_outright_is_not_held_on_to():
    now = [0.0]
    search = Search(SearchOptions(start=4, max_students=4, settle_s=0.0, step_s=10.0, min_requests=10),
                    slo.parse("ttft_p95=0.5"), clock=lambda: now[0])
    search.poll()
    jobs = [search.take("classroom", f"u{i}") for i in range(10)]
    for job, ttft in zip(jobs, [0.1] * 5 + [2.0] * 5):  # half of them slow: the p95 is surely above 0.5 s
        search.record(row(phase=job.phase, ttft_s=ttft))
        search.done(job)
    now[0] = 10.0
    search.poll()
    assert search.judged[0][1]["outcome"] == slo.MISSES and search.judged[0][1]["decided_on"] == slo.BY_INTERVAL
    assert search.phase.name == "settle-2"  # the next class at once


def run_window(search: Search, now: list, ttfts: list[float], flags: str = "") -> str:
    """Settle, open and fill the current step's window with one question per TTFT; its phase."""
    now[0] += search.options.settle_s
    jobs = [search.take("classroom", f"u{i}") for i in range(len(ttfts))]
    now[0] += search.options.step_s
    search.poll()
    for job, ttft in zip(jobs, ttfts):
        search.record(row(phase=job.phase, ttft_s=ttft, flags=flags))
        search.done(job)
    return jobs[0].phase


def test_a_window_whose_answer_never_comes_is_judged_on_what_came_once_it_is_overdue_and_says_so():
    now, verdicts = [0.0], []
    # Overdue 30 + 7 = 37 s after the window closes: a question sent before the close has failed by its read
    # timeout by then, or is lost (a worker killed mid-window, a job lost on its way).
    options = SearchOptions(start=2, step="+2", max_students=4, resolution=2, settle_s=5.0, step_s=10.0,
                            min_requests=3, max_step_s=10.0, read_timeout_s=30.0, record_wait_s=7.0)
    assert options.overdue_s == 37.0
    search = Search(options, slo.parse("ttft_p95=0.5"), clock=lambda: now[0],
                    on_verdict=lambda step, figures: verdicts.append((step.students, figures)))
    now[0] = 5.0
    jobs = [search.take("classroom", user) for user in "abc"]
    now[0] = 15.0
    search.poll()  # the window closes at 15 s
    for job in jobs[:2]:  # the third question never answers
        search.record(row(phase=job.phase, students=2, ttft_s=0.1))
        search.done(job)
    now[0] = 15.0 + 36.9
    search.poll()
    assert verdicts == [] and "1 question(s) of its window in flight" in search.waiting_on()
    now[0] = 15.0 + 37.0
    search.poll()  # overdue: judged on the two that came
    (students, figures), = verdicts
    assert (students, figures["requests"], figures["overdue"], figures["missing"], figures["outcome"]) == \
        (2, 2, 1, 1, slo.MEETS)
    assert verdict_line(search.slo, 2, figures) == (
        "2 students: TTFT p95 0.10 s (90% CI 0.10–?) (judged on what came: 1 answer(s) overdue): meets on its point "
        "estimate (the interval still straddles the goal)")
    assert search.phase.name == "settle-4"
    search.done(jobs[2])  # the lost answer, late: the next step's window counts nothing of it
    now[0] += 5.0
    later = [search.take("classroom", user) for user in "abc"]
    now[0] += 10.0
    search.poll()
    assert search.step.open == 3
    for job in later:
        search.record(row(phase=job.phase, students=4, ttft_s=0.1))
        search.done(job)
    assert verdicts[-1][1]["overdue"] == 0 and verdicts[-1][1]["requests"] == 3 and search.finished


def test_a_window_that_lost_an_answer_with_a_worker_is_judged_on_what_came_and_says_so():
    now, verdicts = [0.0], []
    options = SearchOptions(start=2, max_students=2, settle_s=0.0, step_s=10.0, min_requests=3, max_step_s=10.0,
                            read_timeout_s=30.0, record_wait_s=7.0)
    search = Search(options, slo.parse("ttft_p95=0.5"), clock=lambda: now[0],
                    on_verdict=lambda step, figures: verdicts.append(figures))
    search.poll()
    jobs = [search.take("classroom", user) for user in "abc"]
    now[0] = 10.0
    search.poll()  # the window closes
    for job in jobs[:2]:
        search.record(row(phase=job.phase, students=2, ttft_s=0.1))
        search.done(job)
    search.done(jobs[2])  # its worker died: the master closed its question, whose record will never come
    now[0] = 16.9
    search.poll()
    assert verdicts == []  # its record may still be on its way (a worker reports every 3 s)
    now[0] = 17.0
    search.poll()
    (figures,) = verdicts
    assert (figures["requests"], figures["overdue"], figures["missing"]) == (2, 0, 1) and search.finished
    assert verdict_line(search.slo, 2, figures).startswith(
        "2 students: TTFT p95 0.10 s (90% CI 0.10–?) (judged on what came: 1 answer(s) never came): meets")


def test_a_window_held_on_to_keeps_the_count_of_its_overdue_answers():
    now, verdicts = [0.0], []
    options = SearchOptions(start=4, max_students=4, settle_s=0.0, step_s=10.0, min_requests=5, max_step_s=20.0,
                            read_timeout_s=3.0, record_wait_s=1.0)
    search = Search(options, slo.parse("ttft_p95=0.5"), clock=lambda: now[0],
                    on_verdict=lambda step, figures: verdicts.append((figures["outcome"], figures["overdue"])))
    search.poll()
    jobs = [search.take("classroom", f"u{i}") for i in range(6)]
    now[0] = 10.0
    search.poll()
    for job in jobs[1:]:
        search.record(row(phase=job.phase, ttft_s=0.1))
        search.done(job)
    now[0] = 14.0
    search.poll()  # 4 s after the close: one overdue; five cannot place a p95's upper end: the window goes on
    assert verdicts == [(slo.UNSURE, 1)] and search.phase.name == "class-4"
    more = [search.take("classroom", f"v{i}") for i in range(5)]
    for job in more:
        search.record(row(phase=job.phase, ttft_s=0.1))
        search.done(job)
    now[0] = 20.0
    search.poll()  # the limit: decided on its point estimate, its first look's overdue answer still counted
    now[0] = 21.0
    search.poll()
    assert verdicts[-1] == (slo.MEETS, 1) and search.judged[0][1]["requests"] == 10


def test_a_class_refused_for_saturation_is_run_once_more_and_the_search_stops_if_refused_again():
    now = [0.0]
    options = SearchOptions(start=2, step="x2", max_students=4, settle_s=1.0, step_s=2.0, min_requests=2,
                            max_step_s=2.0)
    search = Search(options, slo.parse("ttft_p95=0.5"), clock=lambda: now[0])
    assert run_window(search, now, [0.1, 0.1], flags="client_saturated") == "class-2"
    assert search.phase.name == "settle-2-2" and search.step.attempt == 2  # the same class again
    assert run_window(search, now, [0.1, 0.1]) == "class-2-2"  # a passing stall: the search goes on
    assert search.phase.name == "settle-4"
    assert run_window(search, now, [0.1, 0.1], flags="client_saturated") == "class-4"
    assert run_window(search, now, [0.1, 0.1], flags="client_saturated") == "class-4-2"
    assert search.finished and search.result() == (2, 4, slo.SATURATED)
    assert [(step.window, figures["outcome"]) for step, figures in search.judged] == [
        ("class-2", slo.SATURATED), ("class-2-2", slo.MEETS), ("class-4", slo.SATURATED),
        ("class-4-2", slo.SATURATED)]


# -- the same verdict afterwards, from the records --------------------------------------------------------


def frame(rows: list[dict]) -> pd.DataFrame:
    as_text = [{k: "" if v is None else str(v) for k, v in r.items()} for r in rows]
    return load.typed(pd.DataFrame(as_text, columns=list(COLUMNS)))


def test_analysis_judges_each_window_as_the_search_did_and_concludes_the_same():
    goal = slo.parse("ttft_p95=0.5")
    rows = [row(phase="class-2", students=2, ttft_s=0.1, t_start=1.0, decode_tps=30.0) for _ in range(4)]
    rows += [row(phase="settle-4", students=4, ttft_s=9.0, t_start=2.0)]  # never judged
    rows += [row(phase="class-4", students=4, ttft_s=t, t_start=3.0, decode_tps=20.0) for t in (0.2, 0.4, 0.9)]
    rows += [row(phase="class-8", students=8, ttft_s=0.1, t_start=4.0, flags="client_saturated")]
    steps = capacity_analysis.steps(frame(rows), goal)
    assert list(steps["students"]) == [2, 4, 8] and list(steps["step"]) == [1, 2, 3]
    expected = slo.judge(goal, [r for r in rows if r["phase"] == "class-4"])
    assert steps.loc[1, "ttft_p95_s"] == pytest.approx(expected["ttft_p95_s"]) and steps.loc[1, "outcome"] == slo.MISSES
    assert list(steps["meets_slo"].fillna(-1)) == [1.0, 0.0, -1.0]
    assert capacity_analysis.result(steps) == (2, 4, slo.MISSES)
    long = capacity_analysis.tables(frame(rows), goal)
    saturated = long[(long["row"] == "class-8") & (long["metric"] == "ttft_p95_s")].iloc[0]
    assert pd.isna(saturated["median"]) and saturated["n"] == 0  # withheld, not 0
    result = long[long["table"] == "capacity_result"].set_index("metric")["median"].to_dict()
    assert result == {"capacity_students": 2.0, "bound_students": 4.0}
    sentence = capacity_analysis.conclusion(steps, goal)
    assert ("2 students, TTFT p95 0.10 s (90% CI 0.10–?); 4 students missed it (ttft_p95 0.85 s > 0.5, 90% CI "
            "0.4–?).") in sentence  # both deciding classes' intervals
    assert sentence.endswith("The verdicts on 2 and 4 students were decided on their point estimates: their 90% "
                             "intervals still straddled the goal at --max-step-s, or would have.")  # 4 and 3 requests: too few
    assert capacity_analysis.tables(frame(rows), None).empty  # no SLO known: no verdict made up


def test_analysis_gives_each_goal_s_interval_and_decides_on_it_as_the_search_does():
    goal = slo.parse("ttft_p95=0.5")
    # Each fifth of a window alike (the values interleaved in the order asked): the batches agree, and the
    # interval by batch means is the binomial spread's, the order statistics' with its upper end at the max.
    asked = sorted(range(1, 101), key=lambda i: (i % 5, i))
    rows = [row(phase="class-8", students=8, ttft_s=i / 1000, t_start=1.0) for i in asked]  # to 0.1 s
    rows += [row(phase="class-16", students=16, ttft_s=i / 100, t_start=2.0) for i in asked]  # to 1.0 s
    steps = capacity_analysis.steps(frame(rows), goal)
    live = {n: slo.judge(goal, [r for r in rows if r["students"] == n]) for n in (8, 16)}
    for students, figures in live.items():
        mine = steps.set_index("students").loc[students]
        assert (mine["outcome"], mine["decided_on"]) == (figures["outcome"], figures["decided_on"])
        assert (mine["ttft_p95_low_s"], mine["ttft_p95_high_s"]) == pytest.approx(
            (figures["ttft_p95_low_s"], figures["ttft_p95_high_s"]))
    assert list(steps["outcome"]) == [slo.MEETS, slo.MISSES] and set(steps["decided_on"]) == {slo.BY_INTERVAL}
    long = capacity_analysis.tables(frame(rows), goal).set_index(["row", "metric"])
    assert long.loc[("class-16", "ttft_p95_low_s"), "median"] == pytest.approx(0.91)
    assert long.loc[("class-16", "ttft_p95_high_s"), "median"] == pytest.approx(1.0)
    assert long.loc[("class-16", "ttft_p95_level"), "median"] == pytest.approx(slo.LEVEL)  # asked: approximate
    assert long.loc[("class-16", "ttft_p95_level"), "n"] == 100
    sentence = capacity_analysis.conclusion(steps, goal)
    assert sentence == ("Largest class that met the SLO (ttft_p95 ≤ 0.5 s, no failed request): 8 students, TTFT "
                        "p95 0.095 s (90% CI 0.091–0.100); 16 students missed it (ttft_p95 0.95 s > 0.5, 90% CI "
                        "0.91–1).")
    table = capacity_analysis.format_steps(steps, goal).splitlines()
    assert "TTFT p95 90% CI" in table[0] and "0.091–0.100" in table[1] and table[1].endswith("meets")
    first = [row(phase="class-8", students=8, ttft_s=i / 1000, t_start=1.0) for i in sorted(range(1, 31),
                                                                                          key=lambda i: (i % 5, i))]
    few = capacity_analysis.steps(frame(first), goal)  # 30 requests: no upper end, decided on the point
    assert few.loc[0, "decided_on"] == slo.BY_POINT and pd.isna(few.loc[0, "ttft_p95_high_s"])
    assert capacity_analysis.format_steps(few, goal).splitlines()[1].endswith("meets (on its point estimate)")
    assert "0.026–?" in capacity_analysis.format_steps(few, goal)  # the 26th of 30


def test_the_report_s_steps_say_how_many_answers_each_window_was_judged_without(tmp_path):
    import json

    goal = slo.parse("ttft_p95=0.5")
    events = [{"event": "search", "slo": "ttft_p95=0.5"},
              {"event": "extend", "phase": "class-2", "overdue": 1, "outcome": slo.UNSURE},
              {"event": "step", "phase": "class-2", "overdue": 1}, {"event": "step", "phase": "class-4", "overdue": 0},
              {"event": "step", "phase": "class-8"}]  # a search from before the count: not known
    (tmp_path / "capacity.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")
    overdue = load.load_overdue(tmp_path)
    assert overdue == {"class-2": 1, "class-4": 0}
    rows = [row(phase="class-2", students=2, ttft_s=0.1, t_start=1.0) for _ in range(3)]
    rows += [row(phase="class-4", students=4, ttft_s=0.9, t_start=2.0), row(phase="class-8", students=8, t_start=3.0)]
    steps = capacity_analysis.steps(frame(rows), goal, overdue)
    assert steps["overdue"].tolist()[:2] == [1, 0] and pd.isna(steps["overdue"].iloc[2])
    long = capacity_analysis.tables(frame(rows), goal, overdue).set_index(["row", "metric"])
    assert long.loc[("class-2", "overdue"), "median"] == 1 and long.loc[("class-2", "overdue"), "n"] == 3
    assert pd.isna(long.loc[("class-8", "overdue"), "median"])
    table = capacity_analysis.format_steps(steps, goal).splitlines()
    assert table[0].split()[:4] == ["students", "requests", "failed", "overdue"] and table[1].split()[3] == "1"
    assert "overdue" not in capacity_analysis.format_steps(capacity_analysis.steps(frame(rows), goal), goal)


def test_a_class_that_could_not_tell_bounds_the_capacity_as_a_miss_does():
    assert conclude({2: slo.MEETS, 4: slo.MEETS, 8: slo.UNSURE, 16: slo.MISSES}) == (4, 8, slo.UNSURE)
    ladder = Ladder(2, parse_step("x2"), 64)
    assert ladder.next(2, slo.MEETS) == 4 and ladder.next(4, slo.UNSURE) == 3  # bisects below it


def test_the_conclusion_says_to_add_workers_when_the_client_was_saturated():
    goal = slo.parse("ttft_p95=0.5")
    rows = [row(phase="class-4", ttft_s=0.1, t_start=1.0), row(phase="class-8", ttft_s=0.1, t_start=2.0,
                                                              flags="client_saturated")]
    sentence = capacity_analysis.conclusion(capacity_analysis.steps(frame(rows), goal), goal)
    assert "at least 4 students" in sentence and "Add workers" in sentence
    again = rows + [row(phase="class-8-2", ttft_s=0.1, t_start=3.0, flags="client_saturated")]
    steps = capacity_analysis.steps(frame(again), goal)
    assert list(steps["phase"]) == ["class-4", "class-8", "class-8-2"] and list(steps["students"]) == [4, 8, 8]
    assert "saturated in both of its windows" in capacity_analysis.conclusion(steps, goal)
    retried = rows + [row(phase="class-8-2", ttft_s=0.9, t_start=3.0)]  # the class again, judged this time
    assert capacity_analysis.result(capacity_analysis.steps(frame(retried), goal)) == (4, 8, slo.MISSES)
    table = capacity_analysis.format_steps(capacity_analysis.steps(frame(rows), goal), goal)
    assert "not judged: the client was saturated" in table.splitlines()[2]


def test_capacity_options_are_checked_with_one_line_and_exit_2(tmp_path):
    for args in (["--slo", "ttft=fast"], ["--slo", "ttft_p95=1", "--step", "*2"],
                 ["--slo", "ttft_p95=1", "--think-time", "40-10"],
                 ["--slo", "ttft_p95=1", "--start-students", "9", "--max-students", "4"],
                 ["--slo", "ttft_p95=1", "--step-s", "60", "--max-step-s", "30"]):
        result = run_cli("capacity", *args, "--host", "http://127.0.0.1:9", "--out", str(tmp_path / "x"))
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and "error:" in result.stderr.strip().splitlines()[-1], result.stderr


def test_the_capacity_chart_draws_each_setup_s_curve_its_slo_line_and_its_capacity():
    from analysis import charts

    goal = slo.parse("ttft_p95=0.5,decode_p5=15")
    rows = [row(phase="class-2", ttft_s=0.1, t_start=1.0, decode_tps=30.0) for _ in range(4)]
    rows += [row(phase="class-4", ttft_s=t, t_start=3.0, decode_tps=20.0) for t in (0.2, 0.4, 0.9)]
    long = pd.concat([capacity_analysis.tables(frame(rows), goal).assign(setup=label) for label in ("a", "b")])
    spec = charts.spec(charts.capacity_chart(long, {"a": "A", "b": "B"}, {"a": goal, "b": goal}))
    first_token, decode = spec["hconcat"]
    datasets = spec["datasets"]

    def values(panel, field):
        return [v[field] for layer in panel["layer"] for v in datasets[layer["data"]["name"]] if field in v]

    assert sorted(set(values(first_token, "line"))) == ["TTFT p50", "TTFT p95"]
    assert set(values(first_token, "goal")) == {"SLO A, B: ttft_p95 ≤ 0.5 s"}  # one line for the SLO both share
    assert sorted(set(values(first_token, "label"))) == ["A: capacity 2", "B: capacity 2"]
    assert set(values(decode, "line")) == {"decode p50", "decode_tps_p5"}  # the goal's own figure is drawn too
    assert set(values(decode, "goal")) == {"SLO A, B: decode_p5 ≥ 15 tok/s"}
    assert charts.capacity_chart(long[long["table"] != "capacity"], {"a": "A"}, {"a": goal}) is None
    assert charts.png(charts.capacity_chart(long, {"a": "A"}, {"a": goal})).startswith(b"\x89PNG")


# -- from the predicted knee: the probe, the model, the gallop ------------------------------------------


def test_the_gallop_confirms_a_right_prediction_in_two_steps_and_gallops_when_it_was_off():
    assert walk(Gallop(24, 256), capacity=24) == [24, 25]
    assert walk(Gallop(25, 256), capacity=24) == [25, 24]
    assert walk(Gallop(14, 256), capacity=24) == [14, 15, 17, 21, 29, 25, 23, 24]  # up 1, 2, 4, 8; bisect
    off = Gallop(30, 256)
    assert walk(off, capacity=24) == [30, 29, 27, 23, 25, 24] and conclude(off.verdicts) == (24, 25, slo.MISSES)
    coarse = Gallop(20, 256, resolution=2)
    assert walk(coarse, capacity=24) == [20, 22, 26, 24] and conclude(coarse.verdicts)[:2] == (24, 26)
    top = Gallop(250, 256)
    assert walk(top, capacity=300) == [250, 251, 253, 256] and conclude(top.verdicts) == (256, None, "untested")
    none = Gallop(3, 256)
    assert walk(none, capacity=0) == [3, 2, 1] and conclude(none.verdicts) == (0, 1, slo.MISSES)
    saturated = Gallop(8, 256)
    assert walk(saturated, capacity=100, saturated_at=10) == [8, 9, 11]
    assert conclude(saturated.verdicts) == (9, 11, slo.SATURATED)


def test_the_steps_still_expected_are_the_ladder_s_own_against_the_model_s_capacity():
    ladder = Gallop(24, 256)
    assert capacity_walk(ladder, 24, capacity=24) == [25] and capacity_walk(ladder, 24, capacity=30) == [25, 27, 31, 29, 30]
    assert ladder.verdicts == {}  # a copy walked, not the search's own
    assert capacity_walk(Ladder(2, parse_step("x2"), 256), 2, capacity=24) == [4, 8, 16, 32, 24, 28, 26, 25]


def test_by_default_the_search_probes_predicts_the_knee_starts_there_and_says_how_long_it_will_take():
    from bench_tasks.classroom import ThinkTime
    from tests.test_probe import FakeServer, run_probe

    now, predicted, phases = [0.0], [], []
    # test_capacity_sim's engine: 4 slots, 41 tokens at 40 tok/s, think exactly 1.125 s: 8 students on paper.
    options = SearchOptions(max_students=64, settle_s=2.0, step_s=10.0, min_requests=10, max_step_s=20.0)
    assert options.start is None  # the default: auto
    search = Search(options, slo.parse("ttft_p95=0.1"), clock=lambda: now[0], think=ThinkTime(1.125, 1.125),
                    max_tokens=41, on_predict=lambda s: predicted.append(s.prediction.capacity),
                    on_enter=lambda previous, phase: phases.append(phase and phase.name))
    assert search.probing and search.phase.name == "probe-burst-1" and search.remaining_s() is None
    assert search.take("classroom", "u0") is None  # no class while the probe runs
    run_probe(search.probe, FakeServer(slots=4, token_s=1 / 40, first_token_s=0.002, answers=(41,)), now)
    search.poll()
    assert phases[:6] == ["probe-burst-1", "probe-burst-2", "probe-burst-4", "probe-burst-8", "probe-prompt",
                          "probe-answers"]
    assert predicted == [8] and search.server.slots == 4 and phases[-1] == "settle-8"
    assert isinstance(search.policy, Gallop) and search.step.number == 1

    # The ETA: this step and the next (9, where the model's capacity ends), each settle + window + answer.
    total = search.remaining_s()
    expected = search.time_left.expected_step_s(8) + search.time_left.expected_step_s(9)
    assert total == pytest.approx(expected) and expected > 2 * (options.settle_s + options.step_s)
    now[0] += 5.0
    assert search.remaining_s() == pytest.approx(total - 5.0)

    run_window(search, now, [0.01] * 100)  # a p95's upper end by batch means needs 87 requests
    assert search.judged[-1][1]["outcome"] == slo.MEETS and search.phase.name == "settle-9"
    assert search.remaining_s() == pytest.approx(search.time_left.expected_step_s(9))
    run_window(search, now, [0.01] * 40 + [0.5] * 20)
    assert search.finished and search.result() == (8, 9, slo.MISSES) and search.remaining_s() == 0.0


def test_the_probe_line_says_when_reading_a_prompt_stops_the_answers_beside_it():
    from tests.test_probe import FakeServer, run_probe

    search = Search(SearchOptions(max_students=16), slo.parse("ttft_p95=1.0"), clock=lambda: 0.0, max_tokens=256)
    run_probe(search.probe, FakeServer(slots=4, token_s=0.01, prefill_tps=2000.0, pause_share=1.0))
    search.poll()
    assert search.server.prefill_pause_share == pytest.approx(1.0)
    assert "prefill 2000 tok/s (the answers beside a prompt stand still for 100% of its reading)" in probe_line(search)


def test_a_probe_that_measured_nothing_leaves_the_search_to_the_ladder_from_two():
    from tests.test_probe import FakeServer, run_probe

    search = Search(SearchOptions(max_students=16), slo.parse("ttft_p95=0.5"), clock=lambda: 0.0)
    run_probe(search.probe, FakeServer(slots=4, token_s=0.01, fail_at=1))
    search.poll()
    assert search.server is None and isinstance(search.policy, Ladder) and search.phase.name == "settle-2"
    assert search.remaining_s() is None


def test_a_window_is_expected_to_last_until_the_model_s_requests_would_decide_it():
    from bench_tasks.capacity.queue_model import ClassFigures, Prediction, Server
    from bench_tasks.classroom import ThinkTime

    goal = slo.parse("ttft_p95=0.5")
    prediction = Prediction(Server(slots=4, token_s=0.01), ThinkTime(), goal)
    time_left = TimeLeft(SearchOptions(start=4, step_s=10.0, max_step_s=160.0, settle_s=5.0, min_requests=10), goal,
                         prediction)

    def model(students: int, series: list[float]) -> ClassFigures:
        """The model's class: its requests in the order asked, and sorted."""
        return ClassFigures(students, True, {}, 2.0, 1.5, {"ttft_s": sorted(series)}, {"ttft_s": series})

    # far below the goal: decided as soon as a p95 has an upper end (by batch means 87 requests; 59 by order
    # statistics, when this test said 40 s)
    prediction.classes[4] = model(4, [0.01] * 1000)
    assert time_left.expected_window_s(4) == 80.0  # 20, 40 and 80 requests cannot bound it; 160 can
    assert time_left.expected_step_s(4) == 5.0 + 80.0 + 1.5
    prediction.classes[5] = model(5, ([0.45] * 19 + [0.55]) * 50)  # its p95 at the goal: no window can tell
    assert time_left.expected_window_s(5) == 160.0
    prediction.classes[6] = model(6, [0.01, 2.0] * 500)  # half of them slow: a miss is seen in the first window
    assert time_left.expected_window_s(6) == 10.0
    # A class the model did not run is timed from the nearest it ran (never run while a class asks), asking as
    # often per student: 12 students like 6 at twice the rate, 4 per second.
    assert time_left.expected_window_s(12) == 10.0 and time_left.figures(12).requests_per_s == 4.0
