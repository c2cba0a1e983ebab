"""Chat users: one person asking short questions, each answer streamed and measured.

``ChatUser`` runs free (chat.py: ask, read the answer, ask again, until --requests answers came);
``ChatQuestionUser`` asks the suite's chat phase's questions, one job at a time (quick_suite.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

import gevent
from locust import constant, task
from locust.exception import StopUser

from bench_tasks import chat
from locustfiles.users.job_user import JobUser
from locustfiles.users.llm_user import LLMUser


@dataclass
class Asked:
    """A run's questions so far, in this process: --requests caps the whole process, not each user."""

    started: count = field(default_factory=count)
    finished: count = field(default_factory=lambda: count(1))


class ChatUser(LLMUser):
    wait_time = constant(0)

    @task
    def ask(self) -> None:
        asked = self.llm.state(Asked)
        limit, n = self.options.requests, next(asked.started)
        if limit and n >= limit:
            raise StopUser()
        question, run = chat.nth_question(n, self.options.question)
        # Each question opened by its own code (the process's n-th: each worker counts its own), so that no
        # answer is read from the cache of an earlier pass, another worker's question or an earlier run.
        opening = self.opening("chat", getattr(self.environment.runner, "worker_index", 0), n)
        record = self.new_record("chat", "chat", round=run, concurrency=self.environment.runner.user_count)
        self.stream_chat(record, chat.messages(question, opening), self.options.max_tokens,
                         ignore_eos=self.options.ignore_eos, stop=list(self.options.stop) or None)
        if limit and next(asked.finished) == limit:
            # The last answer is in: end the run (from another greenlet: quitting kills this one).
            gevent.spawn(self.environment.runner.quit)


class ChatQuestionUser(JobUser):
    """Three short questions, one at a time (the suite's chat phase)."""

    scenario = "chat"

    def run_job(self, job) -> None:
        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        opening = self.opening(job.phase, job.round, job.index)
        self.stream_chat(self.job_record(job), chat.messages(question, opening), chat.MAX_TOKENS)
