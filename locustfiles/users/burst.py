"""Bursts: N people press enter at the same moment (burst.py); the requests are released by the
coordinator's barrier, on its clock, and each asks for 128 tokens."""

from bench_tasks import chat
from bench_tasks.suite import BURST_TOKENS
from locustfiles.users.job_user import JobUser


class BurstUser(JobUser):
    scenario = "burst"

    def run_job(self, job) -> None:
        release_at = self.llm.to_local(job.release_at)

        def judge(record, _recorder) -> None:
            record.release_offset_s = record.t_send - release_at

        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        # Opened by its own code: N people ask N questions, none served from another's cache, nor from an
        # earlier round's or burst's, nor from an earlier run's.
        opening = self.opening(job.phase, job.round, job.index)
        self.stream_chat(self.job_record(job), chat.messages(question, opening), BURST_TOKENS,
                         ignore_eos=True, judge=judge)
