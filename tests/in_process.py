"""The Locust glue run inside the test process, as Locust's own tests run Locust: an ``Environment`` with
its own ``Events``, the run's one call (``llm_run.install``), a runner, Locust's ``init`` fired, a run
started, waited for, and quit as ``locust`` quits (its ``quitting`` event).

Locust is imported here without its monkey-patching. ``import locust`` patches the whole process with
gevent (socket, threading, time, subprocess...); in a pytest-xdist worker that breaks xdist itself, whose
main thread then waits on an Event its I/O thread sets as if on a greenlet (seen here as an INTERNALERROR
in ``xdist/remote.py``, the wait in ``gevent/thread.py``). So this module, imported first by
tests/conftest.py, imports Locust with LOCUST_SKIP_MONKEY_PATCH set only around the import: the
subprocesses other tests start (``locust``, ``llm-bench``) are patched as a user's are. Locust's runners,
FastHttpUser (geventhttpclient) and its messages (zmq.green) use gevent's own sockets and greenlets and
need no patching; what differs is that the glue's side requests (bench_tasks.server: urllib, e.g. the
server's models) hold the event loop while they wait, instead of yielding (short, on 127.0.0.1), and that
blocking calls of a test (urllib, subprocess) must not wait on the Locust of the same process: ``fetch``
runs them in a thread. Figures that time the client come from tests that run Locust as users run it
(docs/locust.md#in-process-tests).

A test never imports a runnable locustfile (its ``install`` would register on Locust's global events):
it builds its shape from locustfiles.shapes and its users from locustfiles.users, as the runnable files do.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

if "locust" not in sys.modules:
    skip = os.environ.get("LOCUST_SKIP_MONKEY_PATCH")
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        import locust  # noqa: F401 - here, before any other import of it
    finally:
        if skip is None:
            del os.environ["LOCUST_SKIP_MONKEY_PATCH"]
        else:
            os.environ["LOCUST_SKIP_MONKEY_PATCH"] = skip

import gevent
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.event import Events
from locust.runners import STATE_STOPPED

from locustfiles import llm_run

WAIT_S = 60.0


def parsed(*argv: str):
    """Locust's options with llm-bench's, parsed from ``argv`` as ``locust`` parses them (no config files)."""
    parser = get_parser(default_config_files=[])
    llm_run.add_options(parser)
    return parser.parse_args(list(argv))


def until(condition: Callable[[], object], timeout_s: float = WAIT_S, every_s: float = 0.05):
    """Wait (letting the event loop run) until ``condition()`` is true; return it."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {getattr(condition, '__name__', condition)}")
        gevent.sleep(every_s)


def fetch(call: Callable, *args, **kwargs):
    """``call(*args)`` in a thread of the event loop's pool: a blocking call (urllib, a subprocess) that waits
    on this process's Locust (its web UI) while the loop runs."""
    return gevent.get_hub().threadpool.spawn(call, *args, **kwargs).get()


class LocalRun:
    """One Locust environment of this process: ``environment``, ``runner``, ``run`` (its LLMRun)."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.runner = environment.runner
        self.run: llm_run.LLMRun = environment.llm

    @property
    def url(self) -> str:
        """The web UI's address."""
        return f"http://127.0.0.1:{self.environment.web_ui.server.server_port}"

    @property
    def out(self) -> Path:
        return Path(self.environment.parsed_options.out)

    def start(self, users: int = 1, spawn_rate: float = 100) -> None:
        """Start as a headless ``locust`` starts: the shape's, or ``users`` of the user classes."""
        if self.environment.shape_class is not None:
            self.runner.start_shape()
        else:
            self.runner.start(users, spawn_rate)

    def stopped(self) -> bool:
        return self.runner.state == STATE_STOPPED

    def ended(self) -> bool:
        """The runner quit (a headless run quits when its shape or its failure ends it; a worker when told)."""
        return all(greenlet.dead for greenlet in self.runner.greenlet)

    def wait(self, timeout_s: float = WAIT_S) -> None:
        """Until the run is over: its runner quit (headless, as ``locust`` waits for it), or stopped (not)."""
        until(self.ended if self.environment.parsed_options.headless else self.stopped, timeout_s)

    def quit(self) -> None:
        """As ``locust`` ends: its quitting event, then the runner's quit (nothing more if it quit already)."""
        self.environment.events.quitting.fire(environment=self.environment, reverse=True)
        if not self.ended():
            self.runner.quit()


def environment(argv: list[str], user_classes: list[type] = (), shape=None, headless: bool = True,
                listeners: tuple = ()) -> Environment:
    """An environment as ``locust`` makes it, with events of its own and the run's one call made on them."""
    events = Events()
    llm_run.install(*listeners, events=events)
    options = parsed(*(["--headless"] if headless else []), *argv)
    return Environment(user_classes=list(user_classes), shape_class=shape() if shape else None, events=events,
                       host=options.host, parsed_options=options)


@contextmanager
def local(argv: list[str], user_classes: list[type] = (), shape=None, web_ui: bool = False,
          headless: bool | None = None, listeners: tuple = ()):
    """A local runner's run (``--host``, ``--out``... in ``argv``), quit when the block ends; headless unless
    it has a web UI (a run that is not stops when its shape ends, and may start again)."""
    env = environment(argv, user_classes, shape, headless=not web_ui if headless is None else headless,
                      listeners=listeners)
    runner = env.create_local_runner()
    # Locust's page lists the extra options of its own parser of the process's argv (pytest's, here): none.
    argv_kept, sys.argv = sys.argv, ["locust"]
    ui = env.create_web_ui("127.0.0.1", 0, delayed_start=True) if web_ui else None
    env.events.init.fire(environment=env, runner=runner, web_ui=ui)
    if ui is not None:
        ui.start()
        until(lambda: ui.server is not None and ui.server.server_port)
    run = LocalRun(env)
    try:
        yield run
    finally:
        run.quit()
        if ui is not None:
            ui.stop()
        sys.argv = argv_kept


@contextmanager
def distributed(argv: list[str], user_classes: list[type], shape=None, workers: int = 1,
                worker_argv: list[list[str]] | None = None, listeners: tuple = ()):
    """A master and ``workers`` workers in this process, over 127.0.0.1 (as Locust's own tests run them);
    yields (master's LocalRun, the workers' LocalRuns). Each worker's argv: ``worker_argv[i]`` (--client-host...)."""
    master_env = environment(argv, user_classes, shape, listeners=listeners)
    master = master_env.create_master_runner("127.0.0.1", 0)
    master_env.events.init.fire(environment=master_env, runner=master, web_ui=None)
    runs = [LocalRun(master_env)]
    try:
        for i in range(workers):
            env = environment((worker_argv or [[]] * workers)[i], user_classes, listeners=listeners)
            runner = env.create_worker_runner("127.0.0.1", master.server.port)
            env.events.init.fire(environment=env, runner=runner, web_ui=None)
            runs.append(LocalRun(env))
        until(lambda: len(master.clients.ready) == workers, 30)
        yield runs[0], runs[1:]
    finally:
        runs[0].quit()  # the master first: it tells its workers to quit, and hears their last records
        for run in runs[1:]:
            with contextlib.suppress(AssertionError):
                until(run.ended, 5)
            run.quit()
