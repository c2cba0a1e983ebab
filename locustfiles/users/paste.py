"""One person pastes long documents while the others chat (paste.py): the chatting users ask fresh questions
back to back; the pasting user sends fresh prompts of --paste-size tokens back to back, each once an answer
is streaming, and after --requests pastes the chats finish their answers and a local run ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import count

import gevent
from locust import constant, task
from locust.exception import StopUser
from locust.runners import LocalRunner

from bench_tasks import chat, paste, prompt
from bench_tasks.server import Unreachable
from bench_tasks.tokens import token_counter
from locustfiles.users.llm_user import LLMUser


@dataclass
class Pasting:
    """A run's pastes and chats in this process: a new run (the web UI's start again) begins afresh."""

    chats: paste.Chats = field(default_factory=paste.Chats)  # this process's chat answers in flight
    asked: count = field(default_factory=count)
    pasted: count = field(default_factory=count)


class PasteChatUser(LLMUser):
    scenario = paste.SCENARIO
    wait_time = constant(0)
    last_ttft_s = last_e2e_s = None

    @task
    def ask(self) -> None:
        run = self.llm.state(Pasting)
        if run.chats.closing:
            raise StopUser()
        n = next(run.asked)
        question, round_ = chat.nth_question(n, self.options.question)
        opening = self.opening(paste.CHAT_PHASE, self.process, n)
        record = self.new_record(paste.SCENARIO, paste.CHAT_PHASE, round=round_,
                                 concurrency=self.environment.runner.user_count)
        run.chats.asked(self, time.perf_counter(), self.last_ttft_s, self.last_e2e_s)
        try:
            self.stream_chat(record, chat.messages(question, opening), self.options.max_tokens,
                             ignore_eos=self.options.ignore_eos, stop=list(self.options.stop) or None)
        finally:
            run.chats.answered(self)
        self.last_ttft_s, self.last_e2e_s = record.ttft_s, record.e2e_s


class PasteUser(LLMUser):
    fixed_count = 1  # one pasting user, whatever -u says; the others chat
    scenario = paste.SCENARIO
    wait_time = constant(0)

    @task
    def paste(self) -> None:
        run = self.llm.state(Pasting)
        n, size = next(run.pasted), self.options.paste_size
        if self.options.requests and n >= self.options.requests:
            self.close(run.chats)
        count_tokens = self.llm.activity.noted(token_counter(self.environment.host, self.target.profile,
                                                             self.target.model, self.target.api_key,
                                                             self.options.read_timeout))
        phase = paste.paste_phase(size)
        opening = self.opening(phase, self.process, n)
        record = self.new_record(paste.SCENARIO, phase, round=n + 1, prompt_size=size)
        try:
            messages, _ = prompt.calibrate(lambda words: prompt.fresh_prompt(opening, words, seed=n), count_tokens,
                                           size)
        except Unreachable as exc:  # no server to count the document's tokens: this paste failed
            self.unreachable(record, exc)
            return
        self.wait_for_a_streaming_answer(run.chats)
        self.stream_chat(record, messages, paste.ANSWER_TOKENS, ignore_eos=True)

    def wait_for_a_streaming_answer(self, chats: paste.Chats) -> None:
        """Until a chat answer of this process streams (at once when its answers are too short to catch; at
        most paste.WAIT_FOR_STREAMING_S: a worker without chatting users gets its pastes anyway)."""
        deadline = time.perf_counter() + paste.WAIT_FOR_STREAMING_S
        while not (chats.streaming(time.perf_counter()) or chats.too_short_to_catch()) \
                and time.perf_counter() < deadline:
            gevent.sleep(0.01)

    def close(self, chats: paste.Chats) -> None:
        """The pastes are done: the chats finish their answers, then a local run ends."""
        chats.closing = True
        while chats.in_flight:
            gevent.sleep(0.05)
        if isinstance(self.environment.runner, LocalRunner):
            gevent.spawn(self.environment.runner.quit)  # from another greenlet: quitting kills this one
        raise StopUser()
