"""A class of students: each arrives, asks, reads the answer, thinks, and asks again, resending the
whole conversation (bench_tasks.classroom). In the web UI, choose the class size:

    locust -f locustfiles/classroom.py --host URL --think-time 10-40
"""

import os
from itertools import count

from locust import task
from locust.runners import WorkerRunner

from bench_tasks import classroom
from bench_tasks.suite import Job
from locustfiles import messaging
from locustfiles.llm_user import LLMUser

WAIT_FOR_SEAT_S = 0.05
_numbers = count(1)


class Student(LLMUser):
    scenario = "classroom"

    def on_start(self) -> None:
        super().on_start()
        self.user_id = messaging.user_id(self)
        pid, number = os.getpid(), next(_numbers)
        think = classroom.parse_think_time(self.environment.parsed_options.think_time)
        # Seeded by process and number: students on different workers do not think in step.
        self.student = classroom.Student(think, seed=pid * 100003 + number, name=f"student {pid}-{number}")
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
        options = self.environment.parsed_options
        question = self.student.messages()
        record = self.new_record(job.scenario, job.phase, round=self.student.conversation, turn=self.student.turn,
                                 students=job.students)
        recorder = self.stream_chat(record, question, options.max_tokens, ignore_eos=options.ignore_eos)
        if record.ok:
            self.student.answered(question, recorder.answer_text)

    def seat(self) -> Job | None:
        """A free run: the class is whoever Locust started (a worker sees only its share: unknown)."""
        runner = self.environment.runner
        students = None if isinstance(runner, WorkerRunner) else runner.user_count
        return Job(self.scenario, self.scenario, 1, 0, students=students)

    def leave(self, job: Job) -> None:
        """The question was answered (a free run tells nobody)."""
