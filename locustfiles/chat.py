"""One person chatting: short questions, one at a time, each answer streamed and measured.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000
"""

from itertools import count

import gevent

from locust import constant, task
from locust.exception import StopUser

from bench_tasks import chat
from locustfiles.llm_user import LLMUser

_sent = count()  # per process: --llm-requests caps the whole process, not each user


class ChatUser(LLMUser):
    wait_time = constant(0)

    @task
    def ask(self) -> None:
        n = next(_sent)
        limit = self.environment.parsed_options.llm_requests
        if limit and n >= limit:
            self.finish()
        question = chat.QUESTIONS[n % len(chat.QUESTIONS)]
        record = self.new_record("chat", "chat", round=n // len(chat.QUESTIONS) + 1,
                                 concurrency=self.environment.runner.user_count)
        self.stream_chat(record, chat.messages(question), self.environment.parsed_options.max_tokens)

    def finish(self) -> None:
        # The last user to run out of requests ends the run, so a headless run stops by itself.
        if self.environment.runner.user_count <= 1:
            gevent.spawn(self.environment.runner.quit)
        raise StopUser()
