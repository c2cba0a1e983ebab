"""A room of users and a server, simulated event by event on a clock of its own: the open loop's
coordinator (bench_tasks.open_loop) runs behind it exactly as Locust's users would drive it, and every
request's record comes out as the run would write it, its true times known. When the coordinator has
finished, users stop asking and the requests in flight are still answered.

Users ask for a job every ``poll_s`` while idle (job_user.py's loop), sleep until a job's due time,
send; the server answers ``slots`` requests at once in the order they came, each in ``service_s``
(its first token after ``first_token_s``), ``tokens`` tokens each; the pool grows to what the
coordinator asks for, at once. Nothing here is a figure of the client: the tests hold the client's
machinery to what this room knows.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from bench_tasks.open_loop import SCENARIO, stamp_due, unsent_fields
from bench_tasks.record import Record


class Room:
    def __init__(self, slots: int, service_s: float, first_token_s: float = 0.05, tokens: int = 64,
                 poll_s: float = 0.05, tick_s: float = 0.1) -> None:
        self.slots, self.service_s, self.first_token_s, self.tokens = slots, service_s, first_token_s, tokens
        self.poll_s, self.tick_s = poll_s, tick_s
        self.t = 1000.0  # any origin: nothing may depend on it
        self._events: list = []
        self._order = itertools.count()
        self.queue: deque = deque()
        self.busy = 0
        self.users = 0
        self.records: list[dict] = []
        self.most_users = 0
        self.coordinator = None

    def now(self) -> float:
        return self.t

    def _at(self, t: float, action, *args) -> None:
        heapq.heappush(self._events, (t, next(self._order), action, args))

    def run(self, coordinator, limit_s: float = 3600.0) -> list[dict]:
        self.coordinator = coordinator
        coordinator.on_unsent = self._unsent
        self._at(self.t, self._tick)
        end = self.t + limit_s
        while self._events and self.t < end:  # after the end, the requests in flight are still answered
            self.t, _n, action, args = heapq.heappop(self._events)
            action(*args)
        return self.records

    # -- the shape and the users --
    def _tick(self) -> None:
        if self.coordinator.finished:
            return
        self.coordinator.poll()
        wanted = self.coordinator.phase.users if self.coordinator.phase is not None else 0
        while self.users < wanted:
            self.users += 1
            self._at(self.t, self._ask, f"user-{self.users}")
        self.most_users = max(self.most_users, self.users)
        self._at(self.t + self.tick_s, self._tick)

    def _ask(self, user: str) -> None:
        if self.coordinator.finished:
            return
        job = self.coordinator.take(SCENARIO, user)
        if job is None:
            self._at(self.t + self.poll_s, self._ask, user)
        elif job.release_at is not None and job.release_at > self.t:
            self._at(job.release_at, self._send, user, job)
        else:
            self._send(user, job)

    # -- the server --
    def _send(self, user: str, job) -> None:
        self.queue.append((user, job, self.t))
        self._serve()

    def _serve(self) -> None:
        while self.busy < self.slots and self.queue:
            user, job, sent = self.queue.popleft()
            self.busy += 1
            self._at(self.t + self.service_s, self._answer, user, job, sent)

    def _answer(self, user: str, job, sent: float) -> None:
        self.busy -= 1
        e2e = self.t - sent
        decode_s = self.service_s - self.first_token_s
        record = Record(scenario=job.scenario, phase=job.phase, round=job.round, user=user,
                        ok=True, t_send=sent, ttft_s=e2e - decode_s, e2e_s=e2e, decode_s=decode_s,
                        completion_tokens=self.tokens, decode_tps=(self.tokens - 1) / decode_s,
                        itl_s=decode_s / (self.tokens - 1), offered_rps=job.offered_rps, concurrency=job.concurrency)
        if job.release_at is not None:
            stamp_due(record, job.release_at)
        self.records.append(record.to_dict())
        self.coordinator.done(job)
        self._serve()
        self._ask(user)

    def _unsent(self, job) -> None:
        self.records.append({**Record().to_dict(), **unsent_fields(job, job.release_at)})
