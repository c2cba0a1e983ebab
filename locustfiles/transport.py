"""Reading a streamed response from FastHttp without buffering.

Measured on Locust 2.47: FastResponse.iter_content/iter_lines, and sseclient reading a FastResponse,
buffer about 1 KiB and add ~100 ms to TTFT. geventhttpclient's own ``readline`` returns each line
as soon as it arrives. It is private API, so every use of it lives in this module.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import gevent.socket
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

# Error classes the transport can produce (the stream adds its own in bench_tasks.stream).
CONNECT_ERROR = "connect_error"
TIMEOUT = "timeout"
DISCONNECT = "disconnect"
NOT_SSE = "not_sse"

DISCONNECT_ERRORS = (HTTPConnectionClosed, HTTPParseError, ConnectionError, EOFError)


def timed_lines(response, clock=time.perf_counter) -> Iterator[tuple[float, bytes]]:
    """Yield (arrival time, line) for each line of the body.

    A line that needed a read from the socket is stamped when that read returns. A line already
    whole in the buffer came with an earlier read and keeps that read's stamp: lines that arrived
    together share one stamp (which is how a lumped delivery is recognised), and the time spent
    parsing the lines ahead of it is not charged to the server. The first stamp is taken at once:
    body bytes already buffered came with the headers.
    """
    raw = response._response
    stamp = clock()
    while True:
        buffered = b"\n" in raw._body_buffer
        line = raw.readline(b"\n")
        if not line:
            return
        if not buffered:
            stamp = clock()
        yield stamp, line


def classify(exc: BaseException) -> str:
    """The error class of an exception raised while connecting or reading."""
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TIMEOUT
    if isinstance(exc, ConnectionRefusedError) or isinstance(exc, socket.gaierror):
        return CONNECT_ERROR
    if isinstance(exc, DISCONNECT_ERRORS) or isinstance(exc, OSError):
        return DISCONNECT
    return "client_error"


def discard(response) -> None:
    """Close a connection whose body was not read to the end, so it is never reused half-read."""
    raw = getattr(response, "_response", None)
    if raw is None:
        return
    pool, sock = getattr(raw, "_pool", None), getattr(raw, "_sock", None)
    if pool is not None and sock is not None:
        pool.release_socket(sock)
    raw._sock = raw._pool = None


def is_event_stream(response) -> bool:
    content_type = (response.headers or {}).get("content-type", "") or ""
    return "text/event-stream" in content_type.lower()


def drain(response) -> None:
    """Read what follows [DONE] (the chunked terminator) so the connection can be reused."""
    raw = getattr(response, "_response", None)
    if raw is None or getattr(raw, "_sock", None) is None:
        return
    try:
        raw.read()
    except Exception:  # noqa: BLE001 - a connection we cannot finish reading is not reused
        discard(response)


class StampedSocket(gevent.socket.socket):
    """A socket that notes when a request really left.

    Between Locust's call and the send, the connection pool checks the socket with a zero-timeout
    select, which lets other greenlets run first; with a dozen streams that is milliseconds. The
    request's clock starts here, at the send, so that time is not charged to the server.
    """

    t_sent: float | None = None

    def sendall(self, data, flags=0):
        self.t_sent = time.perf_counter()
        return super().sendall(data, flags)


def _stamped_tcp_socket(_pool, family, socktype, protocol):
    return StampedSocket(family, socktype, protocol)


ConnectionPool._create_tcp_socket = _stamped_tcp_socket


def sent_at(response) -> float | None:
    """When the request's bytes were handed to the kernel, if the connection says so."""
    raw = getattr(response, "_response", None)
    return getattr(getattr(raw, "_sock", None), "t_sent", None)


def closed_before_response(response) -> bool:
    """The server closed a kept-alive connection and answered nothing: the request never ran.

    llama.cpp's server closes the connection after each streamed answer while announcing
    keep-alive, so the next request on it meets a closed socket. Such a request is sent again.
    """
    error = getattr(response, "error", None)
    return not response.status_code and isinstance(error, (HTTPConnectionClosed, ConnectionResetError,
                                                            BrokenPipeError))
