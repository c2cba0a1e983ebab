"""The chat workload whose third task blocks the whole Locust process (a read no greenlet can
interrupt): the run's own watchdog cannot run, only the command line's backstop can end it."""

import os
from itertools import count

from locust import task

from locustfiles import llm_run
from locustfiles.users import chat

_r, _w = os.pipe()
_asked = count(1)


class WedgedChatUser(chat.ChatUser):
    @task
    def ask(self) -> None:
        if next(_asked) == 3:
            os.read(_r, 1)  # nothing is ever written: blocks the process, gevent's hub included
        super().ask()


llm_run.install()
