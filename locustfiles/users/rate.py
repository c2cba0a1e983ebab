"""The open loop's users (rate.py): each takes the earliest request not taken yet from the schedule, sleeps
until it is due (on the coordinator's clock, as a burst waits for its release), sends a chat question
opened by the run's mark and its own code, and records when it was due (bench_tasks.open_loop.stamp_due)."""

import time

import gevent

from bench_tasks import chat
from bench_tasks.server import MODELS_PATH
from bench_tasks.open_loop import SCENARIO, stamp_due
from locustfiles.users.job_user import JobUser


class RateUser(JobUser):
    scenario = SCENARIO
    wake_early_s = 0.0015  # woken before the due time, the request made ready, then sent at the instant

    def stream(self, request, record, judge=None):
        """Sent at its due time: the user was woken ``wake_early_s`` before it (a timer may wake it up to a
        millisecond late) and made the request ready; it yields to the other greenlets until the instant."""
        while record.t_due is not None and time.perf_counter() < record.t_due:
            gevent.sleep(0)
        return super().stream(request, record, judge)

    def run_job(self, job) -> None:
        def judge(record, _recorder) -> None:
            if record.t_due is not None:  # a flood's requests are due whenever the last was answered
                stamp_due(record, record.t_due)

        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        self.stream_chat(self.job_record(job), chat.messages(question, self.opening(job.phase, job.round, job.index)),
                         self.options.max_tokens, ignore_eos=self.options.ignore_eos, judge=judge)

    def warm_up(self) -> None:
        """The connection opened beside, not before, taking requests: a user added to the pool must be ready at
        once, and a saturated server may take its time to answer even GET /v1/models (llama.cpp serves no more
        connections than its HTTP threads: with them all streaming, a new one waits its turn, seen 30 s), while
        the requests falling due would go late. Not recorded."""
        gevent.spawn(self._open_connection)

    def _open_connection(self) -> None:
        key = self.target.api_key
        with self.client.get(MODELS_PATH, headers={"Authorization": f"Bearer {key}"} if key else {},
                             name=f"warmup-{self.scenario}", catch_response=True) as resp:
            resp.success()  # a server that fails it fails the requests too, and they are recorded

    def job_record(self, job, **labels):
        """Its rate and when it was due, on this process's clock (a request that could not be made has them too)."""
        record = super().job_record(job, offered_rps=job.offered_rps, **labels)
        record.t_due = None if job.release_at is None else self.llm.to_local(job.release_at)
        return record
