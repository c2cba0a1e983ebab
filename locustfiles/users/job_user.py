"""A user that pulls jobs from the run's coordinator (the suite's plan, the capacity search's probe).

A user with nothing to do waits in ``wait_time``, never inside a task, so stopping is clean; a job
released at an instant (a burst) waits there for it too. A user that stops hands back a job it was
waiting to run, and one still on its way to it (messaging.py). Subclasses set ``scenario`` and implement
``run_job``.
"""

from __future__ import annotations

import time

from locust import task

from bench_tasks.server import Unreachable
from bench_tasks.suite import Job
from locustfiles.users.llm_user import LLMUser

IDLE_S = 0.05  # how often a user with no job asks again


class JobUser(LLMUser):
    abstract = True
    scenario = ""
    _pending: Job | None = None  # a job taken, waiting in wait_time for its release
    user_id = ""

    def wait_time(self) -> float:
        return self._wait_s

    def on_start(self) -> None:
        self.user_id = self.llm.user_id()
        super().on_start()
        self._wait_s = 0.0

    def on_stop(self) -> None:
        if self.user_id:
            self.llm.link().leave(self.user_id, self._pending)
            self._pending = None

    @task
    def work(self) -> None:
        job = self._pending or self.llm.link().take(self.scenario, self.user_id)
        self._pending = None
        if job is None:
            self._wait_s = IDLE_S
            return
        if job.release_at is not None:
            delay = self.llm.to_local(job.release_at) - time.perf_counter()
            if delay > 0.0005:
                self._pending, self._wait_s = job, delay  # sleep until the release in wait_time
                return
        self._wait_s = 0.0
        try:
            self.run_job(job)
        except Unreachable as exc:  # no server while the job's prompt was sized: a failed request
            self.unreachable(self.job_record(job, prompt_size=job.size, needle_depth=job.depth), exc)
        finally:
            self.llm.link().done(job, self.user_id)

    def run_job(self, job: Job) -> None:
        raise NotImplementedError

    def job_record(self, job: Job, **labels):
        return self.new_record(job.scenario, job.phase, round=job.round, concurrency=job.concurrency, **labels)
