"""One person chatting: short questions, one at a time, each answer streamed and measured.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000
"""

from itertools import count

import gevent
from locust import constant, task
from locust.exception import StopUser

from bench_tasks import chat
from locustfiles.llm_user import LLMUser

# Per process: --llm-requests caps the whole process, not each user.
_started = count()
_finished = count(1)


class ChatUser(LLMUser):
    wait_time = constant(0)

    @task
    def ask(self) -> None:
        limit = self.environment.parsed_options.llm_requests
        n = next(_started)
        if limit and n >= limit:
            raise StopUser()
        question = chat.QUESTIONS[n % len(chat.QUESTIONS)]
        record = self.new_record("chat", "chat", round=n // len(chat.QUESTIONS) + 1,
                                 concurrency=self.environment.runner.user_count)
        opts = self.environment.parsed_options
        self.stream_chat(record, chat.messages(question), opts.max_tokens, ignore_eos=opts.ignore_eos)
        if limit and next(_finished) == limit:
            # The last answer is in: end the run (from another greenlet: quitting kills this one).
            gevent.spawn(self.environment.runner.quit)
