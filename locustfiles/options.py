"""llm-bench's options on Locust's parser (and in the web UI's start form), from bench_tasks.options.

Locust forwards the parsed options to workers when a run starts (docs/locust.md#options-reach-workers), so
every process reads the same text. The web UI's start form writes text into them that no parser has read: ``of(environment)``
reads this run's options through their parsers, and a text a parser refuses fails the run when it
starts (failure.py), saying which option and why.

One mark opens every prompt of a run (bench_tasks.run_mark): the one given (--run-mark, which llm-bench
hands over, or --repeat-mark), else one drawn when the run's options are first read where the run starts
(the local runner, or the master before its spawn messages, which carry it to every worker).
"""

from __future__ import annotations

from locust import events

from bench_tasks import options, run_mark
from locustfiles import failure

_run: options.Values | None = None  # this run's options, read once


@events.init_command_line_parser.add_listener
def _add_options(parser) -> None:
    for flag, arguments in options.locust_arguments():
        parser.add_argument(flag, **arguments)  # Locust's own add_argument knows include_in_web_ui


def of(environment) -> options.Values:
    """This run's options, typed (ValueError naming the option whose text its parser refuses)."""
    global _run
    if _run is None:
        _mark(environment.parsed_options)
        _run = options.values(environment.parsed_options)
    return _run


def _mark(parsed) -> None:
    if not getattr(parsed, "run_mark", None) and not getattr(parsed, "repeat_mark", None):
        parsed.run_mark, parsed.run_mark_drawn = run_mark.draw(), True


@events.test_start.add_listener
def _read_at_start(environment, **_kwargs) -> None:
    try:
        of(environment)
    except ValueError as exc:
        failure.fail(environment, exc, "reading the run's options")


@events.test_stop.add_listener
def _forget(environment, **_kwargs) -> None:
    """The next run (the web UI's start again) may have other options, and has a mark of its own."""
    global _run
    _run = None
    parsed = environment.parsed_options
    if getattr(parsed, "run_mark_drawn", False):
        parsed.run_mark, parsed.run_mark_drawn = None, False
