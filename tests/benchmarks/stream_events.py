"""CPU per event of the stream's measuring core: `python tests/benchmarks/stream_events.py [--events 200000]
[--api chat responses messages]`.

Feeds bench_tasks.stream.Recorder the simulated engine's own bytes, as it streams them to llm-bench, on
each API asked (chat: vLLM-shaped chunks with per-event usage: a role chunk, one content event per
token, the finish chunk, usage, [DONE]; responses and messages: their typed events, opening events,
one delta per token, the closing events), in stamped chunks as locustfiles.transport delivers them: the
whole lines of one socket read, ``--per-read`` events each (1: a client that keeps up; 4: one that
reads late). Per request it runs what the measuring path runs: consume, end, fill, with the API's
decoder. Two ways:

- ``flat``: one request after the other, in one loop;
- ``greenlets``: ``--streams`` requests at once, each in its own greenlet that waits in gevent's hub
  before each read, as the Locust client does: the greenlet switches, and their cost for a deep
  stack (greenlet copies the stack it switches out), are counted as they are in a run.

Prints microseconds of CPU per event (best of ``--repeat``), orjson included.
"""

from __future__ import annotations

import argparse
import time

import gevent

from bench_tasks.decoders import ChatDecoder, MessagesDecoder, ResponsesDecoder
from bench_tasks.record import Record
from bench_tasks.stream import Recorder
from simengine.sse import ChunkEncoder, MessagesEncoder, ResponsesEncoder

TOKENS = 200  # per request, as selftest's W3
DECODERS = {"chat": ChatDecoder, "responses": ResponsesDecoder, "messages": MessagesDecoder}


def request_chunks(index: int, per_read: int, api: str = "chat") -> list[tuple[float, bytes, float | None]]:
    usage = [{"prompt_tokens": 20, "total_tokens": 20 + k, "completion_tokens": k} for k in range(TOKENS + 1)]
    if api == "chat":  # usage on every event, as the sim profile asks vLLM-style
        encoder = ChunkEncoder(f"chatcmpl-{index:08d}", "sim-model", 1700000000, chat=True, crlf=False)
        per_event = usage
    else:  # usage at the start (Messages) and the end only
        usage = [{**u, "prompt_tokens_details": {"cached_tokens": 0}} for u in usage]
        per_event = [usage[0]] + [None] * TOKENS
        encoder = (ResponsesEncoder(f"resp_{index:08d}", "sim-model", 1700000000, crlf=False) if api == "responses"
                   else MessagesEncoder(f"msg_{index:08d}", "sim-model", crlf=False))
    events = [encoder.role(per_event[0])] + [encoder.content(f" word{k}", per_event[k + 1]) for k in range(TOKENS)]
    events += encoder.closing("length", per_event[-1], usage[-1], None, True)
    reads = [b"".join(events[i:i + per_read]) for i in range(0, len(events), per_read)]
    return [(0.001 + 0.02 * i, chunk, 0.0001) for i, chunk in enumerate(reads)]


def measure(chunks, api: str = "chat") -> None:
    recorder = Recorder(0.0, None, DECODERS[api]())
    recorder.consume(chunks)
    recorder.end(0.0)
    recorder.fill(Record())


def waiting(chunks):
    """The chunks, each after a turn of the hub (the transport waits there for every read)."""
    for item in chunks:
        gevent.sleep(0)
        yield item


def flat(requests: list, api: str = "chat") -> float:
    start = time.process_time()
    for chunks in requests:
        measure(chunks, api)
    return time.process_time() - start


def greenlets(requests: list, streams: int, api: str = "chat") -> float:
    start = time.process_time()
    for i in range(0, len(requests), streams):
        gevent.joinall([gevent.spawn(measure, waiting(chunks), api) for chunks in requests[i:i + streams]])
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="content events in all")
    parser.add_argument("--per-read", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--streams", type=int, default=400, help="greenlets at once")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--api", nargs="+", default=["chat"], choices=sorted(DECODERS))
    args = parser.parse_args()
    for api in args.api:
        for per_read in args.per_read:
            requests = [request_chunks(i, per_read, api) for i in range(args.events // TOKENS)]
            # Every event is read: chat's 4 others parsed, most of the typed APIs' others skipped unparsed.
            events = sum(chunk.count(b"\n\n") for chunks in requests for _t, chunk, _late in chunks)
            tokens = len(requests) * TOKENS
            for name, run in (("flat", flat), ("greenlets", lambda r: greenlets(r, args.streams, api))):
                best = min(run(requests, api) if name == "flat" else run(requests) for _ in range(args.repeat))
                print(f"{api}, {per_read} event(s) per read, {name:>9}: {best / events * 1e6:5.2f} us per event, "
                      f"{best / tokens * 1e6:5.2f} per token ({events} events, best of {args.repeat})")


if __name__ == "__main__":
    main()
