"""A failure ends the run: loudly, within seconds, with what was recorded kept.

``Failure.fail(error, during)`` (the run's ``environment.llm.failure``) is the one way: the run's first
failure writes ``failure.json`` and ``failure.txt`` into --out (bench_tasks/run_failure.py), logs one
ERROR line naming the cause and the traceback's file, sets Locust's exit code to ``EXIT_CODE`` and stops
the run (from a greenlet of its own; stopping writes requests.csv as a finished run does). Later
failures of the same run are left to Locust's log. On a worker, the failure goes to the master,
which ends the whole run with it.

What calls it: Locust's ``user_error`` event (an exception in a user's on_start or task), the
shape's guarded methods (shapes/phased.py), the master's message handlers (messaging.py), and a
catch-all for what Locust catches and only logs: exceptions in event listeners (ours or a user's),
in message handlers, in on_stop and in its greenlets (``Swallowed``, a logging handler on those
lines), and in any greenlet of ours or of a user's locustfile (the gevent hub's error handler).
The catch-all is the process's (one root logger, one hub): ``watch_process()`` installs it once per
process, and it fails every run of the process still going (one, as Locust runs; a test that runs a
master and a worker in one process fails both).
"""

from __future__ import annotations

import functools
import logging
import sys
import traceback
import weakref
from pathlib import Path

import gevent
from locust.exception import StopTest, StopUser
from locust.runners import MasterRunner, WorkerRunner

from bench_tasks import run_failure
from bench_tasks.run_failure import EXIT_CODE

REPORT = "llm_failure"  # worker -> master: a failure, described
HURRY = "llm_hurry"  # master -> workers: the run failed, stop without the usual grace
STOP_TIMEOUT_S = 5.0  # a failed run lets requests in flight finish for this long, not --stop-timeout
NOT_FAILURES = (gevent.GreenletExit, SystemExit, KeyboardInterrupt, StopUser, StopTest)


class Failure:
    """One run's failure: the first wins; a new run (``forget``) counts anew."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self.described: dict | None = None

    @property
    def failed(self) -> bool:
        return self.described is not None

    def fail(self, error: BaseException, during: str, tb=None) -> None:
        """End the run because ``error`` was raised ``during`` something (e.g. "on_start of ChatUser")."""
        if self.described is not None or isinstance(error, NOT_FAILURES):
            return
        self.described = run_failure.describe(error, during, tb)
        environment = self.environment
        environment.process_exit_code = EXIT_CODE
        if isinstance(environment.runner, WorkerRunner):
            logging.error("llm-bench: %s", run_failure.line(self.described, "the master's --out"))
            logging.error("%s", self.described["text"])
            environment.runner.send_message(REPORT, self.described)
            return
        self._end()

    def forget(self) -> None:
        """A new run begins (the web UI's start again): its first failure counts anew."""
        self.described = None

    def register(self, runner) -> None:
        if isinstance(runner, MasterRunner):
            runner.register_message(REPORT, self._on_report)
        elif isinstance(runner, WorkerRunner):
            runner.register_message(HURRY, self._on_hurry)

    def on_user_error(self, user_instance, exception, tb, **_kwargs) -> None:
        """Locust's ``user_error``: an exception in a user's on_start or in one of its tasks."""
        user = getattr(user_instance, "user", user_instance)  # a TaskSet's user, or the user (on_start)
        if user_instance is user:
            during = f"on_start of {type(user).__name__}"
        else:
            during = f"task {_task_name(tb)} of {type(user).__name__}"
        self.fail(exception, during, tb)

    def _end(self) -> None:
        out = Path(self.environment.parsed_options.out)
        try:
            traceback_at = run_failure.write(out, self.described)
        except OSError as exc:
            traceback_at = f"Locust's log (could not write {out / run_failure.FAILURE_TXT}: {exc.strerror})"
            logging.error("%s", self.described["text"])
        logging.error("llm-bench: %s", run_failure.line(self.described, traceback_at))
        gevent.spawn(_stop, self.environment)

    def _on_report(self, environment, msg, **_kwargs) -> None:
        """Master: a worker's failure ends the run here, named after the worker."""
        if self.described is not None:
            return
        self.described = {**msg.data, "during": f"{msg.data.get('during', '?')} on worker {msg.node_id}"}
        environment.process_exit_code = EXIT_CODE
        self._end()

    def _on_hurry(self, environment, msg, **_kwargs) -> None:
        environment.stop_timeout = min(environment.stop_timeout or 0, STOP_TIMEOUT_S)


def _stop(environment) -> None:
    runner = environment.runner
    environment.stop_timeout = min(environment.stop_timeout or 0, STOP_TIMEOUT_S)
    if isinstance(runner, MasterRunner):
        runner.send_message(HURRY)
        runner.stop()  # the workers stop and send their last records before the master quits
    if environment.parsed_options.headless:
        runner.quit()
    else:
        runner.stop()  # the web UI stays up, its run stopped; failure.json says why


def guarded(name: str):
    """A method of a shape, failing the run on an exception rather than killing Locust's shape greenlet
    (which would leave the users waiting for a phase that never comes)."""
    def wrap(method):
        @functools.wraps(method)
        def call(shape, *args, **kwargs):
            try:
                return method(shape, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every exception here ends the run, loudly
                during = f"{name} of {type(shape).__name__}"
                if shape.runner is not None:
                    shape.runner.environment.llm.failure.fail(exc, during)
                else:
                    watch_process().fail(exc, during)
                return None
        call.guarded = True
        return call
    return wrap


def handled(message: str, handler):
    """A master's message handler, failing the run on an exception (Locust would log it and go on)."""
    @functools.wraps(handler)
    def call(environment, msg, **kwargs):
        try:
            return handler(environment, msg, **kwargs)
        except Exception as exc:  # noqa: BLE001
            environment.llm.failure.fail(exc, f"the master's handler of {message} from worker {msg.node_id}")
    return call


def _task_name(tb) -> str:
    """The task a traceback went through: the frame Locust's execute_task called."""
    frames = [frame for frame, _line in traceback.walk_tb(tb)]
    for caller, called in zip(frames, frames[1:]):
        if caller.f_code.co_name == "execute_task":
            return called.f_code.co_name
    return "?"


class ProcessWatch:
    """The process's catch-all: the runs it fails (each run's Failure, while the run's Locust is up)."""

    def __init__(self) -> None:
        self.failures: weakref.WeakSet[Failure] = weakref.WeakSet()

    def fail(self, error: BaseException, during: str, tb=None) -> None:
        for failure in list(self.failures):
            failure.fail(error, during, tb)

    def event_name(self, hook) -> str:
        """The name of the Locust event ``hook`` is, as a run's ``environment.events`` calls it."""
        for failure in list(self.failures):
            for name, value in vars(failure.environment.events).items():
                if value is hook:
                    return name
        return "a"


class Swallowed(logging.Handler):
    """Locust catches an exception in an event listener, a message handler, on_stop or one of its own
    greenlets, logs it at ERROR and goes on, leaving a run that may never end: each ends the run here."""

    PREFIXES = ("Uncaught exception in event handler", "Uncaught exception in handler for ",
                "Uncaught exception in on_stop", "Unhandled exception in greenlet")

    def __init__(self, watch: ProcessWatch) -> None:
        super().__init__()
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg if isinstance(record.msg, str) else ""
        if record.levelno < logging.ERROR or not message.startswith(self.PREFIXES):
            return
        exc_info = record.exc_info or sys.exc_info()  # Locust logs inside its except block
        error, tb = exc_info[1], exc_info[2]
        if error is not None:
            self.watch.fail(error, self._during(message, record, tb), tb)

    def _during(self, message: str, record: logging.LogRecord, tb) -> str:
        if message.startswith("Uncaught exception in event handler") and tb is not None:
            frame = tb.tb_frame  # EventHook.fire, where Locust caught it
            handler, hook = frame.f_locals.get("handler"), frame.f_locals.get("self")
            return f"listener {_name(handler)} of Locust's {self.watch.event_name(hook)} event"
        if message.startswith("Uncaught exception in handler for "):
            return f"the handler of the {message.split()[5]} message"
        if message.startswith("Unhandled exception in greenlet") and record.args:
            return f"greenlet {_name(getattr(record.args[0], '_run', None))}"
        return message.split(":")[0].removeprefix("Uncaught exception in ").strip()


def _name(function) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _watch_greenlets(watch: ProcessWatch) -> None:
    """Any greenlet that dies of an exception raised in our code or a user's locustfile fails the run
    (gevent would print it and go on). A library's own greenlets are left to the library."""
    hub = gevent.get_hub()
    print_error = hub.handle_error

    def handle_error(context, type_, value, tb):
        print_error(context, type_, value, tb)
        if isinstance(context, gevent.Greenlet) and value is not None and run_failure.passes_through_ours(tb):
            watch.fail(value, f"greenlet {_name(getattr(context, '_run', None))}", tb)

    hub.handle_error = handle_error


@functools.cache
def watch_process() -> ProcessWatch:
    """The process's catch-all, installed at the first call (the run's set-up makes it): once per process."""
    watch = ProcessWatch()
    logging.getLogger().addHandler(Swallowed(watch))
    _watch_greenlets(watch)
    return watch
