"""One person chatting: short questions, one at a time, each answer streamed and measured.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000
"""

from itertools import count

import gevent
from locust import constant, task
from locust.exception import StopUser

from bench_tasks import chat
from locustfiles import engine_counters
from locustfiles.llm_user import LLMUser

engine_counters.around_each_run("chat")
# Per process: --requests caps the whole process, not each user.
_started = count()
_finished = count(1)


class ChatUser(LLMUser):
    wait_time = constant(0)

    @task
    def ask(self) -> None:
        limit, n = self.options.requests, next(_started)
        if limit and n >= limit:
            raise StopUser()
        question, run = chat.nth_question(n, self.options.question)
        # Each question opened by its own code (the process's n-th: each worker counts its own), so that no
        # answer is read from the cache of an earlier pass, another worker's question or an earlier run.
        opening = self.opening("chat", getattr(self.environment.runner, "worker_index", 0), n)
        record = self.new_record("chat", "chat", round=run, concurrency=self.environment.runner.user_count)
        self.stream_chat(record, chat.messages(question, opening), self.options.max_tokens,
                         ignore_eos=self.options.ignore_eos, stop=list(self.options.stop) or None)
        if limit and next(_finished) == limit:
            # The last answer is in: end the run (from another greenlet: quitting kills this one).
            gevent.spawn(self.environment.runner.quit)
