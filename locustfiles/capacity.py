"""How many students can this server take? A short probe of the server, then classes of students
from the predicted knee until the boundary of the SLO is found.

    locust -f locustfiles/capacity.py --host URL --slo ttft_p95=1.0 --headless   # ends by itself

The students are classroom.py's; here each question is handed out by the search (bench_tasks.capacity),
which labels it with the step it belongs to and judges each step's window from its records. The probe's
requests (bench_tasks.probe) are the suite's bursts and fresh prompts, and the classroom's first questions.
"""

from bench_tasks import classroom as lessons
from bench_tasks import chat, probe
from bench_tasks.prompt import fresh_marker
from bench_tasks.suite import BURST_TOKENS
from locustfiles import classroom, messaging, prompt
from locustfiles.coordination import CapacityShape, SuiteUser


class SearchedStudent(classroom.Student):
    def seat(self):
        return messaging.work(self.environment).take(self.scenario, self.user_id)

    def leave(self, job) -> None:
        messaging.work(self.environment).done(job, self.user_id)


class ProbeUser(SuiteUser):
    """The probe's requests: a burst rung, the long fresh prompt, or a classroom first question."""

    scenario = probe.SCENARIO

    def run_job(self, job) -> None:
        if probe.kind(job.phase) == probe.BURST:
            self.burst(job)
        elif job.phase == probe.PROMPT:
            prompt.PromptUser.run_job(self, job)
        else:
            self.first_question(job)

    def burst(self, job) -> None:
        """As BurstUser's, with a fresh prefix: an earlier search's probe is in no cache."""
        release_at = messaging.to_local(self.environment, job.release_at)

        def judge(record, _recorder) -> None:
            record.release_offset_s = record.t_send - release_at

        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        messages = chat.messages(question, f"{fresh_marker()} {job.phase} user {job.index + 1}")
        self.stream_chat(self.job_record(job), messages, BURST_TOKENS, ignore_eos=True, judge=judge)

    def first_question(self, job) -> None:
        """A fresh student's first question, answered as the class's are."""
        options = self.environment.parsed_options
        student = lessons.Student(lessons.parse_think_time(options.think_time), seed=job.index,
                                  name=f"student {fresh_marker()}")
        self.stream_chat(self.job_record(job, turn=1), student.messages(), options.max_tokens,
                         ignore_eos=options.ignore_eos)


class Capacity(CapacityShape):
    users = {"classroom": SearchedStudent, probe.SCENARIO: ProbeUser}
