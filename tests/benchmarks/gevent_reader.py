"""selftest's bare reader on gevent: `python tests/benchmarks/gevent_reader.py URL BODY_FILE --streams N
--requests-per-stream R --out FILE` (as llm_bench.bare_reader, whose JSON it writes).

One greenlet per stream on a gevent socket with kernel receive stamps on, read with ``recvmsg`` as
llm-bench's transport reads (a read waits for bytes first, as llm-bench's does), counting content
events with ``bytes.count``: what reading the streams costs on the client's event loop, before any
HTTP or SSE parsing. client_floor.py holds it beside the asyncio reader and llm-bench.
"""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path
from time import perf_counter, process_time
from urllib.parse import urlsplit

import gevent
import gevent.socket

from llm_bench.bare_reader import CONTENT, END, TAIL, request_head

SO_TIMESTAMPNS = 35  # as locustfiles.transport: Linux, x86-64 and arm64
ANCILLARY_BYTES = socket.CMSG_SPACE(16)
READ_BYTES = 65536


def read_stream(host: str, port: int, head: bytes, requests: int, results: list) -> None:
    sock = gevent.socket.create_connection((host, port))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    raw = sock._sock
    for _ in range(requests):
        current = {"request_id": None, "t_send": perf_counter(), "t_first_content": None, "content_events": 0}
        sock.sendall(head)
        tail = b""
        while True:
            sock._wait(sock._read_event)
            data, _ancillary, _flags, _address = raw.recvmsg(READ_BYTES, ANCILLARY_BYTES)
            t = perf_counter()
            view = tail + data
            count = view.count(CONTENT)
            if count:
                if current["t_first_content"] is None:
                    current["t_first_content"] = t
                current["content_events"] += count
            if not data or view.endswith(END):
                break
            tail = view[-TAIL:]
        results.append(current)
    sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("body_file")
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--requests-per-stream", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    parts, body = urlsplit(args.url), Path(args.body_file).read_bytes()
    head = request_head(args.url, body)
    cpu0, t0, results = process_time(), perf_counter(), []
    gevent.joinall([gevent.spawn(read_stream, parts.hostname, parts.port, head, args.requests_per_stream, results)
                    for _ in range(args.streams)], raise_error=True)
    Path(args.out).write_text(json.dumps({"cpu_s": process_time() - cpu0, "wall_s": perf_counter() - t0,
                                          "requests": results}))


if __name__ == "__main__":
    main()
