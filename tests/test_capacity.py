"""The capacity search without Locust: its ladder of class sizes, and its steps against a clock."""

from __future__ import annotations

import pytest

from bench_tasks import slo
from bench_tasks.capacity import Ladder, Search, SearchOptions, conclude, grow, parse_step
from bench_tasks.record import Record


def row(**fields) -> dict:
    return Record(**{"scenario": "classroom", "phase": "class-4", "ok": True, **fields}).to_dict()


# -- the ladder of class sizes -------------------------------------------------------------------------


def walk(ladder: Ladder, capacity: int, saturated_at: int | None = None) -> list[int]:
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
    search = Search(SearchOptions(start=2, step="+2", max_students=4, resolution=2, settle_s=5.0, step_s=10.0,
                                  min_requests=3),
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
