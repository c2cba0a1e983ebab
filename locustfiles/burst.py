"""Bursts: N people press enter at the same moment. Connections are open beforehand and all N
requests are released by one barrier; each asks for 128 tokens.

    locust -f locustfiles/burst.py --host URL --bursts 1,4,12 --runs 3
"""

import time

from bench_tasks import chat
from bench_tasks.suite import BURST_TOKENS
from locustfiles import messaging
from locustfiles.coordination import SuiteShape, SuiteUser


class BurstUser(SuiteUser):
    scenario = "burst"

    def run_job(self, job) -> None:
        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        record = self.job_record(job)
        release_at = messaging.to_local(self.environment, job.release_at)

        def judge(record, _recorder) -> None:
            record.release_offset_s = record.t_send - release_at
            record.clock_offset_s = messaging.clock.offset_s

        # A distinct prefix per burst size, user and round: N people ask N questions, none served from
        # another's cache, nor from an earlier round's or burst's.
        messages = chat.messages(question, f"{job.phase} user {job.index + 1}, round {job.round}")
        self.stream_chat(record, messages, BURST_TOKENS, ignore_eos=True, judge=judge)


class BurstShape(SuiteShape):
    users = {"burst": BurstUser}
