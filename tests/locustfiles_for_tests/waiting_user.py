"""A chat user that asks, then waits with its connection kept alive until the file named by
$LLM_BENCH_TEST_GO exists (writing ``asked`` beside it first), asks once more and ends the run: a test
restarts the server while it waits (tests/test_restart.py)."""

import os
from pathlib import Path

import gevent
from locust import constant, task
from locust.exception import StopUser

from bench_tasks import chat
from locustfiles import llm_run
from locustfiles.users.llm_user import LLMUser


class WaitingUser(LLMUser):
    wait_time = constant(0)
    asked = 0

    @task
    def ask(self) -> None:
        go = Path(os.environ["LLM_BENCH_TEST_GO"])
        if self.asked == 2:
            gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        if self.asked == 1:
            (go.parent / "asked").write_text("")
            while not go.exists():
                gevent.sleep(0.02)
        record = self.new_record("chat", "chat", round=self.asked + 1)
        self.stream_chat(record, chat.messages(chat.QUESTIONS[0], self.opening("chat", self.asked)), 16,
                         ignore_eos=True)
        self.asked += 1


llm_run.install()
