"""How many students can this server take? A short probe of the server, then classes of students
from the predicted knee until the boundary of the SLO is found.

    locust -f locustfiles/capacity.py --host URL --slo ttft_p95=1.0 --headless   # ends by itself

The students are classroom.py's; here each question is handed out by the search (bench_tasks.capacity.search),
which labels it with the step it belongs to and judges each step's window from its records. The probe's
requests (bench_tasks.capacity.probe) are the suite's bursts and fresh prompts, and the classroom's first questions.
"""

from bench_tasks import chat
from bench_tasks.capacity import probe
from bench_tasks import classroom as lessons
from locustfiles import burst, classroom, messaging, prompt
from locustfiles.capacity_shape import CapacityShape
from locustfiles.job_user import JobUser


class SearchedStudent(classroom.Student):
    def seat(self):
        return messaging.work(self.environment).take(self.scenario, self.user_id)

    def leave(self, job) -> None:
        messaging.work(self.environment).done(job, self.user_id)


class ProbeUser(JobUser):
    """The probe's requests: a burst rung, the long fresh prompt and an answer beside it, or a classroom first
    question."""

    scenario = probe.SCENARIO

    def run_job(self, job) -> None:
        if probe.kind(job.phase) == probe.BURST:
            burst.BurstUser.run_job(self, job)
        elif job.phase == probe.PROMPT and job.size is None:  # an answer decoding while the long prompt is read
            opening = self.opening(job.phase, job.round, job.index)
            self.stream_chat(self.job_record(job), chat.messages(chat.QUESTIONS[0], opening),
                             probe.PAUSE_TOKENS, ignore_eos=True)
        elif job.phase == probe.PROMPT:
            prompt.PromptUser.run_job(self, job)
        else:  # a fresh student's first question, answered as the class's are
            student = lessons.Student(self.options.think_time, seed=job.index, name=f"student {job.index + 1}")
            opening = self.opening(job.phase, job.round, job.index)
            self.stream_chat(self.job_record(job, turn=1), student.messages(opening=opening),
                             self.options.max_tokens, ignore_eos=self.options.ignore_eos)


class Capacity(CapacityShape):
    users = {"classroom": SearchedStudent, probe.SCENARIO: ProbeUser}
