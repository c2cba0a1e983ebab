"""How the Locust glue stamps body lines: by the socket read that brought them (fake socket reads)."""

from locustfiles.transport import timed_lines


class Reads:
    """geventhttpclient's response as timed_lines sees it: a body buffer filled by reads."""

    def __init__(self, reads: list[tuple[float, bytes]]) -> None:
        self.reads = list(reads)
        self.now = 0.0
        self._body_buffer = bytearray()

    def clock(self) -> float:
        # Time passes while the client parses: every reading of the clock is 1 ms after the last.
        self.now += 0.001
        return self.now

    def readline(self, sep: bytes) -> bytes:
        while sep not in self._body_buffer:
            if not self.reads:
                line, self._body_buffer[:] = bytes(self._body_buffer), b""
                return line
            self.now, data = self.reads.pop(0)
            self._body_buffer += data
        end = self._body_buffer.index(sep) + len(sep)
        line = bytes(self._body_buffer[:end])
        del self._body_buffer[:end]
        return line


class Response:
    def __init__(self, raw: Reads) -> None:
        self._response = raw


def test_lines_of_one_read_share_its_stamp_and_a_split_line_waits_for_its_end():
    raw = Reads([(1.0, b"data: a\n\ndata: b\n\nda"), (2.0, b"ta: c\n"), (2.5, b"\n")])
    stamped = list(timed_lines(Response(raw), clock=raw.clock))
    assert stamped == [(1.001, b"data: a\n"), (1.001, b"\n"), (1.001, b"data: b\n"), (1.001, b"\n"),
                       (2.001, b"data: c\n"), (2.501, b"\n")]


def test_body_bytes_that_came_with_the_headers_keep_the_first_stamp():
    raw = Reads([(3.0, b"data: late\n")])
    raw._body_buffer += b"data: early\n"
    raw.now = 0.25  # the headers' read
    stamped = list(timed_lines(Response(raw), clock=raw.clock))
    assert stamped == [(0.251, b"data: early\n"), (3.001, b"data: late\n")]
