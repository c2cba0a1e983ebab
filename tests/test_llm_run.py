"""A run's state in one object (locustfiles/llm_run.py), tested in this process with Locust's own runners
(tests/in_process.py): made once by the locustfile's one call, begun afresh by each run, and what it
carries between users, shapes and workers (the clock offset, who a worker is, jobs handed back)."""

from __future__ import annotations

import os
import time

import pytest
from locust.event import Events

from bench_tasks import engine, slo
from bench_tasks.capacity.search import Search
from bench_tasks.capacity.search_options import SearchOptions
from bench_tasks.suite import Coordinator, Job, Phase
from locustfiles import llm_run
from locustfiles.shapes.suite import SuiteShape
from locustfiles.target import Target
from locustfiles.users.chat import ChatQuestionUser, ChatUser
from locustfiles.users.job_user import JobUser
from tests import in_process
from tests.conftest import load_records


def test_the_one_call_is_made_once_per_events():
    events = Events()
    llm_run.install(events=events)
    with pytest.raises(RuntimeError, match="a runnable locustfile imports another"):
        llm_run.install(events=events)


class Heard(llm_run.RunListener):
    def __init__(self) -> None:
        self.heard: list[str] = []

    def run_starts(self, run) -> None:
        self.heard.append(f"start {run.options.runs}")

    def run_stops(self, run) -> None:
        self.heard.append("stop")

    def recorded(self, row: dict) -> None:
        self.heard.append(row["phase"])


class Suite(SuiteShape):
    users = {"chat": ChatQuestionUser}


def test_a_run_started_again_begins_afresh_and_listeners_hear_each_run(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    out, heard = tmp_path / "run", Heard()
    argv = ["--host", sim.url, "--out", str(out), "--only", "chat", "--runs", "1", "--no-llm-report"]
    with in_process.local(argv, [ChatQuestionUser], Suite, headless=False, listeners=(heard,)) as run:
        run.start()
        run.wait()
        first = run.run.target()
        guard = run.run.guard
        run.run.failure.described = {"cause": "an earlier run's"}
        run.environment.parsed_options.runs = "2"  # as the web UI's start form writes it
        run.start()  # start again
        run.wait()
        assert run.run.target() is not first and run.run.guard is not guard and not run.run.failure.failed
    assert heard.heard == ["start 1", "warmup-chat", *["chat"] * 3, "stop",
                           "start 2", "warmup-chat", *["chat"] * 6, "stop"]
    # Each run's records are its own; the first run's files were moved aside as the second began.
    assert len(load_records(out).query("phase == 'chat'")) == 6
    assert len(load_records(out / "earlier-runs" / "1").query("phase == 'chat'")) == 3
    assert all(rtt > 0 for rtt in load_records(out)["rtt_s"])  # every request went out on a StampedSocket


def test_a_workload_s_state_is_its_run_s(tmp_path):
    env = in_process.environment(["--out", str(tmp_path)])
    env.events.init.fire(environment=env, runner=env.create_local_runner(), web_ui=None)
    run = env.llm
    run.begin()
    first = run.state(list)
    assert run.state(list) is first
    env.events.test_stop.fire(environment=env)
    run.begin()
    assert run.state(list) is not first
    assert [run.number("student"), run.number("student"), run.number("user")] == [1, 2, 1]  # across runs


# -- the clock offset: one definition, None before a worker's first pong --

def test_a_worker_s_record_carries_no_offset_before_its_first_pong_and_the_measured_one_after(tmp_path):
    class Asking(ChatUser):
        host = "http://127.0.0.1:9"  # no request is sent

    with in_process.distributed(["--out", str(tmp_path)], [Asking]) as (master, workers):
        worker = workers[0]
        user = Asking(worker.environment)
        user.target = Target(model="m", profile=engine.profile("sim"), api_key="")
        before = user.new_record("chat", "chat")
        worker.run.clock.ping_all(worker.runner)
        in_process.until(lambda: worker.run.clock.offset_s is not None)
        after = user.new_record("chat", "chat")
        master_record = master.run.clock_offset_s()
    assert before.clock_offset_s is None  # not the worker's initial 0.0: nothing was measured yet
    assert after.clock_offset_s == worker.run.clock.offset_s and abs(after.clock_offset_s) < 0.05  # one clock here
    assert master_record is None  # where the records come together: one clock


# -- every lost laptop by its name --

def test_a_worker_says_who_it_is_as_it_joins(tmp_path):
    with in_process.distributed(["--out", str(tmp_path)], [ChatUser],
                                worker_argv=[["--client-host", "laptop-7"]]) as (master, workers):
        node = workers[0].runner.client_id
        ledger = master.run.desk.ledger
        in_process.until(lambda: node in ledger.machines)
        lost = ledger.lose(node, Coordinator([], clock=lambda: 0.0))  # before any run, any record
    assert ledger.machines[node] == {"client_host": "laptop-7", "client_pid": os.getpid()}
    assert (lost["client_host"], lost["client_pid"], lost["records_received"]) == ("laptop-7", os.getpid(), 0)


# -- a user that stops hands back a job that reached it too late --

def row(phase: str) -> dict:
    return {"scenario": "classroom", "phase": phase, "ok": True, "ttft_s": 0.1, "e2e_s": 0.5,
            "error": "", "flags": ""}


def window(now: list[float], verdicts: list | None = None) -> Search:
    """A search of 2 students whose first window is open (settled at once)."""
    search = Search(SearchOptions(start=2, max_students=2, settle_s=0.0, step_s=10.0, min_requests=1),
                    slo.parse("ttft_p95=0.5"), clock=lambda: now[0],
                    on_verdict=lambda step, figures: verdicts.append(figures) if verdicts is not None else None)
    search.poll()
    return search


def test_a_question_handed_back_is_as_if_never_handed_out():
    now, verdicts = [0.0], []
    search = window(now, verdicts)
    asked, late = search.take("classroom", "a"), search.take("classroom", "b")
    search.record(row(asked.phase))
    search.done(asked)
    now[0] = 10.0
    search.poll()
    # b's student stopped before asking: without its question back, the window waits for its answer.
    assert not verdicts and search.waiting_on().endswith("1 question(s) of its window in flight")
    search.give_back(late)
    assert [figures["requests"] for figures in verdicts] == [1]  # judged now, on the one question asked


def test_a_job_handed_back_is_handed_out_again_unless_its_round_was_released():
    coordinator = Coordinator([Phase("chat", "chat", 1, [Job("chat", "chat", 1, i) for i in range(2)]),
                               Phase("burst-2", "burst", 2, [Job("burst", "burst-2", 1, i) for i in range(2)],
                                     barrier=True)], clock=lambda: 0.0)
    first = coordinator.take("chat", "a")
    coordinator.give_back(first)
    assert coordinator.take("chat", "b") == first  # nobody asked it: it is asked now
    coordinator.done(first)
    coordinator.done(coordinator.take("chat", "b"))
    assert coordinator.take("burst", "a") is None  # waiting for its round
    released = coordinator.take("burst", "b")
    assert released.release_at is not None
    coordinator.give_back(released)  # its round went without it: closed
    coordinator.done(coordinator.take("burst", "a"))
    assert coordinator.finished


def test_a_worker_s_student_stopped_while_its_question_was_on_its_way_hands_it_back(tmp_path):
    now = [0.0]
    search = window(now)
    with in_process.distributed(["--out", str(tmp_path)], [ChatUser], workers=1) as (master, workers):
        master.run.serve(search)
        link = workers[0].run.link()
        assert link.take("classroom", "kept") is None and link.take("classroom", "stopped") is None  # asked
        link.leave("stopped")  # the class shrank: its student stopped before the answer came
        in_process.until(lambda: "kept" in link.replies)
        in_process.until(lambda: search.step.handed == 1, 10)
        ledger = master.run.desk.ledger
    step = search.step
    assert (step.handed, step.open) == (1, 1)  # the kept student's question only; the other came back
    assert list(ledger.held) == ["kept"] and "stopped" not in link.replies


class WaitingUser(JobUser):
    """A user that takes a job released later and waits for its release (no server: no warm-up)."""

    scenario = "burst"

    def on_start(self) -> None:
        self.user_id, self._wait_s = self.llm.user_id(), 0.0

    def run_job(self, job) -> None:
        raise AssertionError("stopped before its release")


def test_a_local_user_stopped_while_waiting_for_its_release_hands_its_job_back(tmp_path):
    coordinator = Coordinator([Phase("burst-2", "burst", 2, [Job("burst", "burst-2", 1, i) for i in range(2)],
                                     barrier=True)], clock=time.perf_counter, release_lead_s=60.0)
    with in_process.local(["--host", "http://127.0.0.1:9", "--out", str(tmp_path)], [WaitingUser]) as run:
        run.run.begin()
        run.run.serve(coordinator)
        run.start(users=2)
        users = in_process.until(lambda: [g.args[0] for g in run.runner.user_greenlets if g.args][:2] or None)
        in_process.until(lambda: len(users) == 2 and all(user._pending for user in users))  # a minute to wait
        run.runner.stop()
        in_process.until(run.stopped)
    assert coordinator.finished  # both jobs came back when their users stopped: the round is closed, not awaited


def test_a_worker_parses_locusts_defaults_once_not_once_per_option_at_each_spawn(monkeypatch):
    # Locust's worker tests each option of a spawn message against default_args_dict(), one full parse each
    # (docs/locust.md#spawn-cost): held to one parse per process, with the same defaults.
    from locust import argument_parser

    builds = []
    build = argument_parser.setup_parser_arguments
    monkeypatch.setattr(argument_parser, "setup_parser_arguments", lambda parser: builds.append(1) or build(parser))
    # Locust's own function, as a fresh worker process has it (an earlier test here may have made one), restored after.
    unpatched = getattr(argument_parser.default_args_dict, "__wrapped__", argument_parser.default_args_dict)
    monkeypatch.setattr(argument_parser, "default_args_dict", unpatched)
    unparsed = argument_parser.default_args_dict()
    builds.clear()
    llm_run.parse_locust_defaults_once()
    llm_run.parse_locust_defaults_once()  # a second worker's run state in the same process: still one cache
    options = [f"option_{i}" for i in range(105)]  # as many as a spawn message of llm-bench's carries
    assert [key in argument_parser.default_args_dict() for key in options] == [False] * 105
    assert argument_parser.default_args_dict() == unparsed and len(builds) == 1
