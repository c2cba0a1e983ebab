"""How users reach the coordinator: directly in a local run, by Locust messages from a worker.

Worker -> master: ``llm_take`` (a user is ready for a job), ``llm_done`` (a job finished),
``llm_ping`` (clock offset). Master -> worker: ``llm_job`` (a job or none yet), ``llm_pong``.

Release instants are in the master's ``perf_counter`` clock. Each worker estimates the offset of
its own clock by ping/pong (NTP-style: offset = t_master - midpoint of the round trip, taken from
the exchange with the smallest round trip) and converts release instants into its own clock.
"""

from __future__ import annotations

import os
import time

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from bench_tasks.suite import Coordinator, Job, records_per_job
from locustfiles import activity, failure

PINGS = 15


class LocalWork:
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def take(self, scenario: str, user: str) -> Job | None:
        job = self.coordinator.take(scenario, user)
        if job is not None:
            activity.note()
        return job

    def done(self, job: Job, user: str) -> None:
        activity.note()
        self.coordinator.done(job)


class RemoteWork:
    """Worker side: asks the master, and answers None until the master's reply has arrived."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.replies: dict[str, dict | None] = {}
        self.asked: set[str] = set()

    def take(self, scenario: str, user: str) -> Job | None:
        if user in self.replies:
            self.asked.discard(user)
            job = self.replies.pop(user)
            return Job(**job) if job else None
        if user not in self.asked:
            self.asked.add(user)
            self.runner.send_message("llm_take", {"scenario": scenario, "user": user})
        return None

    def done(self, job: Job, user: str) -> None:
        self.runner.send_message("llm_done", {"job": job.__dict__, "user": user})

    def on_job(self, environment, msg, **_kwargs) -> None:
        self.replies[msg.data["user"]] = msg.data["job"]


class Clock:
    """This process's estimate of (master clock - own clock), from ping/pong."""

    def __init__(self) -> None:
        self.offset_s = 0.0
        self.rtt_s: float | None = None
        self._sent: dict[int, float] = {}

    def ping_all(self, runner) -> None:
        for i in range(PINGS):
            self._sent[i] = time.perf_counter()
            runner.send_message("llm_ping", {"i": i})
            gevent.sleep(0.02)

    def on_pong(self, environment, msg, **_kwargs) -> None:
        t_back = time.perf_counter()
        t_out = self._sent.pop(msg.data["i"], None)
        if t_out is None:
            return
        rtt = t_back - t_out
        if self.rtt_s is None or rtt < self.rtt_s:
            self.rtt_s = rtt
            self.offset_s = msg.data["t_master"] - (t_out + t_back) / 2


_work: LocalWork | RemoteWork | None = None
_coordinator: Coordinator | None = None
clock = Clock()


def serve(environment, coordinator: Coordinator) -> None:
    """Where the shape runs: make the coordinator reachable for users, local or remote."""
    global _work, _coordinator
    _coordinator = coordinator
    if not isinstance(environment.runner, MasterRunner):
        _work = LocalWork(coordinator)


def work(environment) -> LocalWork | RemoteWork:
    assert _work is not None, "no coordinator: run a locustfile that defines the suite's shape"
    return _work


def clock_offset_s(environment) -> float | None:
    """On a worker whose pings came back: the master's clock minus this one (a record's t_send plus
    it is on the master's clock, shared by every worker); None elsewhere (a local run has one clock)."""
    if isinstance(environment.runner, WorkerRunner) and clock.rtt_s is not None:
        return clock.offset_s
    return None


def to_local(environment, t_master: float) -> float:
    return t_master - clock.offset_s if isinstance(environment.runner, WorkerRunner) else t_master


def clock_offset_s(environment) -> float | None:
    """The master's clock minus this process's, on a worker (its records then share the master's clock);
    None where the records come together."""
    return clock.offset_s if isinstance(environment.runner, WorkerRunner) else None


def user_id(user) -> str:
    return f"{os.getpid()}-{id(user)}"


class Ledger:
    """Master side: which worker holds which job, so a dead worker's work is closed, not awaited."""

    def __init__(self) -> None:
        self.users_of: dict[str, set[str]] = {}  # worker node -> its users
        self.held: dict[str, Job] = {}  # user -> job it is running
        self.records_done: dict[str, int] = {}  # worker node -> records its finished jobs made
        self.records_in: dict[str, int] = {}  # worker node -> measured records received (no warm-ups)
        self.machines: dict[str, dict] = {}  # worker node -> client_host and client_pid its records carry
        self.lost_workers: set[str] = set()

    def heard_from(self, node: str, rows) -> None:
        """A worker's report: count its measured records; its first records name its machine."""
        self.records_in[node] = self.records_in.get(node, 0) + sum(1 for r in rows if r.get("scenario") != "warmup")
        if rows and node not in self.machines:
            self.machines[node] = {"client_host": rows[0].get("client_host", ""),
                                   "client_pid": rows[0].get("client_pid")}

    def lose(self, node: str, coordinator: Coordinator) -> dict:
        """Close everything the worker held; say which machine it was, when, and what may be missing."""
        self.lost_workers.add(node)
        phase = coordinator.phase.name if coordinator.phase is not None else ""  # before closing moves it on
        lost_jobs: list[Job] = []  # in flight: their records (agent: up to a session's) never came
        for user in self.users_of.pop(node, set()):
            job = self.held.pop(user, None)
            if job is not None:
                coordinator.done(job)
                lost_jobs.append(job)
            lost_jobs += coordinator.forget(user)
        machine = self.machines.get(node, {"client_host": "", "client_pid": None})  # unknown: no record came
        return {"worker": node, **machine, "lost_at": time.time(), "phase": phase, "in_flight_jobs": len(lost_jobs),
                "in_flight": [{"phase": job.phase, "round": job.round, "index": job.index} for job in lost_jobs],
                "records_finished": self.records_done.get(node, 0),
                "records_received": self.records_in.get(node, 0)}


ledger = Ledger()


# -- master side handlers --
def _on_take(environment, msg, **_kwargs) -> None:
    if _coordinator is None or msg.node_id in ledger.lost_workers:
        job = None
    else:
        job = _coordinator.take(msg.data["scenario"], msg.data["user"])
        ledger.users_of.setdefault(msg.node_id, set()).add(msg.data["user"])
        if job is not None:
            ledger.held[msg.data["user"]] = job
            activity.note()
    environment.runner.send_message("llm_job", {"user": msg.data["user"], "job": job and job.__dict__},
                                    client_id=msg.node_id)


def _on_done(environment, msg, **_kwargs) -> None:
    if ledger.held.pop(msg.data["user"], None) is None:
        return  # already closed as lost
    activity.note()
    job = Job(**msg.data["job"])
    ledger.records_done[msg.node_id] = ledger.records_done.get(msg.node_id, 0) + records_per_job(job)
    if _coordinator is not None:
        _coordinator.done(job)


@events.worker_report.add_listener
def _count_records(client_id, data) -> None:
    ledger.heard_from(client_id, data.get("llm_records", ()))


def _on_ping(environment, msg, **_kwargs) -> None:
    environment.runner.send_message("llm_pong", {"i": msg.data["i"], "t_master": time.perf_counter()},
                                    client_id=msg.node_id)


@events.init.add_listener
def _register(environment, runner=None, **_kwargs) -> None:
    global _work
    if isinstance(runner, MasterRunner):
        # Locust logs a handler's exception and goes on, leaving the worker's user waiting: fail instead.
        for message, handler in (("llm_take", _on_take), ("llm_done", _on_done), ("llm_ping", _on_ping)):
            runner.register_message(message, failure.handled(message, handler))
    elif isinstance(runner, WorkerRunner):
        _work = RemoteWork(runner)
        runner.register_message("llm_job", _work.on_job)
        runner.register_message("llm_pong", clock.on_pong)


@events.test_start.add_listener
def _measure_offset(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner):
        gevent.spawn(clock.ping_all, environment.runner)
