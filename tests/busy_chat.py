"""Chat users in a client kept busy: a greenlet holds the event loop for 150 ms every 100 ms, as a
laptop's other work or too many streams would. A locustfile for tests/test_accuracy_sim.py (the
loop-lag guard, which is what protects a client without kernel receive stamps)."""

import time

import gevent

from locustfiles import engine_counters, llm_run
from locustfiles.users.chat import ChatUser  # noqa: F401 - the users of this run

BUSY_S, IDLE_S = 0.150, 0.100


def _keep_busy() -> None:
    while True:
        gevent.sleep(IDLE_S)
        end = time.perf_counter() + BUSY_S
        while time.perf_counter() < end:  # no yield: every greenlet waits, the guard's too
            pass


class Busy(llm_run.RunListener):
    def run_starts(self, run) -> None:
        gevent.spawn(_keep_busy)


llm_run.install(engine_counters.AroundEachRun("chat"), Busy())
