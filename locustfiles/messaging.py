"""How users reach the coordinator: directly in a local run, by Locust messages from a worker.

Worker -> master: ``llm_hello`` (who this worker is: its --client-host and pid, sent as it connects),
``llm_take`` (a user is ready for a job), ``llm_done`` (a job finished), ``llm_give_back`` (a job
reached a user that will not run it), ``llm_leave`` (a user stopped), ``llm_ping`` (clock offset).
Master -> worker: ``llm_job`` (a job or none yet), ``llm_pong``.

A user reaches its link as ``environment.llm.work``: a ``LocalWork`` where the shape runs, a
``RemoteWork`` on a worker; the master's ``Desk`` answers the workers' messages with its coordinator and
keeps the ``Ledger`` of who holds what. A user that stops (``leave``) hands back what reached it too
late: a job it was waiting to run, and a job still on its way to it (a worker asks asynchronously, so
the answer to a question may come after its user was stopped, e.g. when a class shrinks); the
coordinator takes it back (``give_back``).

Release instants are in the master's ``perf_counter`` clock. Each worker estimates the offset of
its own clock by ping/pong (NTP-style: offset = t_master - midpoint of the round trip, taken from
the exchange with the smallest round trip) and converts release instants into its own clock.
"""

from __future__ import annotations

import time

import gevent

from bench_tasks.suite import Coordinator, Job, records_per_job
from locustfiles import failure
from locustfiles.activity import Activity

PINGS = 15


class LocalWork:
    """Where the shape runs: the coordinator, called directly."""

    def __init__(self, coordinator: Coordinator, activity: Activity) -> None:
        self.coordinator = coordinator
        self.activity = activity

    def take(self, scenario: str, user: str) -> Job | None:
        job = self.coordinator.take(scenario, user)
        if job is not None:
            self.activity.note()
        return job

    def done(self, job: Job, user: str) -> None:
        self.activity.note()
        self.coordinator.done(job)

    def leave(self, user: str, unrun: Job | None = None) -> None:
        """``user`` stops: ``unrun`` (a job it took and will not run) goes back; it waits for nothing more."""
        if unrun is not None:
            self.coordinator.give_back(unrun)
        self.coordinator.forget(user)


class RemoteWork:
    """Worker side: asks the master, and answers None until the master's reply has arrived."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.replies: dict[str, dict | None] = {}
        self.asked: set[str] = set()  # users whose question is on its way
        self.gone: set[str] = set()  # users that stopped while their question was on its way

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

    def leave(self, user: str, unrun: Job | None = None) -> None:
        """``user`` stops: ``unrun``, a job already here for it and the one still on its way go back."""
        if unrun is not None:
            self._give_back(unrun.__dict__, user)
        reply = self.replies.pop(user, None)
        if reply:
            self._give_back(reply, user)
        if user in self.asked:
            self.asked.discard(user)
            self.gone.add(user)  # its answer is handed back when it comes
        self.runner.send_message("llm_leave", {"user": user})

    def new_run(self) -> None:
        self.replies.clear()
        self.asked.clear()

    def on_job(self, environment, msg, **_kwargs) -> None:
        user, job = msg.data["user"], msg.data["job"]
        if user in self.asked:
            self.replies[user] = job
            return
        self.gone.discard(user)  # stopped before its answer came (or a stale answer): nobody will run it
        if job:
            self._give_back(job, user)

    def _give_back(self, job: dict, user: str) -> None:
        self.runner.send_message("llm_give_back", {"job": job, "user": user})


class Clock:
    """This process's estimate of (master clock - own clock), from ping/pong: None until a pong came."""

    def __init__(self) -> None:
        self.offset_s: float | None = None
        self.rtt_s: float | None = None
        self._sent: dict[int, float] = {}

    def to_local(self, t_master: float) -> float:
        """An instant of the master's clock on this one (as is, before any pong came)."""
        return t_master - (self.offset_s or 0.0)

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


class Ledger:
    """Master side: which worker holds which job, so a dead worker's work is closed, not awaited, and
    which machine each worker is."""

    def __init__(self) -> None:
        self.users_of: dict[str, set[str]] = {}  # worker node -> its users
        self.held: dict[str, Job] = {}  # user -> job it is running
        self.records_done: dict[str, int] = {}  # worker node -> records its finished jobs made
        self.records_in: dict[str, int] = {}  # worker node -> measured records received (no warm-ups)
        self.machines: dict[str, dict] = {}  # worker node -> its client_host and client_pid
        self.lost_workers: set[str] = set()  # lost for good: a node id is never reused

    def new_run(self) -> None:
        self.users_of.clear()
        self.held.clear()
        self.records_done.clear()
        self.records_in.clear()

    def met(self, node: str, machine: dict) -> None:
        """A worker said who it is as it connected."""
        self.machines[node] = {"client_host": machine.get("client_host", ""), "client_pid": machine.get("client_pid")}

    def heard_from(self, node: str, rows) -> None:
        """A worker's report: count its measured records; its first records name its machine if it did not."""
        self.records_in[node] = self.records_in.get(node, 0) + sum(1 for r in rows if r.get("scenario") != "warmup")
        if rows and node not in self.machines:
            self.met(node, rows[0])

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
        machine = self.machines.get(node, {"client_host": "", "client_pid": None})  # unknown: it never said
        return {"worker": node, **machine, "lost_at": time.time(), "phase": phase, "in_flight_jobs": len(lost_jobs),
                "in_flight": [{"phase": job.phase, "round": job.round, "index": job.index} for job in lost_jobs],
                "records_finished": self.records_done.get(node, 0),
                "records_received": self.records_in.get(node, 0)}


class Desk:
    """Master side: the workers' users take, finish and give back jobs by messages, answered here with
    this run's coordinator (None until the shape serves one)."""

    MESSAGES = ("llm_hello", "llm_take", "llm_done", "llm_give_back", "llm_leave", "llm_ping")

    def __init__(self, runner, activity: Activity) -> None:
        self.runner = runner
        self.activity = activity
        self.coordinator: Coordinator | None = None
        self.ledger = Ledger()
        # Locust logs a handler's exception and goes on, leaving the worker's user waiting: fail instead.
        for message in self.MESSAGES:
            runner.register_message(message, failure.handled(message, getattr(self, f"_on_{message[4:]}")))

    def _on_hello(self, environment, msg, **_kwargs) -> None:
        self.ledger.met(msg.node_id, msg.data)

    def _on_take(self, environment, msg, **_kwargs) -> None:
        user = msg.data["user"]
        if self.coordinator is None or msg.node_id in self.ledger.lost_workers:
            job = None
        else:
            job = self.coordinator.take(msg.data["scenario"], user)
            self.ledger.users_of.setdefault(msg.node_id, set()).add(user)
            if job is not None:
                self.ledger.held[user] = job
                self.activity.note()
        self.runner.send_message("llm_job", {"user": user, "job": job and job.__dict__}, client_id=msg.node_id)

    def _on_done(self, environment, msg, **_kwargs) -> None:
        if self.ledger.held.pop(msg.data["user"], None) is None:
            return  # already closed as lost
        self.activity.note()
        job = Job(**msg.data["job"])
        self.ledger.records_done[msg.node_id] = self.ledger.records_done.get(msg.node_id, 0) + records_per_job(job)
        if self.coordinator is not None:
            self.coordinator.done(job)

    def _on_give_back(self, environment, msg, **_kwargs) -> None:
        if self.ledger.held.pop(msg.data["user"], None) is None:
            return  # already closed as lost
        self.activity.note()
        if self.coordinator is not None:
            self.coordinator.give_back(Job(**msg.data["job"]))

    def _on_leave(self, environment, msg, **_kwargs) -> None:
        self.ledger.users_of.get(msg.node_id, set()).discard(msg.data["user"])
        if self.coordinator is not None:
            self.coordinator.forget(msg.data["user"])

    def _on_ping(self, environment, msg, **_kwargs) -> None:
        self.runner.send_message("llm_pong", {"i": msg.data["i"], "t_master": time.perf_counter()},
                                 client_id=msg.node_id)
