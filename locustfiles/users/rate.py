"""The open loop's users (rate.py): each takes the earliest request not taken yet from the schedule, sleeps
until it is due (on the coordinator's clock, as a burst waits for its release), sends a chat question
opened by the run's mark and its own code (with --dataset, what the file has next for its part of the run:
bench_tasks.traffic.feed.ArrivalFeed; with --prefix-tokens, opened by its group's prefix), and records when it
was due (bench_tasks.open_loop.stamp_due)."""

import time

import gevent

from bench_tasks import chat
from bench_tasks.server import MODELS_PATH
from bench_tasks.open_loop import SCENARIO, stamp_due
from bench_tasks.traffic.dataset import answer_limit
from locustfiles.users.job_user import JobUser
from locustfiles.users.traffic import OwnTraffic, shareable_with_prefix


class RateUser(JobUser):
    scenario = SCENARIO
    wake_early_s = 0.0015  # woken before the due time, the request made ready, then sent at the instant

    def stream(self, request, record, judge=None):
        """Sent at its due time: the user was woken ``wake_early_s`` before it (a timer may wake it up to a
        millisecond late) and made the request ready; it yields to the other greenlets until the instant."""
        while record.t_due is not None and time.perf_counter() < record.t_due:
            gevent.sleep(0)
        return super().stream(request, record, judge)

    def on_start(self) -> None:
        super().on_start()
        self.own = self.llm.state(OwnTraffic)
        self.own.prepare(self, open_loop=True)

    def run_job(self, job) -> None:
        if self.own.feed is not None:
            self.send_from_file(job, self.own.feed)
            return
        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        messages, shared = self.own.prefixed(chat.messages(question, self.opening(job.phase, job.round, job.index)),
                                             job.index - 1)
        record = self.job_record(job, shared_tokens=shared)
        shareable_with_prefix(self, record, messages, shared)
        self.stream_chat(record, messages, self.options.max_tokens, ignore_eos=self.options.ignore_eos,
                         judge=due_judge())

    def send_from_file(self, job, feed) -> None:
        """The file's next request for this part of the run, asked for now that it is due (a conversation's next
        turn is ready only once its last answer is in)."""
        ask = feed.next(job.phase)
        record = self.job_record(job, source=ask.source, turn=ask.turn, shared_tokens=ask.shared_tokens)
        shareable_with_prefix(self, record, ask.messages, ask.shared_tokens)
        max_tokens, ignore_eos = answer_limit(ask.max_tokens, self.options.max_tokens, self.options.ignore_eos)
        recorder = self.stream_chat(record, ask.messages, max_tokens, ignore_eos=ignore_eos, judge=due_judge(ask.judge))
        feed.answered(ask, recorder.answer_text if record.ok else None)

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


def due_judge(then=None):
    """Stamp a request's due time (a flood's requests are due whenever the last was answered: none), then ``then``."""
    def judge(record, recorder) -> None:
        if record.t_due is not None:
            stamp_due(record, record.t_due)
        if then is not None:
            then(record, recorder)
    return judge
