"""Reading a streamed response from FastHttp without buffering.

Measured on Locust 2.47: FastResponse.iter_content/iter_lines, and sseclient reading a FastResponse,
buffer about 1 KiB and delay the first token by tens of milliseconds
(docs/locust.md#fasthttp-readers-buffer). geventhttpclient's own ``readline`` returns each line as
soon as it arrives. It is private API, so every use of it lives in this module.

A measured user's connections are StampedSockets (the send's time, each read's kernel receive stamp),
made by its own client pool (``stamp_connections``, called by LLMUser). The sockets share this
process's ``Watchers`` (``watchers()``: one per process, started by the run's set-up).
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import struct
import sys
import time
import weakref
from collections.abc import Iterator

import gevent
import gevent.socket
from geventhttpclient.client import HTTPClientPool
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPResponse

from bench_tasks.errors import CLIENT_ERROR, CONNECT_ERROR, DISCONNECT, TIMEOUT
from locustfiles.activity import Activity

DISCONNECT_ERRORS = (HTTPConnectionClosed, HTTPParseError, ConnectionError, EOFError)


def timed_chunks(response, sock: StampedSocket | None, activity: Activity | None = None,
                 clock=time.perf_counter) -> Iterator[tuple[float, bytes, float | None]]:
    """Yield (arrival time, bytes, lateness) for each read of the body that came on ``sock``: the
    whole lines it completed, all at once, and how long they had waited in the kernel (None without
    a kernel stamp). ``activity``: the run's (locustfiles.activity), moved by every read (its ``last``
    set to the read's stamp: the run's clock of activity costs no clock reading and no generator).

    A read is stamped when the kernel received its last packet (see StampedSocket), else when the
    read returned. Lines that arrived together share that stamp (which is how a lumped delivery is
    recognised), and the time spent parsing them is not charged to the server. Body bytes already
    buffered came with the headers, and carry their read's stamp. The socket is passed in because
    the response lets go of it in the read that ends the message. (geventhttpclient's own readline,
    one call per line, cost more than the rest of the per-event path; this is the same reading.)
    """
    raw = response._response
    buffer = raw._body_buffer
    parse = _parser(raw)
    stamp, late = received_at(sock, clock), read_lateness(sock)
    while True:
        if buffer.endswith(b"\n"):  # a read that ended with its line: all of it, in one copy
            chunk = bytes(buffer)
            buffer.clear()
            yield stamp, chunk, late
        else:
            end = buffer.rfind(b"\n") + 1
            if end:
                chunk = bytes(buffer[:end])
                del buffer[:end]
                yield stamp, chunk, late
        if raw.message_complete:
            if buffer:  # a last line without its newline
                chunk = bytes(buffer)
                buffer.clear()
                yield stamp, chunk, late
            return
        source = raw._sock
        if source is None:
            raise HTTPConnectionClosed("connection closed.")
        try:
            parse(source.recv(raw.block_size))
        except BaseException:
            raw.release()
            raise
        if sock is not None and sock.t_received is not None:
            stamp, late = sock.t_received, sock.lateness
        else:
            stamp, late = clock(), None
        if activity is not None:
            activity.last = stamp


def _parser(raw):
    """What feeds a read to ``raw``'s HTTP parser, which puts the body in its ``_body_buffer``.

    geventhttpclient's HTTPResponse.feed wraps its C parser's for HEAD responses only (a stream is never
    one), and the parser hands every piece of body to the response's ``_on_body``, a Python method, to
    append: per read, these two frames cost what the parser costs (0.83 against 0.43 us a read here). A
    streamed response of geventhttpclient's is read with its parser's own feed, and the buffer's own
    ``extend`` as its ``_on_body`` (the parser looks it up on the response at every call): the same bytes
    in the same buffer. Anything else (the tests' responses) with its own ``feed``."""
    if not isinstance(raw, HTTPResponse):
        return raw.feed
    raw._on_body = raw._body_buffer.extend
    return functools.partial(HTTPResponseParser.feed, raw)


def received_at(sock: StampedSocket | None, clock=time.perf_counter) -> float:
    """When the bytes of the socket's last read arrived: the kernel's stamp, else now."""
    stamp = None if sock is None else sock.t_received
    return clock() if stamp is None else stamp


def read_lateness(sock: StampedSocket | None) -> float | None:
    """How long the newest bytes of the socket's last read had waited in the kernel (None: unknown)."""
    return None if sock is None else sock.lateness


# Linux's struct tcp_info (include/uapi/linux/tcp.h): eight one-byte fields, then 32-bit ones; tcpi_rtt
# (the smoothed round trip, microseconds) at byte 68, tcpi_min_rtt (the least seen on the connection,
# Linux 4.9 on) at byte 148. The minimum: the smoothed one takes in the peer's delayed ACKs, which delay
# no data (measured here on loopback: a request queued for the sim's one slot was ACKed 40 ms late,
# tcpi_rtt read 5.4 ms, tcpi_min_rtt 9 us).
TCP_INFO_U32 = struct.Struct("=I")
TCP_INFO_RTT_AT, TCP_INFO_MIN_RTT_AT = 68, 148
TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None
NO_SAMPLE = 0xFFFFFFFF  # tcpi_min_rtt before the connection's first round trip was timed


def tcp_rtt_s(sock: StampedSocket | None) -> float | None:
    """The connection's round trip as the kernel measured it from its own ACKs, in seconds: the least
    it saw (tcpi_min_rtt), else (an older kernel) its smoothed estimate (tcpi_rtt). One system call, read
    once per request. None off Linux, or when the socket is gone."""
    if sock is None or TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_MIN_RTT_AT + TCP_INFO_U32.size)
    except OSError:
        return None
    if len(info) >= TCP_INFO_MIN_RTT_AT + TCP_INFO_U32.size:
        least = TCP_INFO_U32.unpack_from(info, TCP_INFO_MIN_RTT_AT)[0]
        if least != NO_SAMPLE:
            return least / 1e6
    if len(info) < TCP_INFO_RTT_AT + TCP_INFO_U32.size:
        return None
    return TCP_INFO_U32.unpack_from(info, TCP_INFO_RTT_AT)[0] / 1e6


def cause(exc: BaseException) -> BaseException:
    """What went wrong, unwrapped: geventhttpclient retries a request that timed out, met a broken pipe or
    an empty response (Locust asks for no retry) and raises RetriesExceeded with that error as ``original``;
    any other error comes bare."""
    return getattr(exc, "original", None) or exc


def classify(exc: BaseException) -> str:
    """The error class (bench_tasks.errors) of an exception raised while connecting or reading (``cause``:
    a timeout before the response's head, a server that never answers, comes wrapped)."""
    exc = cause(exc)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TIMEOUT
    if isinstance(exc, ConnectionRefusedError) or isinstance(exc, socket.gaierror):
        return CONNECT_ERROR
    if isinstance(exc, DISCONNECT_ERRORS) or isinstance(exc, OSError):
        return DISCONNECT
    return CLIENT_ERROR


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
    headers = response.headers  # its truth value counts every header: once per request, not needed
    content_type = (headers.get("content-type", "") if headers is not None else "") or ""
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
# LLM_BENCH_KERNEL_STAMPS=0 switches them off here too: the path of macOS and Windows, tested on Linux.
KERNEL_STAMPS = (os.environ.get("LLM_BENCH_KERNEL_STAMPS", "1") != "0" and sys.platform.startswith("linux")
                 and platform.machine() in ("x86_64", "aarch64", "arm64"))
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

    Made by ``Watchers.tcp_socket``, which gives it the process's watchers (read per event: kept on
    the socket, one lookup as a module global would be).
    """

    t_sent: float | None = None
    t_first_sent: float | None = None  # the connection's first request: one sent before it is a kept-alive one's
    t_received: float | None = None  # perf_counter; None when the last read carried no kernel stamp
    lateness: float | None = None  # the read's time minus t_received: how long its newest bytes waited
    _drained = False  # the last read took everything the kernel had
    # Without kernel stamps: the most any read of this request that waited for its bytes may have been
    # dated late (LoopTurns.late_bound_s); None with kernel stamps (each read says its own) or on libuv.
    late_bound_s: float | None = None
    _t_read = 0.0  # without kernel stamps: when the last read returned
    _turns: LoopTurns
    _waiting: dict
    _request_sockets: weakref.WeakKeyDictionary

    def sendall(self, data, flags=0):
        self._drained = True  # the answer is yet to come
        self.t_sent = time.perf_counter()
        if self.t_first_sent is None:
            self.t_first_sent = self.t_sent
        self.t_received = self.lateness = None  # a new request: nothing of it has arrived yet
        self.late_bound_s = None if KERNEL_STAMPS or not self._turns.watching else 0.0
        self._t_read = self.t_sent  # no answer came before its request
        self._request_sockets[gevent.getcurrent()] = self
        return super().sendall(data, flags)

    def recv(self, bufsize, flags=0):
        raw = self._sock
        waited = self._drained and self.timeout != 0.0
        if waited:
            # The last read emptied the socket: the next bytes are yet to come, so wait for them
            # first rather than pay a failed system call and an exception to learn it.
            self._wait_readable()
        while True:
            try:
                if KERNEL_STAMPS:
                    data, ancdata, _flags, _address = raw.recvmsg(bufsize, _ANCILLARY_BYTES, flags)
                else:
                    data = raw.recv(bufsize, flags)
                break
            except BlockingIOError:
                if self.timeout == 0.0:
                    raise
                self._wait_readable()
                waited = True
        self._drained = len(data) < bufsize
        if KERNEL_STAMPS:
            perf_now = time.perf_counter()
            self.t_received = stamp = kernel_arrival(ancdata, time.time(), perf_now, self.t_sent)
            self.lateness = None if stamp is None else perf_now - stamp
        elif self.late_bound_s is not None:
            now = time.perf_counter()
            if waited:
                self.late_bound_s = max(self.late_bound_s, self._turns.late_bound_s(now, self._t_read))
            self._t_read = now
        return data

    def _wait_readable(self) -> None:
        """Wait for bytes; the watchdog ends a wait longer than the socket's timeout. (gevent's own
        wait makes a Timeout object per wait: a tenth of the client's cost per event.)"""
        if self.timeout is not None:
            self._waiting[self] = time.perf_counter() + self.timeout
        try:
            self.hub.wait(self._read_event)
        finally:
            self._waiting.pop(self, None)


# Without kernel stamps a read is dated when it returns, and how late that is can be bounded from the
# event loop's turns. A waiting read's bytes came after the socket's last read (which took all there was)
# and were found by the loop's last poll. If that poll waited, they came as it returned (a poll returns at the
# first bytes to come): the read is late by the time since. If it did not wait (bytes were there already),
# they came while the loop was busy before it: late by at most the time since the poll before. When
# hundreds of streams' bytes come together the loop serves their reads one after the other and is busy
# for tens of ms, which a lag probe woken early in such a turn does not see (measured:
# docs/accuracy.md#the-saturation-guard).
EV_MINPRI, EV_MAXPRI = -2, 2  # libev's watcher priorities: the lowest runs last, the highest first


class LoopTurns:
    """When the event loop entered and left its last poll, and left the one before, on ``clock``."""

    # A poll that returned later than this after it was entered waited for bytes (one that found bytes
    # ready returns in microseconds, unless the process lost its core meanwhile: then it is taken as
    # having waited, and what came before it is not bounded).
    BLOCKED_S = 0.0002

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self.polled = self.entered = self.polled_before = clock()
        self._watchers: tuple = ()

    @property
    def watching(self) -> bool:
        return bool(self._watchers)

    def watch(self, loop) -> None:
        """Note every poll of ``loop``: entered after every other callback before it (gevent runs its
        own in a prepare watcher of the default priority), left before any reading after it. libev's
        only: libuv (gevent's loop on Windows) has no priorities and runs its check watchers after the
        turn's reads, so there nothing is noted and the lag probe alone guards."""
        if "libev" not in type(loop).__module__:
            return
        entering, leaving = loop.prepare(ref=False, priority=EV_MINPRI), loop.check(ref=False, priority=EV_MAXPRI)
        entering.start(self.entering)
        leaving.start(self.leaving)
        self._watchers = (entering, leaving)

    def unwatch(self) -> None:
        for watcher in self._watchers:
            watcher.stop()
            watcher.close()
        self._watchers = ()

    def entering(self) -> None:
        self.polled_before, self.entered = self.polled, self.clock()

    def leaving(self) -> None:
        self.polled = self.clock()

    def late_bound_s(self, now: float, not_before: float) -> float:
        """How late bytes found by the last poll and read ``now`` may be dated, at most; they came
        after ``not_before`` (the socket's last read, which took all there was)."""
        waited = self.polled - self.entered > self.BLOCKED_S
        return now - max(not_before, self.polled if waited else self.polled_before)


WATCHDOG_INTERVAL_S = 0.25


class Watchers:
    """What watches this process's sockets: the event loop's turns (without kernel stamps), one watchdog
    for every wait for bytes, and which socket each greenlet's last request went out on.

    One per process, as there is one event loop: ``watchers()`` makes and starts it at its first call
    (the run's set-up, llm_run.LLMRun, calls it). Tests may make their own and ``stop`` it.
    """

    def __init__(self) -> None:
        self.turns = LoopTurns()
        self.waiting: dict = {}  # socket -> when its wait for bytes times out (perf_counter)
        # greenlet -> the socket its last request went out on. The response object is no way to it: it
        # lets go of its socket as soon as the message is complete, often in the read of the headers.
        self.request_sockets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._watchdog: gevent.Greenlet | None = None
        self._stamps_on: socket.socket | None = None

    def start(self) -> Watchers:
        if KERNEL_STAMPS:
            self._stamps_on = _stamps_kept_on()
        else:
            self.turns.watch(gevent.get_hub().loop)
        self._watchdog = gevent.spawn(self._watch_waits)
        return self

    def stop(self) -> None:
        if self._stamps_on is not None:
            self._stamps_on.close()
            self._stamps_on = None
        self.turns.unwatch()
        if self._watchdog is not None:
            self._watchdog.kill(block=False)

    def _watch_waits(self) -> None:
        """End every wait for bytes that has outlasted its socket's timeout, as socket.timeout."""
        hub = gevent.get_hub()
        while True:
            gevent.sleep(WATCHDOG_INTERVAL_S)
            now = time.perf_counter()
            for sock, deadline in list(self.waiting.items()):
                if deadline <= now and self.waiting.pop(sock, None) is not None:
                    hub.cancel_wait(sock._read_event, socket.timeout("timed out"))

    def tcp_socket(self, family, socktype, protocol) -> StampedSocket:
        """A connection pool's tcp socket factory (geventhttpclient's ``_create_tcp_socket``)."""
        sock = StampedSocket(family, socktype, protocol)
        sock._turns, sock._waiting, sock._request_sockets = self.turns, self.waiting, self.request_sockets
        if KERNEL_STAMPS:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                pass  # a kernel without it: no stamp comes with the data, and reads are stamped as they return
        return sock

    def request_socket(self, t_send: float) -> StampedSocket | None:
        """The socket on which this greenlet's request, sent at ``t_send`` or later, went out (None
        when it never left, e.g. the connection was refused)."""
        sock = self.request_sockets.get(gevent.getcurrent())
        if sock is None or sock.t_sent is None or sock.t_sent < t_send:
            return None
        return sock


def _stamps_kept_on() -> socket.socket | None:
    """A socket that asks for receive stamps and is kept for the process's life. Linux stamps packets while
    any socket on the machine asks, and switches that on and off in a deferred work item: a server that closes
    each connection after its answer (llama.cpp) would have the client's last stamping socket close between
    requests, and a next answer that came before the switch-on had run would be read unstamped (dated as it
    is read, as on macOS). A kernel-stamp test met exactly that once (tests/test_transport.py)."""
    keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return None
    return keeper


@functools.cache
def watchers() -> Watchers:
    """This process's watchers, made and started at the first call: once per process."""
    return Watchers().start()


class StampedClientPool(HTTPClientPool):
    """geventhttpclient's client pool whose connections are StampedSockets.

    geventhttpclient makes every connection through its connection pool's tcp socket factory
    (``_create_tcp_socket``); each pool this client pool makes gets the watchers' factory, so only the
    measured users' connections are stamped, and nothing of geventhttpclient is patched
    (docs/locust.md#socket-factory).
    """

    def __init__(self, watchers_: Watchers, **client_args) -> None:
        super().__init__(**client_args)
        self.watchers = watchers_

    def get_client(self, url):
        known = len(self.clients)
        client = super().get_client(url)
        if len(self.clients) != known:  # made now: its connection pool has made no socket yet
            client._connection_pool._create_tcp_socket = self.watchers.tcp_socket
        return client


def stamp_connections(session, watchers_: Watchers) -> None:
    """Make every connection of a FastHttpSession (a FastHttpUser's ``client``) a StampedSocket: its
    user agent's client pool, not yet used, is replaced by a StampedClientPool of the same arguments."""
    agent = session.client
    agent.clientpool = StampedClientPool(watchers_, **agent.clientpool.client_args)


# A kept-alive connection the server had already closed shows it within a round trip of the send (its FIN,
# or its RST to our bytes); a server that dies while a request waits for a slot closes it later.
STALE_CLOSE_S = 0.1
STALE_CLOSE_RTTS = 4


def closed_before_response(response, sock: StampedSocket | None, t_send: float, now: float) -> bool:
    """The server had closed a kept-alive connection and answered nothing: the request never ran, and is
    sent again.

    llama.cpp's server closes the connection after each streamed answer while announcing keep-alive
    (docs/engines.md#llamacpp-keep-alive); the pool drops a connection whose close has arrived before it
    hands it out, but one whose close is still on its way meets our request. Only a connection that carried
    an earlier request (``t_first_sent`` before this request's ``t_send``), closed within a round trip of the
    send (``STALE_CLOSE_S``, or ``STALE_CLOSE_RTTS`` of its measured round trip when longer): a fresh
    connection closed unanswered, or one closed later (the server died while the request waited for a slot),
    is a failed request (``disconnect``), never hidden behind a second send. ``sock``: the socket the
    request went out on (``Watchers.request_socket``), None when it never left.
    """
    error = cause(getattr(response, "error", None))
    if response.status_code or not isinstance(error, (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError)):
        return False
    if sock is None or sock.t_first_sent is None or sock.t_first_sent >= t_send:
        return False
    within = max(STALE_CLOSE_S, STALE_CLOSE_RTTS * (tcp_rtt_s(sock) or 0.0))
    return now - sock.t_sent <= within
