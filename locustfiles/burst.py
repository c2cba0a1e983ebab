"""Bursts: N people press enter at the same moment. Connections are open beforehand and all N
requests are released by one barrier; each asks for 128 tokens.

    locust -f locustfiles/burst.py --host URL --bursts 1,4,12 --runs 3
"""

import time

from bench_tasks import chat
from bench_tasks.suite import BURST_TOKENS
from locustfiles import messaging
from locustfiles.job_user import JobUser
from locustfiles.suite_shape import SuiteShape


class BurstUser(JobUser):
    scenario = "burst"

    def run_job(self, job) -> None:
        release_at = messaging.to_local(self.environment, job.release_at)

        def judge(record, _recorder) -> None:
            record.release_offset_s = record.t_send - release_at

        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        # Opened by its own code: N people ask N questions, none served from another's cache, nor from an
        # earlier round's or burst's, nor from an earlier run's.
        opening = self.opening(job.phase, job.round, job.index)
        self.stream_chat(self.job_record(job), chat.messages(question, opening), BURST_TOKENS,
                         ignore_eos=True, judge=judge)


class BurstShape(SuiteShape):
    users = {"burst": BurstUser}
