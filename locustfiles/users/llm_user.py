"""The base LLM user: send one streamed request, measure it, record it.

Everything a workload's user needs is ``self.stream_chat(...)``: the conversation, in Chat Completions'
form, said in the run's API (``--api``: bench_tasks.apis), measured by streamed_request (bench_tasks.stream's
Recorder and the API's decoder), the record written to the run's sink. The
run (``self.llm``, the environment's LLMRun) holds the options, the server and everything else of the
run; the runnable locustfile made it (llm_run.install).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from locust import FastHttpUser

from bench_tasks import apis, cache_share, run_mark
from bench_tasks.errors import CONNECT_ERROR
from bench_tasks.payload import encode
from bench_tasks.record import Record
from bench_tasks.stream import Recorder
from locustfiles import streamed_request, transport

Judge = Callable[[Record, Recorder], None]


class LLMUser(FastHttpUser):
    abstract = True
    scenario = "chat"
    connection_timeout = 10.0
    max_retries = 0

    def __init__(self, environment) -> None:
        self.llm = environment.llm  # this run's state (llm_run.LLMRun)
        self.options = self.llm.options  # this run's, typed
        # FastHttpUser builds its connection pool from network_timeout in __init__: set it first.
        self.network_timeout = self.options.read_timeout
        super().__init__(environment)
        transport.stamp_connections(self.client, self.llm.watchers)

    def on_start(self) -> None:
        # A server that answers the set-up requests oddly, or a damaged install (no engine profiles),
        # raises here: Locust's user_error event, and the run fails with the cause (failure.py).
        self.target = self.llm.target()
        self.llm.activity.note()
        self.warm_up()

    def warm_up(self) -> None:
        """One short request, never counted: it opens the connection (a first request would also
        time the TCP connect and the resolver) and wakes the server."""
        record = self.new_record("warmup", f"warmup-{self.scenario}")
        self.stream_chat(record, [{"role": "user", "content": f"{self.opening('warmup', record.user)} Say hello."}],
                         8, ignore_eos=True)

    @property
    def process(self) -> int:
        """This Locust process's number among a run's workers (0 alone): each counts its own jobs, so a job's
        code names its process too."""
        return getattr(self.environment.runner, "worker_index", 0)

    def opening(self, *identity) -> str:
        """What opens the prompt of the job ``identity`` names: this run's mark and the job's code."""
        return run_mark.opening(self.options.mark, *identity)

    # -- building blocks for workloads --
    def new_record(self, scenario: str, phase: str, **labels) -> Record:
        return Record(
            scenario=scenario,
            phase=phase,
            user=f"{type(self).__name__}-{id(self) % 100000}",
            client_host=self.llm.sink.client_host,
            client_pid=os.getpid(),
            setup=self.options.setup,
            engine=self.target.profile.name,
            model=self.target.model,
            api=self.options.api,  # also on a request never sent (unreachable): the setup it belongs to
            clock_offset_s=self.llm.clock_offset_s(),
            run_mark=self.options.mark,
            mark_repeated=self.options.repeat_mark is not None,
            **labels,
        )

    def stream_chat(self, record: Record, messages: list[dict], max_tokens: int, *, tools: list[dict] | None = None,
                    ignore_eos: bool = False, stop: list[str] | None = None, judge: Judge | None = None) -> Recorder:
        """Ask ``messages`` (Chat Completions' form) in the run's API, with its tools, stop strings and limits;
        the thinking switch and ``ignore_eos`` as the engine profile says the engine takes them on that API."""
        request = apis.build(self.options.api, self.target.model, messages, max_tokens, profile=self.target.profile,
                             thinking=self.target.thinking, tools=tools, stop=stop, ignore_eos=ignore_eos)
        if record.shareable_tokens is None:
            record.shareable_tokens = self.target.shareable_tokens(messages, tools)
        return self.stream(request, record, judge)

    def unreachable(self, record: Record, exc: Exception) -> None:
        """A request that could not be made because no server answered while it was prepared (its prompt's tokens
        counted): a failed request (``connect_error``), as if sent then, not a failed run (a crashed server may be
        brought back: docs/measurement.md#when-the-server-goes-away)."""
        record.t_start, record.t_send, record.e2e_s = time.time(), time.perf_counter(), 0.0
        record.error, record.error_detail = CONNECT_ERROR, str(exc)[:300]
        self.llm.sink.add(record.to_dict())

    def stream(self, request: apis.Request, record: Record, judge: Judge | None = None) -> Recorder:
        """Send ``request``, read its stream as it arrives with its decoder, fill and write ``record``.

        ``judge(record, recorder)`` labels the answer (needle found, tool call valid, a conversation's share)
        before the cache check (bench_tasks.cache_share) and the record is written.
        """
        record.endpoint = request.path
        recorder = streamed_request.send(self, request.path, encode(request.body), record, request.decoder)
        if judge is not None:
            judge(record, recorder)
        cache_share.check(record)
        self.llm.sink.add(record.to_dict())
        return recorder
