"""Chat users: one person asking short questions, each answer streamed and measured.

``ChatUser`` runs free (chat.py: ask, read the answer, ask again, until --requests answers came; with --dataset
the file's requests, bench_tasks.traffic.feed);
``ChatQuestionUser`` asks the suite's chat phase's questions, one job at a time (quick_suite.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

import gevent
from locust import constant, task
from locust.exception import StopUser

from bench_tasks import cache_share, chat
from bench_tasks.traffic.dataset import answer_limit
from locustfiles.users.job_user import JobUser
from locustfiles.users.llm_user import LLMUser
from locustfiles.users.traffic import OwnTraffic, shareable_with_prefix


@dataclass
class Asked:
    """A run's questions so far, in this process: --requests caps the whole process, not each user."""

    started: count = field(default_factory=count)
    finished: count = field(default_factory=lambda: count(1))


class ChatUser(LLMUser):
    """Asks the chat questions (or --question's), or with --dataset the file's requests; each opened by its
    group's prefix with --prefix-tokens."""

    wait_time = constant(0)

    def on_start(self) -> None:
        super().on_start()
        self.own = self.llm.state(OwnTraffic)
        self.own.prepare(self)
        self.conversation = cache_share.Conversation()

    @task
    def ask(self) -> None:
        if self.own.feed is not None:
            self.ask_from_file(self.own.feed)
            return
        asked = self.llm.state(Asked)
        limit, n = self.options.requests, next(asked.started)
        if limit and n >= limit:
            raise StopUser()
        question, run = chat.nth_question(n, self.options.question)
        # Each question opened by its own code (the process's n-th: each worker counts its own), so that no
        # answer is read from the cache of an earlier pass, another worker's question or an earlier run.
        opening = self.opening("chat", self.process, n)
        messages, shared = self.own.prefixed(chat.messages(question, opening), n)
        record = self.new_record("chat", "chat", round=run, concurrency=self.environment.runner.user_count,
                                 shared_tokens=shared)
        shareable_with_prefix(self, record, messages, shared)
        self.stream_chat(record, messages, self.options.max_tokens,
                         ignore_eos=self.options.ignore_eos, stop=list(self.options.stop) or None)
        if limit and next(asked.finished) == limit:
            self.end_run()

    def ask_from_file(self, feed) -> None:
        ask = feed.next(self)
        if ask is None:
            raise StopUser()
        if ask.turn == 1:
            self.conversation = cache_share.Conversation()
        record = self.new_record("chat", "chat", turn=ask.turn, source=ask.source, shared_tokens=ask.shared_tokens,
                                 concurrency=self.environment.runner.user_count)
        shareable_with_prefix(self, record, ask.messages, ask.shared_tokens)
        max_tokens, ignore_eos = answer_limit(ask.max_tokens, self.options.max_tokens, self.options.ignore_eos)
        recorder = self.stream_chat(record, ask.messages, max_tokens, ignore_eos=ignore_eos,
                                    stop=list(self.options.stop) or None,
                                    judge=self.conversation.judge if ask.turn else None)
        feed.answered(self, recorder.answer_text if record.ok else None)
        if feed.over:
            self.end_run()

    def end_run(self) -> None:
        """The last answer is in: end the run (from another greenlet: quitting kills this one)."""
        gevent.spawn(self.environment.runner.quit)


class ChatQuestionUser(JobUser):
    """Three short questions, one at a time (the suite's chat phase)."""

    scenario = "chat"

    def run_job(self, job) -> None:
        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        opening = self.opening(job.phase, job.round, job.index)
        self.stream_chat(self.job_record(job), chat.messages(question, opening), chat.MAX_TOKENS)
