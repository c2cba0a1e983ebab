"""The chat workload whose third task blocks the whole Locust process (a read no greenlet can
interrupt): the run's own watchdog cannot run, only the command line's backstop can end it."""

import os

from locust import task

from locustfiles.chat import ChatUser

_r, _w = os.pipe()
_asked = 0


class WedgedChatUser(ChatUser):
    @task
    def ask(self) -> None:
        global _asked
        _asked += 1
        if _asked == 3:
            os.read(_r, 1)  # nothing is ever written: blocks the process, gevent's hub included
        super().ask()


ChatUser = None  # noqa: F811 - only the wedged user runs
