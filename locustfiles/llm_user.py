"""The base LLM user: send one streamed request, measure it, record it.

Everything a workload's locustfile needs is ``self.stream_chat(...)`` or ``self.stream(...)``;
the measuring is bench_tasks.stream's, the recording is the sink's. Locust's own stats get an
end-to-end entry (name = phase) and a ``TTFT`` entry per request: the live view only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gevent.lock
from locust import FastHttpUser, events
from locust.runners import MasterRunner

from bench_tasks import engine, server
from bench_tasks.payload import CHAT_PATH, chat_body, encode
from bench_tasks.record import Record, add_flag
from bench_tasks.stream import Recorder
from locustfiles import options as _options  # noqa: F401 - registers our command-line options
from locustfiles import activity, transport
from locustfiles import failure  # noqa: F401 - an exception anywhere in the run ends it, loudly
from locustfiles.guard import guard
from locustfiles.sink import sink
from locustfiles import llm_tab  # noqa: F401,E402 - the web UI's LLM tab (after the sink: it listens to it)


Judge = Callable[[Record, Recorder], None]


@dataclass
class Target:
    """What every request of this process needs to know about the server, resolved once."""

    model: str
    profile: engine.Profile
    api_key: str

    @property
    def extras(self) -> dict:
        return self.profile.extras(thinking_off=True)


_target: Target | None = None
_target_lock = gevent.lock.Semaphore()


def target(environment) -> Target:
    global _target
    with _target_lock:
        if _target is None:
            _target = _resolve(environment)
    return _target


def _resolve(environment) -> Target:
    opts = environment.parsed_options
    api_key = os.environ.get("OPENAI_API_KEY", "")
    models = server.list_models(environment.host, api_key=api_key)
    model = opts.model or server.first_model(models)
    if opts.engine and opts.engine != "auto":
        profile = engine.profile(opts.engine)
    else:
        profile = engine.detect(environment.host, models, api_key=api_key)
    return Target(model=model, profile=profile, api_key=api_key)


class LLMUser(FastHttpUser):
    abstract = True
    scenario = "chat"
    connection_timeout = 10.0
    max_retries = 0

    def __init__(self, environment) -> None:
        # FastHttpUser builds its connection pool from network_timeout in __init__: set it first.
        self.network_timeout = environment.parsed_options.read_timeout
        super().__init__(environment)

    def on_start(self) -> None:
        # A server that answers the set-up requests oddly, or a damaged install (no engine profiles),
        # raises here: Locust's user_error event, and the run fails with the cause (failure.py).
        self.target = target(self.environment)
        activity.note()
        self.warm_up()

    def warm_up(self) -> None:
        """One short request, never counted: it opens the connection (a first request would also
        time the TCP connect and the resolver) and wakes the server."""
        record = self.new_record("warmup", f"warmup-{self.scenario}")
        self.stream_chat(record, [{"role": "user", "content": "Say hello."}], 8, ignore_eos=True)

    # -- building blocks for workloads --
    def new_record(self, scenario: str, phase: str, **labels) -> Record:
        opts = self.environment.parsed_options
        return Record(
            scenario=scenario,
            phase=phase,
            user=f"{type(self).__name__}-{id(self) % 100000}",
            client_host=sink().client_host,
            client_pid=os.getpid(),
            setup=opts.setup,
            engine=self.target.profile.name,
            model=self.target.model,
            **labels,
        )

    def stream_chat(self, record: Record, messages: list[dict], max_tokens: int, *, tools: list[dict] | None = None,
                    ignore_eos: bool = False, stop: list[str] | None = None, judge: Judge | None = None) -> Recorder:
        body = chat_body(self.target.model, messages, max_tokens, tools=tools, stop=stop,
                         ignore_eos=ignore_eos and self.target.profile.ignore_eos, extras=self.target.extras)
        return self.stream(CHAT_PATH, body, record, judge)

    def stream(self, path: str, body: dict, record: Record, judge: Judge | None = None) -> Recorder:
        """Send ``body``, read the stream as it arrives, fill and write ``record``.

        ``judge(record, recorder)`` labels the answer (needle found, tool call valid, cache hit)
        before the record is written.
        """
        record.endpoint = path
        payload = encode(body)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   "Accept-Encoding": "identity"}
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        for attempt in (1, 2):
            record.t_start = time.time()
            t_send = time.perf_counter()
            with self.client.request("POST", path, data=payload, headers=headers, name=record.phase,
                                     stream=True, catch_response=True) as resp:
                if attempt == 1 and transport.closed_before_response(resp):
                    resp.request_meta["request_type"] = "RECONNECT"  # visible live, not a failure
                    resp.success()
                    continue
                recorder = self._measure(resp, t_send, record)
            break
        if judge is not None:
            judge(record, recorder)
        if guard.untrustworthy(record.ttft_uncertainty_s, t_send):
            add_flag(record, "client_saturated")
        sink().add(record.to_dict())
        return recorder

    def _measure(self, resp, t_send: float, record: Record) -> Recorder:
        """Read one response to its end; the clock starts when the request really left."""
        sock = transport.request_socket(t_send)
        recorder = Recorder(t_send if sock is None else sock.t_sent, self.target.profile.first_event_tokens)
        recorder.headers(transport.received_at(sock))
        _read(resp, recorder, record, sock)
        recorder.end(time.perf_counter())
        if recorder.error:
            transport.discard(resp)
        else:
            transport.drain(resp)
        recorder.fill(record)
        if self.target.api_key and self.target.api_key in record.error_detail:
            record.error_detail = record.error_detail.replace(self.target.api_key, "***")  # echoed by a server
        _report_live(self.environment, resp, record)
        return recorder


def _read(resp, recorder: Recorder, record: Record, sock: transport.StampedSocket | None) -> None:
    error = getattr(resp, "error", None)
    status = resp.status_code or None
    record.http_status = status
    if status is None:
        recorder.fail(transport.classify(error) if error else transport.CONNECT_ERROR, repr(error))
        return
    if status != 200:
        detail = _body_head(resp)
        retry_after = (resp.headers or {}).get("retry-after")
        if retry_after:
            detail = f"Retry-After: {retry_after}; {detail}"
        recorder.fail(_http_error_class(status, detail), detail)
        return
    if not transport.is_event_stream(resp):
        recorder.fail(transport.NOT_SSE, (resp.headers or {}).get("content-type", ""))
        return
    try:
        recorder.consume(activity.watched(transport.timed_chunks(resp, sock)))
    except Exception as exc:  # noqa: BLE001 - every transport failure becomes an error class
        recorder.fail(transport.classify(exc), repr(exc)[:300])


def _http_error_class(status: int, detail: str) -> str:
    # Engines name the context in a too-long prompt's 400 (docs/engines.md#llamacpp-too-long-prompt,
    # docs/engines.md#vllm-too-long-prompt).
    lowered = detail.lower()
    if status == 400 and ("context" in lowered or "too long" in lowered or "maximum" in lowered):
        return "context_exceeded"
    return f"http_{status}"


def _body_head(resp) -> str:
    try:
        return (resp.content or b"")[:300].decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the status code alone is enough
        return ""


def _report_live(environment, resp, record: Record) -> None:
    # A stream's response_time is Locust's time to the headers: ours replaces it
    # (docs/locust.md#response-time-of-a-stream).
    if record.e2e_s is not None:
        resp.request_meta["response_time"] = record.e2e_s * 1000
    if not record.ok:
        resp.failure(f"{record.error}: {record.error_detail}"[:500])
        return
    resp.success()
    environment.events.request.fire(
        request_type="TTFT", name=record.phase, response_time=record.ttft_s * 1000,
        response_length=record.completion_tokens or 0, exception=None, context={},
    )


@events.init.add_listener
def _default_host(environment, **_kwargs) -> None:
    """No --host: the OpenAI SDK's OPENAI_BASE_URL, as the OpenAI tools do."""
    environment.host = environment.host or os.environ.get("OPENAI_BASE_URL") or None
    _base_url(environment)


@events.test_start.add_listener
def _base_url(environment, **_kwargs) -> None:
    """A host given as the OpenAI base URL (``.../v1``) is the server's root; a new run (the web UI
    may change the host between runs) resolves the model and the engine again."""
    global _target
    if environment.host:
        environment.host = server.base_url(environment.host)
    _target = None


@events.test_start.add_listener
def _start_guard(environment, **_kwargs) -> None:
    if not isinstance(environment.runner, MasterRunner):  # the master sends no requests
        guard.start()


@events.test_stop.add_listener
def _stop_guard(environment, **_kwargs) -> None:
    """Stop watching, and leave this process's own cost beside its records (client-HOST-PID.json)."""
    if guard._greenlet is None:
        return
    guard.stop()
    out = Path(environment.parsed_options.llm_out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"client-{sink().client_host}-{os.getpid()}.json").write_text(json.dumps(guard.summary()))
