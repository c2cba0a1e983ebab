"""llm-bench's options on Locust's parser (and in the web UI's start form), from bench_tasks.options.

Locust forwards the parsed options to workers when a run starts (docs/locust.md#options-reach-workers), so
every process reads the same text. The web UI's start form writes text into them that no parser has read: ``of(environment)``
reads this run's options through their parsers, and a text a parser refuses fails the run when it
starts (failure.py), saying which option and why.
"""

from __future__ import annotations

from locust import events

from bench_tasks import options
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
        _run = options.values(environment.parsed_options)
    return _run


@events.test_start.add_listener
def _read_at_start(environment, **_kwargs) -> None:
    try:
        of(environment)
    except ValueError as exc:
        failure.fail(environment, exc, "reading the run's options")


@events.test_stop.add_listener
def _forget(environment, **_kwargs) -> None:
    """The next run (the web UI's start again) may have other options."""
    global _run
    _run = None
