"""A class of students: each arrives, asks, reads the answer, thinks, and asks again, resending the
whole conversation (bench_tasks.classroom). ``Student`` runs free (classroom.py: the class is whoever
Locust started); ``SearchedStudent`` takes each question from the capacity search (capacity.py), which
labels it with the step it belongs to. With --dataset, the students of a process take their lessons from
the teacher's file, one after the other (``ClassFile``), each record keeping its line (``source``).
"""

from locust import task
from locust.runners import WorkerRunner

from bench_tasks import cache_share, classroom, paste, prompt
from bench_tasks.server import Unreachable
from bench_tasks.suite import Job
from bench_tasks.tokens import token_counter
from bench_tasks.traffic.dataset import Dataset, answer_limit
from locustfiles.users.llm_user import LLMUser

WAIT_FOR_SEAT_S = 0.05


class ClassFile:
    """The lessons of --dataset, shared by this process's students (read at the first one's start)."""

    def __init__(self) -> None:
        self.lessons: classroom.FileLessons | None = None

    def of(self, path: str | None) -> classroom.FileLessons | None:
        if path and self.lessons is None:
            self.lessons = classroom.FileLessons(Dataset.open(path))
        return self.lessons


class Student(LLMUser):
    scenario = "classroom"

    def on_start(self) -> None:
        self.user_id = self.llm.user_id()
        super().on_start()
        worker, number = self.process, self.llm.number("student")
        # Seeded by worker and number: students on different workers do not think in step, and a run repeated
        # with --repeat-mark asks the same questions.
        self.student = classroom.Student(self.options.think_time, seed=worker * 100003 + number,
                                         name=f"student {worker}-{number}", paste_share=self.options.paste_share,
                                         lessons=self.llm.state(ClassFile).of(self.options.dataset))
        self.resent = cache_share.Conversation()  # what the conversation sent before, which it may share
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
        conversation = self.student.conversation
        opening = self.opening(self.scenario, self.student.name, conversation)
        lesson = self.student.lesson
        record = self.new_record(job.scenario, job.phase, round=conversation, turn=self.student.turn,
                                 students=job.students, prompt_size=size, source=lesson.source)
        try:
            question = self.student.messages(self.document(size, conversation) if size else None, opening)
        except Unreachable as exc:  # no server to count the document's tokens: this question failed
            self.unreachable(record, exc)
            return
        max_tokens, ignore_eos = answer_limit(lesson.max_tokens, self.options.max_tokens, self.options.ignore_eos)
        recorder = self.stream_chat(record, question, max_tokens, ignore_eos=ignore_eos, judge=self.resent.judge)
        if record.ok:
            self.student.answered(question, recorder.answer_text)
        if self.student.conversation != conversation:
            self.resent = cache_share.Conversation()  # a new conversation shares nothing of the last

    def document(self, size: int, conversation: int) -> str:
        """A fresh document of ``size`` tokens (counted on the server) to paste above the question."""
        target = self.target
        count = self.llm.activity.noted(token_counter(self.environment.host, target.profile, target.model,
                                                      target.api_key, self.options.read_timeout))
        opening = self.opening("paste", self.student.name, conversation, self.student.turn)
        seed = self.student.rng.randrange(1 << 30)
        messages, _ = prompt.calibrate(lambda words: [{"role": "user", "content": paste.document(opening, words, seed)}],
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
