"""Serving: the event loop, the listening socket, the ready line, and dying with the parent."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys

from simengine.config import SimConfig
from simengine.connection import Connection
from simengine.engine import Engine
from simengine.router import Router
from simengine.scheduler import Scheduler
from simengine.truth_log import TruthLog

READY_PREFIX = "simengine listening on "
PARENT_POLL_S = 0.5


def serve(config: SimConfig, parent_pid: int | None = None) -> int:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    truth_log = TruthLog(config.truth_log)
    engine = Engine(config, Scheduler(loop), truth_log)
    router = Router(config, engine)
    server = loop.run_until_complete(loop.create_server(
        lambda: Connection(router.handle), config.host, config.port, reuse_address=True, backlog=2048))
    port = server.sockets[0].getsockname()[1]
    stopped = loop.create_future()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: stopped.done() or stopped.set_result(None))
    if parent_pid:
        loop.create_task(_watch_parent(parent_pid, stopped))
    # Many small short-lived objects per event: fewer young-generation collections, shorter pauses.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50000, 20, 100)
    print(f"{READY_PREFIX}http://{config.host}:{port}", flush=True)
    try:
        loop.run_until_complete(stopped)
    finally:
        server.close()
        truth_log.close()
        loop.close()
    return 0


async def _watch_parent(parent_pid: int, stopped: asyncio.Future) -> None:
    """Exit when the process that started us is gone (polling: PR_SET_PDEATHSIG fires when the
    parent *thread* exits, which would kill a sim started from a worker thread)."""
    while not stopped.done():
        if os.getppid() != parent_pid:
            print("simengine: parent gone, exiting", file=sys.stderr)
            stopped.set_result(None)
            return
        await asyncio.sleep(PARENT_POLL_S)
