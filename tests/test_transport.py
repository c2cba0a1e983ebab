"""How the Locust glue stamps body lines: by the socket read that brought them (fake socket reads),
with the kernel's receive stamp where there is one (a real socket)."""

import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from locustfiles import transport
from locustfiles.transport import (KERNEL_STAMPS, SO_TIMESTAMPNS, TCP_INFO, _stamped_tcp_socket, kernel_arrival,
                                  tcp_rtt_s, timed_chunks)
from tests.conftest import ROOT


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


def test_a_last_line_without_its_newline_still_comes_out():
    raw = Reads([(1.0, b"data: a\n\ndata: [DONE]")])
    assert list(timed_chunks(Response(raw), raw.sock, clock=raw.clock)) == [
        (1.001, b"data: a\n\n", None), (1.001, b"data: [DONE]", None)]


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


@pytest.mark.skipif(not KERNEL_STAMPS, reason="kernel receive stamps are read on 64-bit Linux only")
def test_a_late_read_of_a_real_socket_is_stamped_when_the_bytes_arrived():
    listener = socket.create_server(("127.0.0.1", 0))
    sent = {}
    server = _answering(listener, [(0.0, b"data: x\n")], sent)
    sock = _stamped_tcp_socket(None, socket.AF_INET, socket.SOCK_STREAM, 0)
    sock.connect(listener.getsockname())
    sock.sendall(b"go")
    time.sleep(0.2)  # a busy client: the bytes wait in the kernel
    assert sock.recv(64) == b"data: x\n"
    t_read = time.perf_counter()
    sock.close()
    server.join(5)
    listener.close()
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


# -- without kernel stamps: a read served long after the loop found its bytes is known to be late --

class _Loop:
    """A loop whose last poll found the bytes ``ago_s`` ago (libev's ev_now is on the wall clock)."""

    def __init__(self, ago_s: float):
        self.ago_s = ago_s

    def now(self) -> float:
        return time.time() - self.ago_s


class _LoopThatPolled:
    """The real loop, but its last poll was ``ago_s`` ago."""

    def __init__(self, loop, ago_s: float):
        self._loop, self.ago_s = loop, ago_s

    def now(self) -> float:
        return time.time() - self.ago_s

    def __getattr__(self, name):
        return getattr(self._loop, name)


class _HubThatPolled:
    """The real hub, waits and all, whose loop says its last poll was ``ago_s`` ago."""

    def __init__(self, hub, ago_s: float):
        self._hub, self.loop = hub, _LoopThatPolled(hub.loop, ago_s)

    def __getattr__(self, name):
        return getattr(self._hub, name)


def _unstamped_reads(monkeypatch, served_ago_s: float | None):
    """Two reads of a real socket without kernel stamps: one that waited for its bytes, then one
    whose bytes were there already. Returns the socket's served_late_s after each."""
    monkeypatch.setattr(transport, "KERNEL_STAMPS", False)
    listener = socket.create_server(("127.0.0.1", 0))
    # The answer comes while the client waits for it; the next one 50 ms later.
    server = _answering(listener, [(0.05, b"data: x\n"), (0.05, b"data: y\n")], {})
    sock = _stamped_tcp_socket(None, socket.AF_INET, socket.SOCK_STREAM, 0)
    sock.connect(listener.getsockname())
    if served_ago_s is not None:
        sock.hub = _HubThatPolled(sock.hub, served_ago_s)
    sock.sendall(b"go")
    assert sock.recv(64) == b"data: x\n"  # woken by the loop: checked against its poll
    after_wait = sock.served_late_s
    time.sleep(0.2)  # the next bytes came meanwhile: read without a wait, when they came is unknown
    sock._drained = False
    assert sock.recv(64) == b"data: y\n"
    assert sock.t_received is None and sock.lateness is None  # dated as the read returns
    after_no_wait = sock.served_late_s
    sock.close()
    server.join(5)
    listener.close()
    return after_wait, after_no_wait


def test_without_kernel_stamps_a_read_is_known_late_by_how_long_after_the_loop_found_its_bytes(monkeypatch):
    after_wait, after_no_wait = _unstamped_reads(monkeypatch, served_ago_s=0.060)
    assert after_wait == pytest.approx(0.060, abs=0.005)  # served 60 ms after the poll that found it
    assert after_no_wait == after_wait  # a read that did not wait says nothing: the maximum stands


def test_without_kernel_stamps_a_read_served_at_once_is_not_late(monkeypatch):
    after_wait, _ = _unstamped_reads(monkeypatch, served_ago_s=None)  # the real loop, idle
    assert 0.0 <= after_wait < 0.010


def test_where_the_loops_clock_is_not_the_wall_clock_how_late_is_not_known(monkeypatch):
    assert transport.loop_on_wall_clock(transport.gevent.get_hub().loop)  # libev here: ev_now is wall time
    assert not transport.loop_on_wall_clock(_Loop(time.time() - 3000.0))  # libuv: seconds from its start
    monkeypatch.setattr(transport, "KERNEL_STAMPS", False)
    monkeypatch.setattr(transport, "loop_on_wall_clock", lambda loop: False)
    sock = _stamped_tcp_socket(None, socket.AF_INET, socket.SOCK_STREAM, 0)
    listener = socket.create_server(("127.0.0.1", 0))
    sock.connect(listener.getsockname())
    sock.sendall(b"go")
    assert sock.served_late_s is None
    sock.close()
    listener.close()


# The guard's judgement, in a process of its own (importing locust monkey-patches the process).
GUARD_JUDGES = """
from locustfiles.guard import Guard
watcher = Guard()
print([watcher.untrustworthy(None, t_send=1.0, served_late_s=0.045),
       watcher.untrustworthy(None, t_send=1.0, served_late_s=0.035),
       watcher.untrustworthy(None, t_send=1.0, served_late_s=None),
       watcher.untrustworthy(0.0, t_send=1.0, served_late_s=0.045)])
"""


def test_a_request_whose_reads_were_served_late_is_flagged_by_its_own_reads():
    judged = subprocess.run([sys.executable, "-c", GUARD_JUDGES], capture_output=True, text=True, check=True, cwd=ROOT)
    # 45 ms late: flagged; 35 ms: not; not known and no lag seen: not; kernel stamps: its own stamps judge.
    assert judged.stdout.split("\n")[-2] == "[True, False, False, False]", judged.stderr[-2000:]
