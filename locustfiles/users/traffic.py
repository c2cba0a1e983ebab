"""The user's own traffic in a run: what the users of a process share (``OwnTraffic``, on ``environment.llm``), and
the trace's users (``TraceUser``: each job the trace's request of its place, sent when it is due).

``OwnTraffic`` measures the server's one-token words once per run, when the first user that needs them starts
(the others wait for it), and holds the run's shared prefixes (--prefix-tokens, --prefixes), its file of
prompts (--dataset: bench_tasks.traffic.feed; the free users' DatasetFeed, or the open loop's ArrivalFeed) and its
trace's prompts and cursor (--trace).
"""

from __future__ import annotations

import gevent.lock

from bench_tasks import tokens
from bench_tasks.open_loop import SCENARIO, stamp_due
from bench_tasks.traffic.dataset import Dataset
from bench_tasks.traffic.feed import ArrivalFeed, DatasetFeed
from bench_tasks.traffic.prefixes import SharedPrefixes
from bench_tasks.traffic.replay import TraceCursor, opened, shareable_tokens
from bench_tasks.traffic.trace import Trace, TracePrompts
from bench_tasks.traffic.vocabulary import Vocabulary, measure
from locustfiles.users.job_user import JobUser


class OwnTraffic:
    def __init__(self) -> None:
        self._lock = gevent.lock.Semaphore()
        self.vocabulary: Vocabulary | None = None
        self.prefixes: SharedPrefixes | None = None
        self.feed: DatasetFeed | ArrivalFeed | None = None
        self.trace: Trace | None = None  # the shape's, where it runs in this process
        self.prompts: TracePrompts | None = None
        self.cursor: TraceCursor | None = None

    def prepare(self, user, open_loop: bool = False) -> None:
        """What this run's options ask for, made by the first user to start (the others wait on the lock);
        ``open_loop``: a file's requests sent as the open loop's arrivals fall due (ArrivalFeed)."""
        with self._lock:
            given = user.options
            if given.prefix_tokens and self.prefixes is None:
                self.prefixes = SharedPrefixes(self._words(user), given.mark, given.prefix_tokens, given.prefixes or 1)
            if given.dataset and self.feed is None:
                dataset = Dataset.open(given.dataset)
                if open_loop:
                    self.feed = ArrivalFeed(dataset, given.mark, given.file_answers, self.prefixes, user.process)
                else:
                    self.feed = DatasetFeed(dataset, given.mark, given.requests, given.file_answers, self.prefixes,
                                            user.process)
            if given.trace and self.prompts is None:
                trace = self.trace or opened(given.trace, given.block_tokens, given.trace_summary)
                self.prompts = TracePrompts(self._words(user), given.mark, given.block_tokens)
                self.cursor = TraceCursor(trace.requests(given.speed))

    def _words(self, user) -> Vocabulary:
        if self.vocabulary is None:
            target = user.target
            count = tokens.token_counter(user.host, target.profile, target.model, target.api_key,
                                         timeout_s=user.options.read_timeout)
            self.vocabulary = measure(count)
        return self.vocabulary

    def prefixed(self, messages: list[dict], n: int) -> tuple[list[dict], int | None]:
        """Request n's messages opened by its group's prefix, sent now, and the prefix tokens it shares with an
        earlier request (None: no prefixes)."""
        if self.prefixes is None:
            return messages, None
        return self.prefixes.sent(messages, n)


def shareable_with_prefix(user, record, messages: list[dict], shared: int | None) -> None:
    """A prefixed request may also be served its prefix (``shared``: what an earlier request sent of it; the
    opening every prompt of the run shares comes after the prefix, so both add up)."""
    if shared is not None:
        opening = user.target.shareable_tokens(messages)
        record.shareable_tokens = None if opening is None else opening + user.options.prefix_tokens


class TraceUser(JobUser):
    """Sends the trace's requests as they fall due: the prompt made to its input length before it is due, the
    answer asked for its output length (ignore_eos where the engine takes it)."""

    scenario = SCENARIO
    _prepared = None  # (job index, the trace's request, its messages)

    def on_start(self) -> None:
        super().on_start()
        self.own = self.llm.state(OwnTraffic)
        self.own.prepare(self)

    def warm_up(self) -> None:
        """The first user wakes the server with a short request; the others only open their connection (a GET of
        /v1/models, which no engine queues behind its answers): a user added while the server is busy would
        otherwise wait seconds behind the answers for its warm-up, and the trace's requests with it."""
        if self.llm.number("trace-warm-up") == 1:
            super().warm_up()
            return
        key = self.target.api_key
        with self.client.get("/v1/models", headers={"Authorization": f"Bearer {key}"} if key else None,
                             name="open the connection", catch_response=True) as response:
            response.success()  # not measured: an odd answer here is not the trace's business

    def taken(self, job) -> None:
        request = self.own.cursor.at(job.index)
        self._prepared = (job.index, request, self.own.prompts.messages(request))

    def run_job(self, job) -> None:
        index, request, messages = self._prepared
        if index != job.index:
            raise RuntimeError(f"trace job {job.index} run with the prompt of request {index}")
        t_due = self.llm.to_local(job.release_at)
        record = self.job_record(job, source=request.source, shared_tokens=request.shared_tokens,
                                 prompt_size=request.input_length)
        record.shareable_tokens = shareable_tokens(request, self.own.vocabulary)
        self.stream_chat(record, messages, request.output_length, ignore_eos=True,
                         judge=lambda record, _recorder: stamp_due(record, t_due))
