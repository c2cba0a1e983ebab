"""Every error class the client can record in a failed request's ``error``, in one place.

The transport's (locustfiles/transport.py: no connection, no byte in time, a dropped connection), the
HTTP answer's (its status, or a 200 that is not an event stream) and the stream's own
(bench_tasks/stream.py: what the events said, or failed to say). docs/reference.md#error-classes
lists these (tests/test_docs.py holds it to ``CLASSES``).
"""

from __future__ import annotations

# -- the transport --
CONNECT_ERROR = "connect_error"  # no connection (refused, unknown host)
TIMEOUT = "timeout"  # no byte for longer than --read-timeout
DISCONNECT = "disconnect"  # the connection dropped mid-stream
CLIENT_ERROR = "client_error"  # an exception the client did not expect: a bug
NOT_SENT = "not_sent"  # an open loop's request due while every user was busy, never sent (bench_tasks.open_loop)
# -- the HTTP answer --
HTTP = "http_<status>"  # a non-200 answer: http_500, http_429, ...
CONTEXT_EXCEEDED = "context_exceeded"  # HTTP 400 because the prompt does not fit the context
NOT_SSE = "not_sse"  # a 200 answer that is not an event stream
# -- the stream --
MALFORMED_EVENT = "malformed_event"  # an event whose data is not JSON (or not UTF-8)
STREAM_ERROR = "stream_error"  # an {"error": ...} object inside a 200 stream
NO_DONE = "no_done"  # the stream ended without data: [DONE]
EMPTY_ANSWER = "empty_answer"  # the stream ended without any content, reasoning or tool-call text

CLASSES = (CONNECT_ERROR, TIMEOUT, DISCONNECT, HTTP, CONTEXT_EXCEEDED, NOT_SSE, MALFORMED_EVENT, STREAM_ERROR, NO_DONE,
           EMPTY_ANSWER, CLIENT_ERROR, NOT_SENT)


def http_error_class(status: int, detail: str) -> str:
    """The class of a non-200 answer, from its status and the head of its body."""
    # Engines name the context in a too-long prompt's 400 (docs/engines.md#llamacpp-too-long-prompt,
    # docs/engines.md#vllm-too-long-prompt).
    lowered = detail.lower()
    if status == 400 and ("context" in lowered or "too long" in lowered or "maximum" in lowered):
        return CONTEXT_EXCEEDED
    return HTTP.replace("<status>", str(status))
