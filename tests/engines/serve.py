"""Start one of the tests' real engines on 127.0.0.1 and keep it up until Ctrl-C, to look at it by hand
(docs/engines.md shows each fact's curl against it):

    .venv/bin/python -m tests.engines.serve llamacpp      # also: smollm2, smollm2-ngram, vllm, vllm-ngram

It prints the server's URL and model name, as the tests' fixtures start it (same model, slots, threads,
cores), and stops it on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import threading

from .cache import cache_root
from .fixtures import start_smollm2, start_tiny_llamacpp, start_tiny_vllm

ENGINES = {
    "llamacpp": start_tiny_llamacpp,
    "smollm2": start_smollm2,
    "smollm2-ngram": lambda cache: start_smollm2(cache, ngram=True),
    "vllm": start_tiny_vllm,
    "vllm-ngram": lambda cache: start_tiny_vllm(cache, ngram=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.engines.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("engine", choices=sorted(ENGINES))
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = ENGINES[args.engine](cache_root())
    try:
        print(f"{args.engine}: {server.url} model {server.model} (Ctrl-C stops it)", flush=True)
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
