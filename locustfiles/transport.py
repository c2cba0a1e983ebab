"""Reading a streamed response from FastHttp without buffering.

Measured on Locust 2.47: FastResponse.iter_content/iter_lines, and sseclient reading a FastResponse,
buffer about 1 KiB and add ~100 ms to TTFT. geventhttpclient's own ``readline`` returns each line
as soon as it arrives. It is private API, so every use of it lives in this module.
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import time
import weakref
from collections.abc import Iterator

import gevent
import gevent.socket
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

# Error classes the transport can produce (the stream adds its own in bench_tasks.stream).
CONNECT_ERROR = "connect_error"
TIMEOUT = "timeout"
DISCONNECT = "disconnect"
NOT_SSE = "not_sse"

DISCONNECT_ERRORS = (HTTPConnectionClosed, HTTPParseError, ConnectionError, EOFError)


def timed_lines(response, sock: StampedSocket | None, clock=time.perf_counter) -> Iterator[tuple[float, bytes]]:
    """Yield (arrival time, line) for each line of the body that came on ``sock``.

    A line that needed a read from the socket is stamped by that read: when the kernel received
    its last packet (see StampedSocket), else when the read returned. A line already whole in the
    buffer came with an earlier read and keeps that read's stamp: lines that arrived together share
    one stamp (which is how a lumped delivery is recognised), and the time spent parsing the lines
    ahead of it is not charged to the server. Body bytes already buffered came with the headers.
    The socket is passed in because the response lets go of it in the read that ends the message.
    """
    raw = response._response
    stamp = received_at(sock, clock)
    while True:
        buffered = b"\n" in raw._body_buffer
        line = raw.readline(b"\n")
        if not line:
            return
        if not buffered:
            stamp = received_at(sock, clock)
        yield stamp, line


def received_at(sock: StampedSocket | None, clock=time.perf_counter) -> float:
    """When the bytes of the socket's last read arrived: the kernel's stamp, else now."""
    stamp = None if sock is None else sock.t_received
    return clock() if stamp is None else stamp


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


# Linux stamps every received packet in the kernel when asked (SO_TIMESTAMPNS; 35 on x86-64 and
# arm64, whose ancillary data is a 64-bit struct timespec). Elsewhere reads are stamped as they return.
KERNEL_STAMPS = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64", "arm64")
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if KERNEL_STAMPS else 0


def kernel_arrival(ancdata: list, wall_now: float, perf_now: float, not_before: float | None) -> float | None:
    """The kernel's receive stamp from recvmsg's ancillary data, on the perf_counter clock.

    The kernel stamps in wall-clock time; the wall-to-perf_counter offset is read at the same
    moment as the data. A stamp outside [the request's send, now] can only come from the wall
    clock being stepped in between: it is not used (None), and the read's own time stands in.
    """
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            stamp = perf_now - (wall_now - (seconds + nanoseconds * 1e-9))
            if stamp <= perf_now and (not_before is None or stamp >= not_before):
                return stamp
    return None


class StampedSocket(gevent.socket.socket):
    """A socket that notes when a request really left and when each read's bytes arrived.

    Between Locust's call and the send, the connection pool checks the socket with a zero-timeout
    select, which lets other greenlets run first; with a dozen streams that is milliseconds. The
    request's clock starts here, at the send, so that time is not charged to the server.

    Likewise a busy client reads an event some time after it arrived. With kernel stamps, the
    arrival is the kernel's time for the last packet a read returned (one more system-call field,
    about 1 us), so the client's own delays do not count as the server's.
    """

    t_sent: float | None = None
    t_received: float | None = None  # perf_counter; None when the last read carried no kernel stamp

    def sendall(self, data, flags=0):
        self.t_sent = time.perf_counter()
        self.t_received = None  # a new request: nothing of it has arrived yet
        _request_sockets[gevent.getcurrent()] = self
        return super().sendall(data, flags)

    def recv(self, bufsize, flags=0):
        if not KERNEL_STAMPS:
            return super().recv(bufsize, flags)
        data, ancdata, _flags, _address = self.recvmsg(bufsize, _ANCILLARY_BYTES, flags)
        self.t_received = kernel_arrival(ancdata, time.time(), time.perf_counter(), self.t_sent)
        return data


def _stamped_tcp_socket(_pool, family, socktype, protocol):
    sock = StampedSocket(family, socktype, protocol)
    if KERNEL_STAMPS:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass  # a kernel without it: no stamp comes with the data, and reads are stamped as they return
    return sock


ConnectionPool._create_tcp_socket = _stamped_tcp_socket


# greenlet -> the socket its last request went out on. The response object is no way to it: it
# lets go of its socket as soon as the message is complete, often in the read of the headers.
_request_sockets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def request_socket(t_send: float) -> StampedSocket | None:
    """The socket on which this greenlet's request, sent at ``t_send`` or later, went out (None
    when it never left, e.g. the connection was refused)."""
    sock = _request_sockets.get(gevent.getcurrent())
    if sock is None or sock.t_sent is None or sock.t_sent < t_send:
        return None
    return sock


def closed_before_response(response) -> bool:
    """The server closed a kept-alive connection and answered nothing: the request never ran.

    llama.cpp's server closes the connection after each streamed answer while announcing
    keep-alive, so the next request on it meets a closed socket. Such a request is sent again.
    """
    error = getattr(response, "error", None)
    return not response.status_code and isinstance(error, (HTTPConnectionClosed, ConnectionResetError,
                                                            BrokenPipeError))
