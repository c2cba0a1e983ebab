"""The quick suite whose chat user raises in its second job (mid-suite, after records were written)."""

from locustfiles.burst import BurstUser
from locustfiles.suite_shape import SuiteShape
from locustfiles.quick_suite import ChatQuestionUser


class BrokenChatUser(ChatQuestionUser):
    def run_job(self, job) -> None:
        if job.index == 1:
            raise ZeroDivisionError("injected in a task")
        super().run_job(job)


class BrokenSuite(SuiteShape):
    users = {"chat": BrokenChatUser, "burst": BurstUser}
