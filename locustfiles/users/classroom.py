"""A class of students: each arrives, asks, reads the answer, thinks, and asks again, resending the
whole conversation (bench_tasks.classroom). ``Student`` runs free (classroom.py: the class is whoever
Locust started); ``SearchedStudent`` takes each question from the capacity search (capacity.py), which
labels it with the step it belongs to.
"""

import os

from locust import task
from locust.runners import WorkerRunner

from bench_tasks import classroom, paste, prompt
from bench_tasks.suite import Job
from bench_tasks.tokens import token_counter
from locustfiles.users.llm_user import LLMUser

WAIT_FOR_SEAT_S = 0.05


class Student(LLMUser):
    scenario = "classroom"

    def on_start(self) -> None:
        self.user_id = self.llm.user_id()
        super().on_start()
        pid, number = os.getpid(), self.llm.number("student")
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
        count = self.llm.activity.noted(token_counter(self.environment.host, target.profile, target.model,
                                                      target.api_key, self.options.read_timeout))
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


class SearchedStudent(Student):
    """A student of the capacity search: each question is handed out by the search (a worker's, by the master)."""

    def seat(self) -> Job | None:
        return self.llm.link().take(self.scenario, self.user_id)

    def leave(self, job: Job) -> None:
        self.llm.link().done(job, self.user_id)

    def on_stop(self) -> None:
        # A class that shrinks stops students while their next question is on its way: it goes back.
        if getattr(self, "user_id", ""):
            self.llm.link().leave(self.user_id)
