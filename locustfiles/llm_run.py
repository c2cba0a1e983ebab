"""A run's state in one object: ``environment.llm``, made by one call from each runnable locustfile.

Every runnable locustfile (``locustfiles.RUNNABLE``) ends with ``llm_run.install(...)``. That call adds
llm-bench's options to Locust's parser and, when Locust has made its environment and runner (its
``init`` event), makes the ``LLMRun``: it registers the run's listeners on Locust's events and its
messages on the runner, once. Importing any other module of this package changes nothing: a module
that the runnable files share (users/, shapes/, the glue) defines classes and functions only.

What a run holds, each in one place:

- ``options``: this run's options, typed (bench_tasks.options), read when first asked for in a run;
- ``target()``: the server measured (target.py), resolved once per run;
- ``sink``: the records (sink.py); ``guard``: the saturation guard (guard.py); ``watchers``: the
  process's socket watchers (transport.py);
- ``link()``: the users' way to the coordinator (messaging.py: local, or by messages from a worker),
  ``desk``: the master's side of it (the ledger of who holds what), ``clock``: a worker's offset to the
  master's clock;
- ``activity``: when the run last moved (activity.py); ``failure``: its failure (failure.py);
- ``tab``: the web UI's LLM tab (llm_tab.py); ``series``: the engine's gauges (engine_series.py);
- ``state(kind)``: a workload's own state for this run (e.g. paste.py's chats in flight).

A new run (the web UI's start again) begins in ``begin``: everything of the last run is forgotten
there, and only there. Listeners a locustfile adds (``RunListener``: e.g. chat.py reads the engine's
counters around each run) are called when each run starts and stops and with each record where the
records come together; a shape that is a RunListener is called too.

Options: Locust hands the parsed options to workers when a run starts (docs/locust.md#options-reach-workers),
so every process reads the same text. The web UI's start form writes text into them that no parser has
read: ``options`` reads them through their parsers, and a text a parser refuses fails the run when it
starts (failure.py), saying which option and why.

One mark opens every prompt of a run (bench_tasks.run_mark): the one given (--run-mark, which llm-bench
hands over, or --repeat-mark), else one drawn when the run's options are first read where the run starts
(the local runner, or the master before its spawn messages, which carry it to every worker); a mark drawn
so is forgotten when the run stops, so that the web UI's next run has one of its own.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import gevent
import gevent.lock
import locust
from locust import argument_parser
from locust.runners import MasterRunner, WorkerRunner

from bench_tasks import options as option_table
from bench_tasks import run_mark
from bench_tasks.steal import Steal
from bench_tasks.suite import Coordinator
from locustfiles import failure, guard, messaging, target, transport
from locustfiles.activity import REPORT_KEY as QUIET_KEY
from locustfiles.activity import Activity
from locustfiles.engine_series import EngineSeries
from locustfiles.llm_tab import LLMTab
from locustfiles.sink import REPORT_KEY as RECORDS_KEY
from locustfiles.sink import RecordsSink

State = TypeVar("State")
INSTALLED = "llm_bench_installed"  # an attribute of the Events an install registered on


class RunListener:
    """What a locustfile adds to every run (``install(listener)``): override what it needs."""

    def run_starts(self, run: LLMRun) -> None:
        """A run started (Locust's test_start), after the run's own parts."""

    def run_stops(self, run: LLMRun) -> None:
        """A run stopped (Locust's test_stop), before its records are written out."""

    def recorded(self, row: dict) -> None:
        """A finished record, where the run's records come together (the local runner or the master)."""


def install(*listeners: RunListener, events: locust.event.Events | None = None) -> None:
    """The one call of a runnable locustfile: llm-bench's options on Locust's parser, and an LLMRun on
    the environment when Locust's ``init`` fires, with ``listeners`` added to every run. ``events``:
    Locust's own (what ``locust -f`` uses), or a test's."""
    events = locust.events if events is None else events
    if getattr(events, INSTALLED, False):
        raise RuntimeError("llm_run.install() was called twice on the same events: a runnable locustfile imports "
                           "another (import user classes from locustfiles.users and shapes from locustfiles.shapes)")
    setattr(events, INSTALLED, True)
    events.init_command_line_parser.add_listener(add_options)
    events.init.add_listener(lambda environment, runner=None, web_ui=None, **_kwargs:
                             LLMRun(environment, runner, web_ui, listeners))


def add_options(parser, **_kwargs) -> None:
    """llm-bench's options on Locust's parser (and in the web UI's start form), from bench_tasks.options."""
    for flag, arguments in option_table.locust_arguments():
        parser.add_argument(flag, **arguments)  # Locust's own add_argument knows include_in_web_ui


def parse_locust_defaults_once() -> None:
    """A worker, at each spawn message (every phase change), keeps the master's options that are not Locust's
    own by calling ``argument_parser.default_args_dict()`` once for each option it got (locust/runners.py,
    2.47), and each call builds and runs Locust's whole parser again: with llm-bench's options 105 parses of
    about 5 ms, the worker's event loop held up to 0.73 s at a phase change on the test machine, and past the
    master's heartbeat limit (4 s) when that machine was loaded: the master dropped its workers as lost. Those
    defaults never change within a process, so they are parsed once (docs/locust.md#spawn-cost)."""
    if not hasattr(argument_parser.default_args_dict, "cache_info"):
        argument_parser.default_args_dict = functools.cache(argument_parser.default_args_dict)


class LLMRun:
    """One Locust environment's run state (``environment.llm``), made at Locust's ``init`` by ``install``."""

    def __init__(self, environment, runner, web_ui=None, listeners: tuple[RunListener, ...] = ()) -> None:
        self.environment = environment
        environment.llm = self
        self.runner = runner
        self.is_master, self.is_worker = isinstance(runner, MasterRunner), isinstance(runner, WorkerRunner)
        self.listeners = list(listeners)
        self.running = False  # between begin and the run's stop
        self.failure = failure.Failure(environment)
        self.activity = Activity()
        self.sink = RecordsSink(environment, self.activity)
        self.sink.listeners.append(self._recorded)
        self.steal = Steal()  # the machine's steal counters, kept open for the process (a fresh open costs 20x a read)
        self.guard = guard.Guard(self.steal)
        self.clock = messaging.Clock()
        self.tab = LLMTab(web_ui, self.sink) if web_ui else None
        self.series = EngineSeries()
        self.coordinator: Coordinator | None = None
        self.desk = messaging.Desk(runner, self.activity) if self.is_master else None
        self._link: messaging.LocalWork | messaging.RemoteWork | None = None
        self._options: option_table.Values | None = None
        self._target: target.Target | None = None
        self._target_lock = gevent.lock.Semaphore()
        self._states: dict[type, object] = {}
        self._numbers: dict[str, itertools.count] = {}
        environment.host = target.default_host(environment.host)
        # The process's own watchers, once per process (one event loop, one root logger).
        self.watchers = transport.watchers()
        failure.watch_process().failures.add(self.failure)
        self._listen(environment.events)

    def _listen(self, events) -> None:
        events.test_start.add_listener(self._run_starts)
        events.test_stop.add_listener(self._run_stops)
        events.quitting.add_listener(self._quitting)
        events.user_error.add_listener(self.failure.on_user_error)
        self.failure.register(self.runner)
        if self.is_worker:
            parse_locust_defaults_once()
            self._link = messaging.RemoteWork(self.runner)
            self.runner.register_message("llm_job", self._link.on_job)
            self.runner.register_message("llm_pong", self.clock.on_pong)
            events.report_to_master.add_listener(self._report)
            # Who this worker is, said as it connects: the master names it if it is lost, even before its first record.
            self.runner.send_message("llm_hello", {"client_host": self.sink.client_host, "client_pid": os.getpid()})
        elif self.is_master:
            events.worker_report.add_listener(self._reported)

    # -- a run's life --
    def begin(self) -> None:
        """A run begins: the last run's state is forgotten, here and only here. Locust's test_start calls it,
        and a shape's reset_time before it (the shape opens this run's files); the first call of a run counts."""
        if self.running:
            return
        self.running = True
        self._options = None
        self._target = None
        self._states.clear()
        self.environment.host = target.default_host(self.environment.host)  # the web UI may change it
        self.failure.forget()
        self.sink.start_new_run()
        self.activity.note()
        self.guard = guard.Guard(self.steal)
        if self.tab is not None:
            self.tab.reset()
        if self.desk is not None:
            self.desk.ledger.new_run()
        if self.is_worker:
            self._link.new_run()

    def _run_starts(self, environment, **_kwargs) -> None:
        self.begin()
        try:
            self.options
        except ValueError as exc:
            self.failure.fail(exc, "reading the run's options")
        if not self.is_master:  # the master sends no requests
            self.guard.start()
        if self.is_worker:
            gevent.spawn(self.clock.ping_all, self.runner)
        else:  # where the records come together
            self.activity.start_alive(Path(environment.parsed_options.out))
            self.series.start(environment, self.target)
        for listener in self._listeners():
            listener.run_starts(self)

    def _run_stops(self, environment, **_kwargs) -> None:
        for listener in self._listeners():
            listener.run_stops(self)
        if self.guard.stop():
            guard.write_summary(self.guard, Path(environment.parsed_options.out), self.sink.client_host)
        self.activity.stop_alive()
        self.series.stop()
        self.sink.end_run()
        self._options = None  # the next run (the web UI's start again) may have other options, and its own mark
        parsed = environment.parsed_options
        if getattr(parsed, "run_mark_drawn", False):
            parsed.run_mark, parsed.run_mark_drawn = None, False
        self.running = False

    def _quitting(self, environment, **_kwargs) -> None:
        self.sink.quit()
        failure.watch_process().failures.discard(self.failure)

    def _listeners(self) -> list[RunListener]:
        shape = self.environment.shape_class
        return [*self.listeners, *([shape] if isinstance(shape, RunListener) else [])]

    def _recorded(self, row: dict) -> None:
        for listener in self._listeners():
            listener.recorded(row)

    def _report(self, client_id, data, **_kwargs) -> None:
        """Worker: this run's records and quiet time ride along with Locust's stats report."""
        data[RECORDS_KEY] = self.sink.take_pending()
        data[QUIET_KEY] = self.activity.quiet_s()

    def _reported(self, client_id, data, **_kwargs) -> None:
        """Master: a worker's report."""
        rows = data.get(RECORDS_KEY, ())
        self.desk.ledger.heard_from(client_id, rows)
        for row in rows:
            self.sink.add(row)
        self.activity.heard(data.get(QUIET_KEY))

    # -- what users and shapes ask of the run --
    @property
    def options(self) -> option_table.Values:
        """This run's options, typed (ValueError naming the option whose text its parser refuses)."""
        if self._options is None:
            parsed = self.environment.parsed_options
            if not getattr(parsed, "run_mark", None) and not getattr(parsed, "repeat_mark", None):
                parsed.run_mark, parsed.run_mark_drawn = run_mark.draw(), True
            self._options = option_table.values(parsed)
        return self._options

    def target(self) -> target.Target:
        """The server this run measures, asked of the server by the first caller of the run."""
        with self._target_lock:
            if self._target is None:
                self._target = target.resolve(self.environment.host, self.options)
        return self._target

    def serve(self, coordinator: Coordinator) -> None:
        """Where the shape runs: this run's coordinator, reachable by the users (directly, or by messages)."""
        self.coordinator = coordinator
        if self.desk is not None:
            self.desk.coordinator = coordinator
        else:
            self._link = messaging.LocalWork(coordinator, self.activity)

    def link(self) -> messaging.LocalWork | messaging.RemoteWork:
        """The users' way to the coordinator."""
        if self._link is None:
            raise LookupError("no coordinator: run a locustfile that defines the suite's shape")
        return self._link

    def clock_offset_s(self) -> float | None:
        """On a worker whose pings came back: the master's clock minus this one (a record's t_send plus it is
        on the master's clock, shared by every worker); None before the first pong, and where the records
        come together (one clock)."""
        return self.clock.offset_s if self.is_worker else None

    def to_local(self, t_master: float) -> float:
        """An instant of the coordinator's clock on this process's."""
        return self.clock.to_local(t_master) if self.is_worker else t_master

    def state(self, kind: Callable[[], State]) -> State:
        """This run's ``kind()``: a workload's own state, made at its first use in a run (a new run starts anew)."""
        if kind not in self._states:
            self._states[kind] = kind()
        return self._states[kind]

    def number(self, name: str) -> int:
        """The next number (1, 2, ...) of ``name`` in this process, across runs: users' ids, students' names."""
        return next(self._numbers.setdefault(name, itertools.count(1)))

    def user_id(self) -> str:
        """An id no other user of the run has, on any worker (the coordinator's name for a user): Locust's id
        of this process (its host name and a random part), and the user's number in it."""
        return f"{self.runner.client_id}-{self.number('user')}"
