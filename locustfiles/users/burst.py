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
        self.stream_chat(self.job_record(job), chat.messages(question, self.asker(job)), BURST_TOKENS,
                         ignore_eos=True, judge=judge)

    def asker(self, job) -> str:
        """A distinct prefix per burst size, user and round: N people ask N questions, none served from
        another's cache, nor from an earlier round's or burst's."""
        return f"{job.phase} user {job.index + 1}, round {job.round}"
