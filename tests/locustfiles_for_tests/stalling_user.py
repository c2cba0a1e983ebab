"""The quick suite whose chat user takes its second job and never finishes it (no request, no byte)."""

import gevent

from locustfiles.suite_shape import SuiteShape
from locustfiles.quick_suite import ChatQuestionUser


class StuckChatUser(ChatQuestionUser):
    def run_job(self, job) -> None:
        if job.index == 1:
            gevent.sleep(3600)
        super().run_job(job)


class StuckSuite(SuiteShape):
    users = {"chat": StuckChatUser}
