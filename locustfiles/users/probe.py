"""The capacity search's probe (bench_tasks.capacity.probe): its requests are the suite's bursts and fresh prompts,
and the classroom's first questions, each followed by its conversation's second (capacity.py)."""

from bench_tasks import cache_share, chat
from bench_tasks import classroom as lessons
from bench_tasks.capacity import probe
from locustfiles.users.burst import BurstUser
from locustfiles.users.job_user import JobUser
from locustfiles.users.prompt import PromptUser


class ProbeUser(JobUser):
    """The probe's requests: a burst rung, the long fresh prompt and an answer beside it, or a classroom
    conversation's first two questions."""

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
        else:
            self.converse(job)

    def converse(self, job) -> None:
        """A fresh student's first question, answered as the class's are, then (when it was answered) the
        conversation's second: what a later turn sends and what of it the server kept."""
        student = lessons.Student(self.options.think_time, seed=job.index, name=f"student {job.index + 1}")
        opening, resent = self.opening(job.phase, job.round, job.index), cache_share.Conversation()
        first = student.messages(opening=opening)
        record = self.job_record(job, turn=1)
        recorder = self.stream_chat(record, first, self.options.max_tokens, ignore_eos=self.options.ignore_eos,
                                    judge=resent.judge)
        if record.ok:
            student.answered(first, recorder.answer_text)
            self.stream_chat(self.job_record(job, turn=2), student.messages(opening=opening),
                             probe.SECOND_TURN_TOKENS, ignore_eos=True, judge=resent.judge)
