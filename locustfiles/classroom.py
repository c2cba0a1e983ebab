"""A class of students: each arrives, asks, reads the answer, thinks, and asks again, resending the
whole conversation (bench_tasks.classroom). In the web UI, choose the class size:

    locust -f locustfiles/classroom.py --host URL --think-time 10-40 [--paste-share 0.1 --paste-size 4k]
"""

import os
from itertools import count

from locust import task
from locust.runners import WorkerRunner

from bench_tasks import classroom, paste, prompt
from bench_tasks.suite import Job
from bench_tasks.tokens import token_counter
from locustfiles import activity, messaging
from locustfiles.llm_user import LLMUser

WAIT_FOR_SEAT_S = 0.05
_numbers = count(1)


class Student(LLMUser):
    scenario = "classroom"

    def on_start(self) -> None:
        super().on_start()
        self.user_id = messaging.user_id(self)
        pid, number = os.getpid(), next(_numbers)
        # Seeded by process and number: students on different workers do not think in step.
        self.student = classroom.Student(self.options.think_time, seed=pid * 100003 + number,
                                         name=f"student {pid}-{number}", paste_share=self.options.paste_share)
        self._wait_s = 0.0

    def wait_time(self) -> float:
        return self._wait_s

    @task
    def attend(self) -> None:
        if not self.student.arrived:
            self._wait_s = self.student.pause_s()  # arriving: the first question comes after this
            return
        job = self.seat()
        if job is None:
            self._wait_s = WAIT_FOR_SEAT_S
            return
        try:
            self.ask(job)
        finally:
            self.leave(job)
        self._wait_s = self.student.pause_s()  # reading the answer, thinking, typing

    def ask(self, job: Job) -> None:
        size = self.options.paste_size if self.student.pastes() else None
        question = self.student.messages(self.document(size) if size else None)
        record = self.new_record(job.scenario, job.phase, round=self.student.conversation, turn=self.student.turn,
                                 students=job.students, prompt_size=size)
        recorder = self.stream_chat(record, question, self.options.max_tokens, ignore_eos=self.options.ignore_eos)
        if record.ok:
            self.student.answered(question, recorder.answer_text)

    def document(self, size: int) -> str:
        """A fresh document of ``size`` tokens (counted on the server) to paste above the question."""
        target = self.target
        count = activity.noted(token_counter(self.environment.host, target.profile, target.model, target.api_key,
                                             self.options.read_timeout))
        marker, seed = prompt.fresh_marker(), self.student.rng.randrange(1 << 30)
        messages, _ = prompt.calibrate(lambda words: [{"role": "user", "content": paste.document(marker, words, seed)}],
                                       count, size)
        return messages[0]["content"]

    def seat(self) -> Job | None:
        """A free run: the class is whoever Locust started (a worker sees only its share: unknown)."""
        runner = self.environment.runner
        students = None if isinstance(runner, WorkerRunner) else runner.user_count
        return Job(self.scenario, self.scenario, 1, 0, students=students)

    def leave(self, job: Job) -> None:
        """The question was answered (a free run tells nobody)."""
