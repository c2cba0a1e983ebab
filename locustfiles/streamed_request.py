"""One streamed request, measured: sent, its response read into a Recorder as it arrives, its record filled.

The request's clock starts when its bytes leave (transport.StampedSocket), not when Locust is asked to
send. A request that meets a kept-alive connection the server had closed without answering (llama.cpp
closes it after each streamed answer) is sent once more, on a new connection: the first attempt shows
as RECONNECT in Locust's live view, never as a failure, and nothing is timed twice (the record's clock
starts at the second send). A connection that dies later, with the request in the server's hands (a
server that crashed while the request waited for a slot), is not resent: the request failed
(transport.closed_before_response). A failed request
gets its error class (bench_tasks.errors) from the transport, the HTTP answer or the stream. Locust's
own stats get an end-to-end entry (name = phase) and a TTFT entry per request: the live view only,
never a figure of ours.
"""

from __future__ import annotations

import time

from bench_tasks import steal
from bench_tasks.decoders import Decoder
from bench_tasks.errors import CONNECT_ERROR, NOT_SSE, http_error_class
from bench_tasks.record import Record, add_flag
from bench_tasks.stream import Recorder
from locustfiles import transport
from locustfiles.activity import Activity
from locustfiles.target import Target

HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}


def send(user, path: str, payload: bytes, record: Record, decoder: Decoder) -> Recorder:
    """POST ``payload`` with ``user``'s client and measure the answer into ``record``, its events read by
    ``decoder`` (its API's: bench_tasks.decoders; one per request)."""
    target, run = user.target, user.llm
    headers = {**HEADERS, "Authorization": f"Bearer {target.api_key}"} if target.api_key else HEADERS
    t_steal, steal_before = time.perf_counter(), run.guard.steal.read()
    for attempt in (1, 2):
        record.t_start = time.time()
        t_send = time.perf_counter()
        with user.client.request("POST", path, data=payload, headers=headers, name=record.phase, stream=True,
                                 catch_response=True) as resp:
            sock = run.watchers.request_socket(t_send)
            if attempt == 1 and transport.closed_before_response(resp, sock, t_send, time.perf_counter()):
                resp.request_meta["request_type"] = "RECONNECT"  # visible live, not a failure
                resp.success()
                continue
            recorder = _measure(resp, t_send, record, target, sock, run.activity, decoder)
            _report_live(user.environment, resp, record)
        break
    if run.guard.untrustworthy(record.ttft_uncertainty_s, t_send, None if sock is None else sock.late_bound_s):
        add_flag(record, "client_saturated")
    steal_after = run.guard.steal.read()
    record.cpu_stolen_s = steal.most_stolen_s(steal_before, steal_after)
    record.cpu_pause_s = run.guard.stolen_at_once_s(t_steal, record.cpu_stolen_s, steal_after)
    if run.guard.stolen_too_long(record.cpu_pause_s):
        add_flag(record, "cpu_stolen")
    return recorder


def _measure(resp, t_send: float, record: Record, target: Target, sock: transport.StampedSocket | None,
             activity: Activity, decoder: Decoder) -> Recorder:
    """Read one response to its end; the clock starts when the request really left (on ``sock``)."""
    recorder = Recorder(t_send if sock is None else sock.t_sent, target.profile.first_event_tokens, decoder)
    if resp.status_code:  # no head came (a timeout, a dropped connection): no time to the first byte
        recorder.headers(transport.received_at(sock))
    recorder.rtt_s = transport.tcp_rtt_s(sock)  # once per request: the network's share of the wait
    _read(resp, recorder, record, sock, activity)
    recorder.end(time.perf_counter())
    if recorder.error:
        transport.discard(resp)
    else:
        transport.drain(resp)
    recorder.fill(record)
    if target.api_key and target.api_key in record.error_detail:
        record.error_detail = record.error_detail.replace(target.api_key, "***")  # echoed by a server
    return recorder


def _read(resp, recorder: Recorder, record: Record, sock: transport.StampedSocket | None, activity: Activity) -> None:
    error = getattr(resp, "error", None)
    status = resp.status_code or None
    record.http_status = status
    if status is None:
        recorder.fail(transport.classify(error) if error else CONNECT_ERROR, repr(error))
        return
    if status != 200:
        detail = _body_head(resp)
        retry_after = (resp.headers or {}).get("retry-after")
        if retry_after:
            detail = f"Retry-After: {retry_after}; {detail}"
        recorder.fail(http_error_class(status, detail), detail)
        return
    if not transport.is_event_stream(resp):
        recorder.fail(NOT_SSE, (resp.headers or {}).get("content-type", ""))
        return
    try:
        recorder.consume(transport.timed_chunks(resp, sock, activity))
    except Exception as exc:  # noqa: BLE001 - every transport failure becomes an error class
        recorder.fail(transport.classify(exc), repr(exc)[:300])


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
