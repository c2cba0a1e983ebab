"""The open loop's coordinator and plans, driven by a simulated room of users and a server whose every
time is known (tests/open_loop_room.py): requests leave when due, a full pool sends late and drops what
it cannot send, a step's requests are labelled settle, window and drain by when they were due, a sweep to
saturation finds the server's rate, and the records carry their due times."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from bench_tasks.arrivals import Schedule, parse
from bench_tasks.errors import NOT_SENT
from bench_tasks.open_loop import LEAD_S, SCENARIO, Flood, OpenLoop, Step, part_name, stamp_due, window_name
from bench_tasks.record import Record
from bench_tasks.suite import Job
from bench_tasks.sweep import (LIMIT, PLATEAU, Ladder, OneRate, RateOptions, Sweep, SweepOptions, parse_rates,
                               rounded)
from tests.open_loop_room import Room


def frame(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(records)


def test_below_capacity_every_request_leaves_when_due():
    room = Room(slots=4, service_s=0.5)  # answers 8 requests per second
    loop = OpenLoop(OneRate(RateOptions(5.0, parse("poisson"), seed=3, requests=200)), room.now)
    records = frame(room.run(loop))
    assert len(records) == 200 and set(records["phase"]) == {"rate-5"}
    assert (records["send_lag_s"] == 0).all()  # the room's users wake exactly: any lag would be the coordinator's
    due = sorted(records["t_due"] - records["t_due"].min())
    expected = list(Schedule(5.0, parse("poisson"), "3/rate-5", requests=200))
    assert due == pytest.approx([t - expected[0] for t in expected], abs=1e-9)  # the schedule, as drawn
    assert (records["offered_rps"] == 5.0).all() and loop.finished
    assert room.most_users <= 12  # the pool stays near what the load needs (about 4 in flight)


def test_the_first_schedule_waits_for_the_pool_to_start():
    room = Room(slots=4, service_s=0.5)
    start = room.now()
    loop = OpenLoop(OneRate(RateOptions(5.0, parse("constant"), requests=5)), room.now, start_delay_s=3.0)
    assert loop.phase.users >= 2  # asked for at once, while nothing is due yet
    records = frame(room.run(loop))
    assert records["t_due"].min() == pytest.approx(start + 3.0 + LEAD_S + 0.2)


def test_a_full_pool_sends_late_and_drops_what_it_cannot_send():
    room = Room(slots=1, service_s=0.5)  # 2 answers per second, offered 10
    options = RateOptions(10.0, parse("constant"), requests=40, max_in_flight=2, drain_limit_s=3.0)
    loop = OpenLoop(OneRate(options), room.now, max_in_flight=options.max_in_flight)
    records = frame(room.run(loop))
    assert len(records) == 40  # every request due has a record: sent, or never sent
    unsent = records[records["error"] == NOT_SENT]
    sent = records[records["error"] != NOT_SENT]
    assert len(unsent) > 0 and (unsent["ok"] == False).all()  # noqa: E712
    assert sent["send_lag_s"].max() > 1.0  # a request waited for a free user and went late
    assert room.most_users == 2
    # Sending stops at the drain limit: nothing leaves later than 3 s after the last request was due.
    assert (sent["t_send"] <= records["t_due"].max() + 3.0 + 1e-9).all()


def test_a_job_given_back_is_offered_again_in_the_order_it_was_due():
    clock = [0.0]
    loop = OpenLoop(OneRate(RateOptions(10.0, parse("constant"), requests=3)), lambda: clock[0])
    clock[0] = 0.35  # the first two known (due at 0.1 and 0.2 after the lead)
    first, second = loop.take(SCENARIO, "a"), loop.take(SCENARIO, "b")
    loop.give_back(first)  # its user stopped while waiting for it to fall due
    assert [loop.take(SCENARIO, "c").release_at, loop.step.outstanding["window"]] == [first.release_at, 2]
    assert second.release_at > first.release_at
    flood = Flood(in_flight=2, min_requests=2, window_s=0.0)
    jobs = [flood.take(0.0), flood.take(0.0)]
    flood.give_back(jobs[0])
    assert flood.outstanding == 1 and flood.take(0.0).index == 3  # a prompt's identity is never reused


def test_a_steps_requests_are_labelled_by_when_they_were_due():
    step = Step("rate-4", Schedule(4.0, parse("constant")), 4.0, settle_s=2.0, window_s=3.0, min_requests=20,
                keep_load=True)
    step.begin(0.0, number=1)
    step.advance(100.0)
    jobs = list(step.pending)
    # Due at 0.25 (the lead) + k / 4: before 2.25 settle; the window until 3 s have passed and 20 are due.
    labels = {job.phase for job in jobs}
    assert labels == {"settle-rate-4", "rate-4", "drain-rate-4"}
    window = [job for job in jobs if job.phase == "rate-4"]
    assert len(window) == 20 and min(j.release_at for j in window) >= 2.25
    assert all(j.release_at < 2.25 for j in jobs if j.phase == "settle-rate-4")
    assert step.window_end == pytest.approx(window[-1].release_at + 0.25)
    assert [j.index for j in jobs] == list(range(1, len(jobs) + 1)) and all(j.round == 1 for j in jobs)


def test_a_job_is_known_a_lead_before_it_is_due_and_not_earlier():
    step = Step("rate-1", Schedule(1.0, parse("constant")), 1.0)
    step.begin(10.0, number=1)
    first_due = 10.0 + LEAD_S + 1.0
    assert step.take(first_due - LEAD_S - 0.001) is None
    job = step.take(first_due - LEAD_S)
    assert job is not None and job.release_at == first_due and job.offered_rps == 1.0


def test_a_sweep_keeps_the_load_until_its_window_is_answered():
    room = Room(slots=4, service_s=0.5)
    options = SweepOptions((2.0, 4.0), parse("constant"), settle_s=2.0, window_s=4.0, min_requests=10)
    logged = []
    loop = OpenLoop(Sweep(options), room.now, on_step=lambda step: logged.append(step.summary()))
    records = frame(room.run(loop))
    assert [(s["phase"], s["offered_rps"], s["not_sent"]) for s in logged] == [("rate-2", 2.0, 0), ("rate-4", 4.0, 0)]
    assert logged[0]["window"] == len(records[records["phase"] == "rate-2"])
    assert list(dict.fromkeys(records.sort_values("t_due")["phase"])) == [
        "settle-rate-2", "rate-2", "drain-rate-2", "settle-rate-4", "rate-4", "drain-rate-4"]
    for rate in (2.0, 4.0):
        mine = records[records["offered_rps"] == rate]
        window = mine[mine["phase"] == window_name(rate)]
        assert len(window) >= 10 and window["ok"].all()
        # The last window request was answered under the same load: requests kept coming after it was due.
        last_due = window["t_due"].max()
        drain = mine[mine["phase"] == part_name(window_name(rate), "drain")]
        assert drain["t_due"].max() >= last_due + 0.5 - 1e-9


def test_a_sweep_to_saturation_finds_the_servers_rate_and_spreads_below_it():
    room = Room(slots=4, service_s=0.5)  # 8 answers per second, at 4 in flight and more
    options = SweepOptions(None, parse("poisson"), seed=1, settle_s=2.0, window_s=5.0, min_requests=10, probe_s=2.0)
    sweep = Sweep(options)
    records = frame(room.run(OpenLoop(sweep, room.now)))
    assert sweep.ladder.measured == pytest.approx({1: 2.0, 2: 4.0, 4: 8.0, 8: 8.0})
    assert sweep.ladder.stopped == PLATEAU and sweep.ladder.saturation_rps == pytest.approx(8.0)
    assert sweep.rates == [2.0, 4.0, 6.0, 7.2, 8.0]
    phases = set(records["phase"])
    assert {"flood-1", "flood-2", "flood-4", "flood-8"} <= phases and {f"rate-{r:g}" for r in sweep.rates} <= phases
    floods = records[records["phase"].str.startswith("flood-")]
    assert floods["t_due"].isna().all() and floods["offered_rps"].isna().all()
    result = sweep.result()
    assert result["saturation_rps"] == pytest.approx(8.0) and result["stopped"] == PLATEAU
    assert result["rates"] == sweep.rates and set(result["floods"]) == {1, 2, 4, 8}


def test_the_ladder_stops_at_a_plateau_or_at_the_pool_it_may_use():
    ladder = Ladder(max_in_flight=64)
    assert [ladder.next(1, 2.0), ladder.next(2, 3.9), ladder.next(4, 4.0)] == [2, 4, None]
    assert ladder.stopped == PLATEAU and ladder.saturation_rps == 4.0
    capped = Ladder(max_in_flight=4)
    assert [capped.next(1, 1.0), capped.next(2, 2.0), capped.next(4, 4.0)] == [2, 4, None]
    assert capped.stopped == LIMIT


def test_a_flood_times_its_answers_after_a_first_round_by_littles_law():
    flood = Flood(in_flight=2, min_requests=4, window_s=1.0)
    flood.begin(0.0, number=3)
    t = 0.0
    handed = [flood.take(t), flood.take(t)]
    assert flood.take(t) is None and all(j.phase == "flood-2" and j.round == 3 for j in handed)
    for _ in range(12):  # each answer takes 0.5 s: 2 in flight answer 4 per second, in lumps of two
        t += 0.5
        for job in handed:
            flood.done(job, t)
        handed = [j for j in (flood.take(t), flood.take(t)) if j is not None]
    assert flood.answers_rps() == pytest.approx(4.0) and flood.closed


def test_a_flood_whose_requests_fail_answers_nothing_and_the_sweep_spreads_no_rate():
    flood = Flood(in_flight=1, min_requests=2, window_s=0.0)
    flood.begin(0.0, number=1)
    t = 0.0
    while not flood.closed:
        job = flood.take(t)
        t += 0.01  # refused at once
        flood.done(job, t)
        flood.record({"phase": "flood-1", "ok": False})
    assert flood.answers_rps() == 0.0
    sweep = Sweep(SweepOptions(None, parse("poisson"), max_in_flight=1))
    first = sweep.first()
    first.took_s, first.outcomes = flood.took_s, flood.outcomes
    assert sweep.next(first) is None and sweep.ladder.stopped == LIMIT


def test_stamp_due_times_a_request_from_when_it_was_due():
    record = Record(t_send=100.25, ttft_s=0.5, e2e_s=2.0)
    stamp_due(record, 100.0)
    assert (record.t_due, record.send_lag_s, record.ttft_due_s, record.e2e_due_s) == (100.0, 0.25, 0.75, 2.25)
    never = Record()
    stamp_due(never, 5.0)
    assert never.t_due == 5.0 and never.send_lag_s is None and never.ttft_due_s is None


def test_jobs_carry_their_rate_across_the_wire():
    job = Job("rate", "rate-4", 1, 7, release_at=12.5, offered_rps=4.0)
    assert Job(**job.__dict__) == job  # messaging.py sends a job's __dict__ to a worker


def test_rates_parse_and_automatic_ones_round_to_three_digits():
    assert parse_rates("8,1,2") == (1.0, 2.0, 8.0)
    assert parse_rates("auto") is None
    for wrong in ("", "0", "1,1", "-2", "x", "inf"):
        with pytest.raises(ValueError, match="--rates"):
            parse_rates(wrong)
    assert rounded(6.14333) == 6.14 and rounded(0.123456) == 0.123
    with pytest.raises(ValueError, match="--duration S or --requests N"):
        RateOptions(1.0, duration_s=10.0, requests=10)
    assert list(itertools.islice(RateOptions(2.0, parse("constant")).schedule(), 3)) == [0.5, 1.0, 1.5]  # no end
