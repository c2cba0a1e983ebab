"""How the Locust glue stamps body lines: by the socket read that brought them (fake socket reads),
with the kernel's receive stamp where there is one (a real socket)."""

import json
import socket
import struct
import threading
import time

import pytest
from geventhttpclient.response import HTTPSocketResponse
from geventhttpclient.useragent import RetriesExceeded

from bench_tasks.steal import Steal
from locustfiles import transport
from locustfiles.activity import Activity
from locustfiles.guard import Guard
from locustfiles.transport import KERNEL_STAMPS, SO_TIMESTAMPNS, TCP_INFO, kernel_arrival, tcp_rtt_s, timed_chunks


class Reads:
    """geventhttpclient's response as timed_chunks sees it: a body buffer that its parser fills with
    what each socket read brought; it lets go of the socket once the message is complete."""

    block_size = 4096

    def __init__(self, reads: list[tuple[float, bytes]], kernel_lead_s: float | None = None) -> None:
        self.reads = list(reads)
        self.now = 0.0
        self._body_buffer = bytearray()
        self.message_complete = False
        # With kernel stamps, a read's bytes arrived kernel_lead_s before the read returned.
        self.kernel_lead_s = kernel_lead_s
        self.sock = self._sock = Sock(self)

    def clock(self) -> float:
        # Time passes while the client parses: every reading of the clock is 1 ms after the last.
        self.now += 0.001
        return self.now

    def recv(self) -> bytes:
        self.now, data = self.reads.pop(0)
        self.sock.t_received = None if self.kernel_lead_s is None else self.now - self.kernel_lead_s
        self.sock.lateness = self.kernel_lead_s
        return data

    def feed(self, data: bytes) -> None:
        self._body_buffer += data
        if not self.reads:
            self.message_complete, self._sock = True, None

    def release(self) -> None:
        self._sock = None


class Sock:
    t_received: float | None = None
    lateness: float | None = None

    def __init__(self, raw: Reads) -> None:
        self.raw = raw

    def recv(self, _size: int) -> bytes:
        return self.raw.recv()


class Response:
    def __init__(self, raw: Reads) -> None:
        self._response = raw


def test_lines_of_one_read_share_its_stamp_and_a_split_line_waits_for_its_end():
    raw = Reads([(1.0, b"data: a\n\ndata: b\n\nda"), (2.0, b"ta: c\n"), (2.5, b"\n")])
    stamped = list(timed_chunks(Response(raw), raw.sock, clock=raw.clock))
    assert stamped == [(1.001, b"data: a\n\ndata: b\n\n", None), (2.001, b"data: c\n", None), (2.501, b"\n", None)]


def test_body_bytes_that_came_with_the_headers_keep_the_first_stamp():
    raw = Reads([(3.0, b"data: late\n")])
    raw._body_buffer += b"data: early\n"
    raw.now = 0.25  # the headers' read
    stamped = list(timed_chunks(Response(raw), raw.sock, clock=raw.clock))
    assert stamped == [(0.251, b"data: early\n", None), (3.001, b"data: late\n", None)]


def test_a_kernel_stamp_replaces_the_time_the_read_returned():
    raw = Reads([(1.0, b"data: a\n\nda"), (2.0, b"ta: b\n"), (2.5, b"\n")], kernel_lead_s=0.004)
    raw.sock.t_received, raw.sock.lateness = 0.5, 0.002  # the headers' read
    raw._body_buffer += b": hi\n"
    stamped = list(timed_chunks(Response(raw), raw.sock, clock=raw.clock))
    # The last read ends the message and the response lets go of its socket: its stamp still counts.
    assert stamped == [(0.5, b": hi\n", 0.002), (0.996, b"data: a\n\n", 0.004), (1.996, b"data: b\n", 0.004),
                       (2.496, b"\n", 0.004)]


def test_every_read_moves_the_run_by_its_stamp():
    """The run's activity (the stall watchdog's clock) moves at every read, to the read's stamp."""
    raw = Reads([(1.0, b"data: a\n\nda"), (2.0, b"ta: b\n"), (2.5, b"\n")], kernel_lead_s=0.004)
    activity = Activity()
    moved = []
    for stamp, _chunk, _late in timed_chunks(Response(raw), raw.sock, activity, clock=raw.clock):
        moved.append((stamp, activity.last))
    assert moved == [(0.996, 0.996), (1.996, 1.996), (2.496, 2.496)]


def test_a_last_line_without_its_newline_still_comes_out():
    raw = Reads([(1.0, b"data: a\n\ndata: [DONE]")])
    assert list(timed_chunks(Response(raw), raw.sock, clock=raw.clock)) == [
        (1.001, b"data: a\n\n", None), (1.001, b"data: [DONE]", None)]


class ScriptedSocket:
    """A socket whose reads bring the given bytes, one piece each."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)

    def recv(self, _size: int) -> bytes:
        return self.pieces.pop(0)

    def close(self) -> None:
        self.pieces = []


@pytest.mark.parametrize("cut", [1, 7, 40, 10_000])
def test_a_real_chunked_response_cut_anywhere_comes_out_as_its_lines(cut):
    """geventhttpclient's own response and parser (timed_chunks drives its C parser directly): the body,
    de-chunked, comes out whole and in order, each read's complete lines at once."""
    events = [b"data: " + json.dumps({"n": i, "text": "x" * i}).encode() + b"\n\n" for i in range(30)]
    events.append(b"data: [DONE]\n\n")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    wire = head + b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n"
    raw = HTTPSocketResponse(ScriptedSocket([wire[i:i + cut] for i in range(0, len(wire), cut)]), method="POST")
    chunks = [chunk for _t, chunk, _late in timed_chunks(Response(raw), None, clock=lambda: 1.0)]
    assert b"".join(chunks) == b"".join(events) and raw.message_complete
    assert all(chunk.endswith(b"\n") for chunk in chunks)


def _timespec(wall_s: float) -> list:
    seconds = int(wall_s)
    return [(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("qq", seconds, round((wall_s - seconds) * 1e9)))]


def test_kernel_arrival_moves_the_wall_stamp_onto_the_perf_counter_clock():
    # wall 1000.250 now, perf 7.000 now: a packet stamped at wall 1000.244 arrived at perf 6.994.
    assert kernel_arrival(_timespec(1000.244), 1000.250, 7.0, not_before=6.9) == pytest.approx(6.994, abs=1e-9)
    other = [(socket.IPPROTO_IP, 1, b"\0" * 16)]
    assert kernel_arrival(other + _timespec(1000.244), 1000.250, 7.0, None) == pytest.approx(6.994, abs=1e-9)


@pytest.mark.parametrize("wall_stamp, why", [(1000.251, "after now"), (1000.0, "before the request left")])
def test_a_stamp_the_clocks_cannot_explain_is_not_used(wall_stamp, why):
    # Only a wall clock stepped between the packet and the read gives these.
    assert kernel_arrival(_timespec(wall_stamp), 1000.250, 7.0, not_before=6.9) is None, why
    assert kernel_arrival([], 1000.250, 7.0, None) is None


def _answering(listener, answers: list[tuple[float, bytes]], sent: dict) -> threading.Thread:
    """Serve one connection: after its request, each answer's bytes after its delay (``sent[i]``: when)."""
    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.recv(16)
            for i, (delay_s, data) in enumerate(answers):
                time.sleep(delay_s)
                sent[i] = time.perf_counter()
                conn.sendall(data)
            conn.recv(16)  # until the client closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    return server


def _stamps_switched_on(limit_s: float = 2.0) -> socket.socket:
    """A socket that keeps Linux's receive stamps on, once they are (the caller closes it). The kernel switches
    them on for the whole machine when a first socket asks, in a deferred work item, and packets that come
    before it has run carry none: on a loaded machine this file's stamp test once got its answer unstamped.
    A loopback exchange is repeated until one comes stamped."""
    keeper = socket.socket()
    keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    deadline = time.perf_counter() + limit_s
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as probe:
        probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        peer, _ = listener.accept()
        with peer:
            while time.perf_counter() < deadline:
                peer.sendall(b"x")
                if probe.recvmsg(16, socket.CMSG_SPACE(16))[1]:
                    return keeper
                time.sleep(0.01)
    keeper.close()
    pytest.fail(f"no loopback packet came with a kernel stamp in {limit_s} s")


@pytest.mark.skipif(not KERNEL_STAMPS, reason="kernel receive stamps are read on 64-bit Linux only")
def test_a_late_read_of_a_real_socket_is_stamped_when_the_bytes_arrived():
    keeper = _stamps_switched_on()
    listener = socket.create_server(("127.0.0.1", 0))
    sent = {}
    server = _answering(listener, [(0.0, b"data: x\n")], sent)
    sock = transport.Watchers().tcp_socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    sock.connect(listener.getsockname())
    sock.sendall(b"go")
    time.sleep(0.2)  # a busy client: the bytes wait in the kernel
    assert sock.recv(64) == b"data: x\n"
    t_read = time.perf_counter()
    sock.close()
    server.join(5)
    listener.close()
    keeper.close()
    assert sent[0] - 0.002 <= sock.t_received <= sent[0] + 0.01  # not the read, 200 ms later
    assert t_read - sock.t_received > 0.15


class FakeTcpInfo:
    def __init__(self, info: bytes) -> None:
        self.info = info

    def getsockopt(self, level, option, size):
        return self.info[:size]


@pytest.mark.skipif(TCP_INFO is None, reason="TCP_INFO is Linux's")
def test_the_round_trip_is_the_kernels_least_tcp_round_trip_in_seconds():
    # struct tcp_info: 8 one-byte fields, then 32-bit ones: tcpi_rtt at byte 68, tcpi_min_rtt at byte 148.
    words = [0] * 38
    words[(68 - 8) // 4], words[(148 - 8) // 4] = 5378, 9
    info = bytes(8) + struct.pack("=38I", *words)
    assert tcp_rtt_s(FakeTcpInfo(info)) == pytest.approx(9e-6)
    # An older kernel's shorter struct: the smoothed round trip; no sample yet: the same.
    assert tcp_rtt_s(FakeTcpInfo(info[:104])) == pytest.approx(5378e-6)
    words[(148 - 8) // 4] = 0xFFFFFFFF
    assert tcp_rtt_s(FakeTcpInfo(bytes(8) + struct.pack("=38I", *words))) == pytest.approx(5378e-6)
    assert tcp_rtt_s(FakeTcpInfo(info[:60])) is None and tcp_rtt_s(None) is None
    # A real loopback connection: a few microseconds to a few hundred.
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname()) as client:
        peer, _ = server.accept()
        with peer:
            client.sendall(b"ask")
            peer.recv(3)
            peer.sendall(b"answer")
            client.recv(6)
            assert 0 < tcp_rtt_s(client) < 0.001


# -- without kernel stamps: how late a read may be dated, from the event loop's turns --

def test_a_read_after_a_poll_that_waited_is_late_by_the_time_since_the_poll_returned():
    now = [10.0]
    turns = transport.LoopTurns(clock=lambda: now[0])
    turns.entering()  # the loop polls at 10.0 and waits for bytes until 10.050: they came then
    now[0] = 10.050
    turns.leaving()
    assert turns.late_bound_s(10.060, not_before=9.0) == pytest.approx(0.010)
    # The next poll, entered at 10.130 after a busy turn, returned at once: its bytes had come already,
    # at any time since the poll before returned (10.050), and after the socket's last read.
    now[0] = 10.130
    turns.entering()
    now[0] = 10.13005
    turns.leaving()
    assert turns.late_bound_s(10.135, not_before=9.0) == pytest.approx(0.085)
    assert turns.late_bound_s(10.135, not_before=10.100) == pytest.approx(0.035)


def _unstamped_read(monkeypatch, hold_loop_s: float) -> tuple[float, float]:
    """A read of a real socket without kernel stamps that waits for its bytes, sent 50 ms after the
    request; meanwhile a greenlet holds the event loop for ``hold_loop_s`` (0: none). Returns the
    socket's late_bound_s and how late the read really was (its time less the send's)."""
    monkeypatch.setattr(transport, "KERNEL_STAMPS", False)
    watchers = transport.Watchers().start()  # the loop's turns are watched without kernel stamps
    listener = socket.create_server(("127.0.0.1", 0))
    sent = {}
    server = _answering(listener, [(0.05, b"data: x\n")], sent)
    sock = watchers.tcp_socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    sock.connect(listener.getsockname())
    sock.sendall(b"go")
    if hold_loop_s:
        transport.gevent.spawn(time.sleep, hold_loop_s)  # no yield: the loop polls again only after it
    assert sock.recv(64) == b"data: x\n"
    late_s = time.perf_counter() - sent[0]
    assert sock.t_received is None and sock.lateness is None  # dated as the read returns
    bound = sock.late_bound_s
    sock.close()
    watchers.stop()
    server.join(5)
    listener.close()
    return bound, late_s


def test_without_kernel_stamps_a_read_served_as_its_bytes_come_is_not_late(monkeypatch):
    bound, late_s = _unstamped_read(monkeypatch, hold_loop_s=0.0)  # the loop waits for them, idle
    assert late_s < 0.010 and 0.0 <= bound < 0.010


def test_without_kernel_stamps_bytes_that_came_while_the_loop_was_busy_bound_the_read_by_that_time(monkeypatch):
    # The bytes come at 50 ms while the loop is held until 120 ms; its next poll finds them ready and the
    # read is served at once. Served right after its poll, it was still dated some 70 ms late.
    bound, late_s = _unstamped_read(monkeypatch, hold_loop_s=0.120)
    assert late_s > 0.060
    assert late_s <= bound < late_s + 0.080  # at most the busy turn's length (120 ms) more


def test_a_request_whose_reads_were_served_late_is_flagged_by_its_own_reads():
    watcher = Guard(Steal())
    # 45 ms late: flagged; 35 ms: not; not known and no lag seen: not; kernel stamps: its own stamps judge.
    assert [watcher.untrustworthy(None, t_send=1.0, late_bound_s=0.045),
            watcher.untrustworthy(None, t_send=1.0, late_bound_s=0.035),
            watcher.untrustworthy(None, t_send=1.0, late_bound_s=None),
            watcher.untrustworthy(0.0, t_send=1.0, late_bound_s=0.045)] == [True, False, False, False]
    # A host's steal past the same limit flags it (bench_tasks.steal); none known: not flagged, not judged.
    assert [watcher.stolen_too_long(s) for s in (0.05, 0.04, 0.0, None)] == [True, False, False, False]


class Unanswered:
    """A FastHttp response to a request whose connection closed before any answer came."""

    status_code = 0

    def __init__(self, error: BaseException) -> None:
        self.error = error


class SentOn:
    """The socket a request went out on (StampedSocket's stamps); the kernel has no round trip for it."""

    def __init__(self, t_first_sent: float, t_sent: float) -> None:
        self.t_first_sent, self.t_sent = t_first_sent, t_sent

    def getsockopt(self, *_args):
        raise OSError("gone")


@pytest.mark.parametrize("error, sock, now, resent", [
    (transport.HTTPConnectionClosed("closed"), SentOn(1.0, 10.0), 10.05, True),  # kept alive, closed at once
    (ConnectionResetError(), SentOn(1.0, 10.0), 10.1, True),
    (transport.HTTPConnectionClosed("closed"), SentOn(1.0, 10.0), 10.5, False),  # closed while the server had it
    (transport.HTTPConnectionClosed("closed"), SentOn(10.0, 10.0), 10.01, False),  # a new connection
    (transport.HTTPConnectionClosed("closed"), None, 10.01, False),  # never left
    (TimeoutError(), SentOn(1.0, 10.0), 10.01, False),
    # our bytes met the closed connection (EPIPE): geventhttpclient, out of retries, wraps the broken pipe
    (RetriesExceeded("http://x/v1/chat/completions", 0, original=BrokenPipeError()), SentOn(1.0, 10.0), 10.01, True),
    (RetriesExceeded("http://x/v1/chat/completions", 0, original=socket.timeout()), SentOn(1.0, 10.0), 10.01, False),
], ids=["closed-at-once", "reset-at-once", "closed-later", "fresh-connection", "never-sent", "timeout",
        "broken-pipe-wrapped", "timeout-wrapped"])
def test_only_a_kept_alive_connection_closed_within_a_round_trip_of_the_send_is_sent_again(error, sock, now, resent):
    assert transport.closed_before_response(Unanswered(error), sock, 9.99, now) is resent


def test_a_response_that_came_is_never_sent_again():
    answered = Unanswered(transport.HTTPConnectionClosed("closed"))
    answered.status_code = 200
    assert not transport.closed_before_response(answered, SentOn(1.0, 10.0), 9.99, 10.01)


def test_a_timeout_before_the_head_is_a_timeout_though_geventhttpclient_wraps_it():
    from bench_tasks.errors import CLIENT_ERROR, DISCONNECT, TIMEOUT
    # A server that never answers: the wait for the head times out, and geventhttpclient, out of retries
    # (Locust asks for none), raises RetriesExceeded carrying the timeout (seen with simengine's fault hang).
    assert transport.classify(RetriesExceeded("http://x/v1/chat/completions", 0, original=socket.timeout("timed out"))) \
        == TIMEOUT
    assert transport.classify(socket.timeout("timed out")) == TIMEOUT
    assert transport.classify(ConnectionResetError()) == DISCONNECT
    assert transport.classify(ValueError("a bug")) == CLIENT_ERROR
