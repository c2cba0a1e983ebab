"""One request of any API, streamed from a server and measured by the Recorder without Locust.

The tests of the decoders against the simulated and the real engines use it before the workloads speak
these APIs: a blocking socket, each read stamped as the client's own transport stamps it
(locustfiles/transport.py): by the kernel's receive time of its newest bytes (SO_TIMESTAMPNS, Linux),
on the ``perf_counter`` clock of the engines' truth, so a reader that fell behind on a busy machine
still dates each read by its arrival; the chunked body undone as it comes, every read's bytes handed
to the Recorder with that read's stamp and how long they waited.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from contextlib import contextmanager
from time import perf_counter
from urllib.parse import urlsplit

from bench_tasks.apis import Request
from bench_tasks.errors import DISCONNECT, NOT_SSE, http_error_class
from bench_tasks.payload import encode
from bench_tasks.record import Record
from bench_tasks.stream import Recorder

READ_BYTES = 65536
SO_TIMESTAMPNS = 35  # Linux, x86-64 and arm64: a 64-bit struct timespec per read
TIMESPEC = struct.Struct("qq")


def measure(url: str, request: Request, first_event_tokens: float | None = None, timeout_s: float = 120.0,
            headers: dict | None = None) -> tuple[Recorder, Record]:
    """Send ``request`` to ``url`` and read its answer to the end; the record carries its API and endpoint."""
    parts = urlsplit(url)
    body = encode(request.body)
    head = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    wire = (f"POST {request.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nAccept-Encoding: identity\r\nConnection: close\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    record = Record(endpoint=request.path)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        t_send = perf_counter()
        sock.sendall(wire)
        recorder = Recorder(t_send, first_event_tokens, request.decoder)
        reads = _reads(sock)
        status, head, rest, t_head, _late = _head(reads)
        recorder.headers(t_head)
        record.http_status = status
        if status != 200:
            detail = (rest + b"".join(data for _, data, _late in reads)).decode("utf-8", "replace")[:300]
            recorder.fail(http_error_class(status, detail), detail)
        elif b"text/event-stream" not in head or b"chunked" not in head:
            recorder.fail(NOT_SSE, head.decode("latin-1")[:300])
        else:
            recorder.consume(_body(reads, rest, t_head, _late, recorder))
        recorder.end(perf_counter())
    return recorder, recorder.fill(record)


@contextmanager
def pinned(cpus: set[int] | None):
    """This process on ``cpus`` (the engine on the others, as selftest and the engine fixtures split them),
    then as it was."""
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _reads(sock: socket.socket):
    """(arrival, bytes, how long they waited in the kernel) per read."""
    ancillary = socket.CMSG_SPACE(TIMESPEC.size)
    while True:
        data, ancdata, _flags, _address = sock.recvmsg(READ_BYTES, ancillary)
        perf_now, wall_now = perf_counter(), time.time()
        if not data:
            return
        stamp = next((perf_now - (wall_now - (s + ns * 1e-9)) for level, kind, raw in ancdata
                      if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS
                      for s, ns in [TIMESPEC.unpack_from(raw)]), None)
        if stamp is None or stamp > perf_now:  # no stamp, or the wall clock stepped: the read's own time
            yield perf_now, data, None
        else:
            yield stamp, data, perf_now - stamp


def _head(reads) -> tuple[int, bytes, bytes, float, float | None]:
    """(status, the head in lower case, the body's first bytes, when the head came, how late it was read)."""
    buffer, t, late = b"", 0.0, None
    while b"\r\n\r\n" not in buffer:
        t, data, late = next(reads)
        buffer += data
    head, rest = buffer.split(b"\r\n\r\n", 1)
    return int(head.split(b" ", 2)[1]), head.lower(), rest, t, late


def _body(reads, rest: bytes, t_head: float, late: float | None, recorder: Recorder):
    """The chunked body's data, per read, with the read's stamp; a body cut short is a disconnect."""
    buffer, t = rest, t_head
    left = crlf = 0  # the current chunk's data bytes still to come, then its CRLF's
    while True:
        data = []
        while True:
            if left:
                piece = buffer[:left]
                if not piece:
                    break
                data.append(piece)
                buffer, left = buffer[len(piece):], left - len(piece)
                if left:
                    break
                crlf = 2
            if crlf:
                skipped = min(crlf, len(buffer))
                buffer, crlf = buffer[skipped:], crlf - skipped
                if crlf:
                    break
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(buffer[:line_end].split(b";")[0], 16)
            buffer = buffer[line_end + 2:]
            if size == 0:
                if data:
                    yield t, b"".join(data), late
                return
            left = size
        if data:
            yield t, b"".join(data), late
        try:
            t, more, late = next(reads)
        except StopIteration:
            recorder.fail(DISCONNECT, "the body ended before its last chunk")
            return
        buffer += more
