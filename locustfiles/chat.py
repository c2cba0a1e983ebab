"""One person chatting: short questions, one at a time, each answer streamed and measured.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000
"""

from itertools import count

import gevent
from locust import constant, events, task
from locust.exception import StopUser
from locust.runners import WorkerRunner

from bench_tasks import chat
from locustfiles.coordination import read_engine_counters
from locustfiles.llm_user import LLMUser

# Per process: --llm-requests caps the whole process, not each user.
_started = count()
_finished = count(1)


@events.test_start.add_listener
def _counters_before(environment, **_kwargs) -> None:
    if not isinstance(environment.runner, WorkerRunner):  # where the records come together
        read_engine_counters(environment, "chat", "before")


@events.test_stop.add_listener
def _counters_after(environment, **_kwargs) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        read_engine_counters(environment, "chat", "after")


class ChatUser(LLMUser):
    wait_time = constant(0)

    @task
    def ask(self) -> None:
        limit = self.environment.parsed_options.llm_requests
        n = next(_started)
        if limit and n >= limit:
            raise StopUser()
        opts = self.environment.parsed_options
        questions = opts.chat_question or chat.QUESTIONS
        question = questions[n % len(questions)]
        record = self.new_record("chat", "chat", round=n // len(questions) + 1,
                                 concurrency=self.environment.runner.user_count)
        self.stream_chat(record, chat.messages(question), opts.max_tokens, ignore_eos=opts.ignore_eos,
                         stop=opts.chat_stop)
        if limit and next(_finished) == limit:
            # The last answer is in: end the run (from another greenlet: quitting kills this one).
            gevent.spawn(self.environment.runner.quit)
