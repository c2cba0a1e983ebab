"""The cheapest honest Python client, which selftest holds llm-bench's own cost against (stdlib only).

    python -m llm_bench.bare_reader URL BODY_FILE --streams N --requests-per-stream R --out FILE

One asyncio protocol per stream, on one keep-alive connection, sends its requests back to back
(BODY_FILE: the JSON body llm-bench sends). It parses nothing: per read it counts the content events
with ``bytes.count`` and looks for the end of the chunked body; per request it reads the response id
from the headers once. A request's first token is stamped when ``data_received`` first sees content
bytes (``perf_counter``, the machine's monotonic clock, as the engine's truth log). It writes JSON:
its CPU time (``time.process_time``: user and system) and wall time from the first connection to the
last answer, and per request the id, the send time, the first content time and the content events.

Content events are found by how the simulated engine opens a content delta; this reader is for it.

It reads into a buffer of its own (``asyncio.BufferedProtocol``): a plain ``asyncio.Protocol`` is
handed a new ``bytes`` of asyncio's 256 KiB read size per read, which glibc maps and unmaps for every
read (strace at W3 c=400: an mmap, mremap and munmap per recv). That cost it 24 to 29 us per token
where this reader costs 15 to 17.5 (measured 2026-12-05, docs/accuracy.md#what-the-stream-costs): a
floor that high would flatter whatever is held against it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from time import perf_counter, process_time
from urllib.parse import urlsplit

CONTENT = b'"delta": {"content": "'  # a role-only chunk opens its delta with "role"
END = b"\r\n0\r\n\r\n"  # the chunked body's last chunk
TAIL = len(CONTENT) - 1  # bytes kept from a read: a pattern cut between two reads is still counted once
REQUEST_ID = b"\r\nx-request-id: "


READ_BYTES = 65536


class Stream(asyncio.BufferedProtocol):
    def __init__(self, head: bytes, requests: int, results: list, finished: asyncio.Future) -> None:
        self.head, self.left, self.results, self.finished = head, requests, results, finished
        self.transport: asyncio.Transport | None = None
        self.current: dict = {}
        self.tail = self.response_head = b""
        self.buffer = memoryview(bytearray(READ_BYTES))

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.send()

    def send(self) -> None:
        self.left -= 1
        self.tail = self.response_head = b""
        self.current = {"request_id": None, "t_send": perf_counter(), "t_first_content": None, "content_events": 0}
        self.transport.write(self.head)

    def get_buffer(self, _sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.buffer[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        t = perf_counter()
        current = self.current
        view = self.tail + data
        count = view.count(CONTENT)
        if count:
            if current["t_first_content"] is None:
                current["t_first_content"] = t
            current["content_events"] += count
        if current["request_id"] is None and not self._read_id(data):
            return
        if view.endswith(END):
            self.results.append(current)
            if self.left:
                self.send()
            else:
                self._close()
        else:
            self.tail = view[-TAIL:]

    def _read_id(self, data: bytes) -> bool:
        """The response id from the x-request-id header (once per request, until the headers are in);
        False when the answer is not a 200 with an id: the stream ends there, its request failed."""
        self.response_head += data
        end = self.response_head.find(b"\r\n\r\n")
        if end < 0:
            return True
        head = self.response_head[:end + 2]
        start = head.find(REQUEST_ID)
        if not head.startswith(b"HTTP/1.1 200") or start < 0:
            self.current["error"] = head[:200].decode("latin-1")
            self.results.append(self.current)
            self._close()
            return False
        start += len(REQUEST_ID)
        self.current["request_id"] = head[start:head.index(b"\r\n", start)].decode("latin-1")
        self.response_head = b""
        return True

    def _close(self) -> None:
        self.transport.close()
        if not self.finished.done():
            self.finished.set_result(None)

    def connection_lost(self, exc) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


def request_head(url: str, body: bytes) -> bytes:
    """The whole request, head and body, as this reader sends it to ``url``'s chat endpoint."""
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\nContent-Type: "
            f"application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def read_streams(url: str, body: bytes, streams: int, requests_per_stream: int) -> list[dict]:
    parts, head = urlsplit(url), request_head(url, body)
    loop = asyncio.get_running_loop()
    results: list[dict] = []
    finished = [loop.create_future() for _ in range(streams)]
    for done in finished:
        await loop.create_connection(lambda done=done: Stream(head, requests_per_stream, results, done),
                                     parts.hostname, parts.port)
    await asyncio.gather(*finished)
    return results


def run(url: str, body: bytes, streams: int, requests_per_stream: int, timeout_s: float) -> dict:
    cpu0, t0 = process_time(), perf_counter()
    results = asyncio.run(asyncio.wait_for(read_streams(url, body, streams, requests_per_stream), timeout_s))
    return {"cpu_s": process_time() - cpu0, "wall_s": perf_counter() - t0, "requests": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_bench.bare_reader", description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("body_file")
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--requests-per-stream", type=int, required=True)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = run(args.url, Path(args.body_file).read_bytes(), args.streams, args.requests_per_stream, args.timeout_s)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
