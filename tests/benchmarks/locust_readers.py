"""Why the client does not read a stream with Locust's own readers: `python tests/benchmarks/locust_readers.py`.

Asks the simulated engine (50 tok/s, events of about 200 bytes) for short streamed answers through Locust's
FastHttpSession and prints, per reader, when the first content event reached the caller (ms after the send):

- ``iter_content(1024)``, which Locust's ``iter_lines`` also uses: geventhttpclient's ``read(1024)`` reads
  until it holds 1024 bytes, so a token waits for the ones after it (docs/locust.md#fasthttp-readers-buffer);
- ``readline``: geventhttpclient's own line reader, each line as soon as it is in.
"""

from __future__ import annotations

import argparse
import re
import time

from locust.contrib.fasthttp import FastHttpSession
from locust.env import Environment

import simengine

CONTENT = re.compile(rb'"content": ?"[^"]')
BODY = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "stream": True}
HEADERS = {"Accept-Encoding": "identity"}


def first_content_by_chunks(session: FastHttpSession) -> float:
    t_send = time.perf_counter()
    first = None
    response = session.post("/v1/chat/completions", json=BODY, stream=True, headers=HEADERS)
    for chunk in response.iter_content(1024, decode_content=False):
        if first is None and CONTENT.search(chunk):
            first = time.perf_counter() - t_send
    return first


def first_content_by_lines(session: FastHttpSession) -> float:
    t_send = time.perf_counter()
    first = None
    response = session.post("/v1/chat/completions", json=BODY, stream=True, headers=HEADERS)
    while line := response._response.readline(b"\n"):
        if first is None and CONTENT.search(line):
            first = time.perf_counter() - t_send
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5, help="answers per reader (default 5)")
    args = parser.parse_args()
    with simengine.start_process(simengine.SimConfig(port=0, decode_tps=50.0)) as server:
        session = FastHttpSession(server.url, Environment().events.request, None)
        for name, read in (("iter_content(1024)", first_content_by_chunks), ("readline", first_content_by_lines)):
            firsts_ms = [round(read(session) * 1000, 1) for _ in range(args.requests)]
            print(f"{name:>18}: first content event after {firsts_ms} ms")


if __name__ == "__main__":
    main()
