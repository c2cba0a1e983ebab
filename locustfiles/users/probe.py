"""The capacity search's probe (bench_tasks.capacity.probe): its requests are the suite's bursts and fresh prompts,
and the classroom's first questions (capacity.py)."""

from bench_tasks import chat
from bench_tasks import classroom as lessons
from bench_tasks.capacity import probe
from locustfiles.users.burst import BurstUser
from locustfiles.users.job_user import JobUser
from locustfiles.users.prompt import PromptUser


class ProbeUser(JobUser):
    """The probe's requests: a burst rung, the long fresh prompt and an answer beside it, or a classroom first
    question."""

    scenario = probe.SCENARIO

    def run_job(self, job) -> None:
        if probe.kind(job.phase) == probe.BURST:
            BurstUser.run_job(self, job)
        elif job.phase == probe.PROMPT and job.size is None:  # an answer decoding while the long prompt is read
            opening = self.opening(job.phase, job.round, job.index)
            self.stream_chat(self.job_record(job), chat.messages(chat.QUESTIONS[0], opening),
                             probe.PAUSE_TOKENS, ignore_eos=True)
        elif job.phase == probe.PROMPT:
            PromptUser.run_job(self, job)
        else:  # a fresh student's first question, answered as the class's are
            student = lessons.Student(self.options.think_time, seed=job.index, name=f"student {job.index + 1}")
            opening = self.opening(job.phase, job.round, job.index)
            self.stream_chat(self.job_record(job, turn=1), student.messages(opening=opening),
                             self.options.max_tokens, ignore_eos=self.options.ignore_eos)
