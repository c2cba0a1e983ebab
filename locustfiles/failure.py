"""A failure ends the run: loudly, within seconds, with what was recorded kept.

``fail(environment, error, during)`` is the one way: the run's first failure writes
``failure.json`` and ``failure.txt`` into --out (bench_tasks/run_failure.py), logs one ERROR
line naming the cause and the traceback's file, sets Locust's exit code to ``EXIT_CODE`` and stops
the run (from a greenlet of its own; stopping writes requests.csv as a finished run does). Later
failures of the same run are left to Locust's log. On a worker, the failure goes to the master,
which ends the whole run with it.

What calls it: Locust's ``user_error`` event (an exception in a user's on_start or task), the
shape's guarded methods (phased_shape.py), the master's message handlers (messaging.py), and a
catch-all for what Locust catches and only logs: exceptions in event listeners (ours or a user's),
in message handlers, in on_stop and in its greenlets (``Swallowed``, a logging handler on those
lines), and in any greenlet of ours or of a user's locustfile (the gevent hub's error handler).
"""

from __future__ import annotations

import functools
import logging
import sys
import traceback
from pathlib import Path

import gevent
from locust import events
from locust.exception import StopTest, StopUser
from locust.runners import MasterRunner, WorkerRunner

from bench_tasks import run_failure
from bench_tasks.run_failure import EXIT_CODE

REPORT = "llm_failure"  # worker -> master: a failure, described
HURRY = "llm_hurry"  # master -> workers: the run failed, stop without the usual grace
STOP_TIMEOUT_S = 5.0  # a failed run lets requests in flight finish for this long, not --stop-timeout
NOT_FAILURES = (gevent.GreenletExit, SystemExit, KeyboardInterrupt, StopUser, StopTest)

_environment = None
_failure: dict | None = None


def fail(environment, error: BaseException, during: str, tb=None) -> None:
    """End the run because ``error`` was raised ``during`` something (e.g. "on_start of ChatUser")."""
    global _failure
    environment = environment or _environment
    if _failure is not None or environment is None or isinstance(error, NOT_FAILURES):
        return
    _failure = run_failure.describe(error, during, tb)
    environment.process_exit_code = EXIT_CODE
    if isinstance(environment.runner, WorkerRunner):
        logging.error("llm-bench: %s", run_failure.line(_failure, "the master's --out"))
        logging.error("%s", _failure["text"])
        environment.runner.send_message(REPORT, _failure)
        return
    _end(environment, _failure)


def failed() -> bool:
    return _failure is not None


def forget() -> None:
    """A new run begins (the web UI's start again): its first failure counts anew."""
    global _failure
    _failure = None


def guarded(name: str):
    """A method of a shape, failing the run on an exception rather than killing Locust's shape greenlet
    (which would leave the users waiting for a phase that never comes)."""
    def wrap(method):
        @functools.wraps(method)
        def call(shape, *args, **kwargs):
            try:
                return method(shape, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every exception here ends the run, loudly
                fail(shape.runner.environment if shape.runner else None, exc, f"{name} of {type(shape).__name__}")
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
            fail(environment, exc, f"the master's handler of {message} from worker {msg.node_id}")
    return call


def _end(environment, failure: dict) -> None:
    out = Path(environment.parsed_options.out)
    try:
        traceback_at = run_failure.write(out, failure)
    except OSError as exc:
        traceback_at = f"Locust's log (could not write {out / run_failure.FAILURE_TXT}: {exc.strerror})"
        logging.error("%s", failure["text"])
    logging.error("llm-bench: %s", run_failure.line(failure, traceback_at))
    gevent.spawn(_stop, environment)


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


def _on_report(environment, msg, **_kwargs) -> None:
    """Master: a worker's failure ends the run here, named after the worker."""
    global _failure
    if _failure is not None:
        return
    _failure = {**msg.data, "during": f"{msg.data.get('during', '?')} on worker {msg.node_id}"}
    environment.process_exit_code = EXIT_CODE
    _end(environment, _failure)


def _on_hurry(environment, msg, **_kwargs) -> None:
    environment.stop_timeout = min(environment.stop_timeout or 0, STOP_TIMEOUT_S)


@events.user_error.add_listener
def _user_error(user_instance, exception, tb, **_kwargs) -> None:
    user = getattr(user_instance, "user", user_instance)  # a TaskSet's user, or the user (on_start)
    if user_instance is user:
        during = f"on_start of {type(user).__name__}"
    else:
        during = f"task {_task_name(tb)} of {type(user).__name__}"
    fail(user.environment, exception, during, tb)


def _task_name(tb) -> str:
    """The task a traceback went through: the frame Locust's execute_task called."""
    frames = [frame for frame, _line in traceback.walk_tb(tb)]
    for caller, called in zip(frames, frames[1:]):
        if caller.f_code.co_name == "execute_task":
            return called.f_code.co_name
    return "?"


class Swallowed(logging.Handler):
    """Locust catches an exception in an event listener, a message handler, on_stop or one of its own
    greenlets, logs it at ERROR and goes on, leaving a run that may never end: each ends the run here."""

    PREFIXES = ("Uncaught exception in event handler", "Uncaught exception in handler for ",
                "Uncaught exception in on_stop", "Unhandled exception in greenlet")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg if isinstance(record.msg, str) else ""
        if record.levelno < logging.ERROR or not message.startswith(self.PREFIXES):
            return
        exc_info = record.exc_info or sys.exc_info()  # Locust logs inside its except block
        error, tb = exc_info[1], exc_info[2]
        if error is not None:
            fail(None, error, _swallowed_during(message, record, tb), tb)


def _swallowed_during(message: str, record: logging.LogRecord, tb) -> str:
    if message.startswith("Uncaught exception in event handler") and tb is not None:
        frame = tb.tb_frame  # EventHook.fire, where Locust caught it
        handler, hook = frame.f_locals.get("handler"), frame.f_locals.get("self")
        return f"listener {_name(handler)} of Locust's {_event_name(hook)} event"
    if message.startswith("Uncaught exception in handler for "):
        return f"the handler of the {message.split()[5]} message"
    if message.startswith("Unhandled exception in greenlet") and record.args:
        return f"greenlet {_name(getattr(record.args[0], '_run', None))}"
    return message.split(":")[0].removeprefix("Uncaught exception in ").strip()


def _event_name(hook) -> str:
    events_ = getattr(_environment, "events", None)
    return next((name for name, value in vars(events_ or object()).items() if value is hook), "a")


def _name(function) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _watch_greenlets() -> None:
    """Any greenlet that dies of an exception raised in our code or a user's locustfile fails the run
    (gevent would print it and go on). A library's own greenlets are left to the library."""
    hub = gevent.get_hub()
    print_error = hub.handle_error

    def handle_error(context, type_, value, tb):
        print_error(context, type_, value, tb)
        if isinstance(context, gevent.Greenlet) and value is not None and run_failure.passes_through_ours(tb):
            fail(None, value, f"greenlet {_name(getattr(context, '_run', None))}", tb)

    hub.handle_error = handle_error


@events.init.add_listener
def _watch(environment, runner=None, **_kwargs) -> None:
    global _environment
    first = _environment is None
    _environment = environment
    if first:
        logging.getLogger().addHandler(Swallowed())
        _watch_greenlets()
    if isinstance(runner, MasterRunner):
        runner.register_message(REPORT, _on_report)
    elif isinstance(runner, WorkerRunner):
        runner.register_message(HURRY, _on_hurry)


@events.test_start.add_listener
def _worker_run_starts(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner):
        forget()
