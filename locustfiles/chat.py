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
        # The first pass asks the questions as written; each later pass opens them with its run, "(run 2) ...",
        # so that no answer is read from the prefix cache of an earlier pass.
        asker = f"run {run}" if run > 1 else ""
        record = self.new_record("chat", "chat", round=run, concurrency=self.environment.runner.user_count)
        self.stream_chat(record, chat.messages(question, asker), self.options.max_tokens,
                         ignore_eos=self.options.ignore_eos, stop=list(self.options.stop) or None)
        if limit and next(_finished) == limit:
            # The last answer is in: end the run (from another greenlet: quitting kills this one).
            gevent.spawn(self.environment.runner.quit)
