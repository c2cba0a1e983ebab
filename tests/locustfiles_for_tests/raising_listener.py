"""The quick suite with a listener of Locust's request event that raises at the fourth request (a
listener a user adds; Locust itself would log the exception and go on)."""

from itertools import count

from locust import events

from locustfiles.quick_suite import ChatQuestionUser, QuickSuite  # noqa: F401 - what Locust runs

_requests = count(1)


@events.request.add_listener
def count_requests(**_kwargs) -> None:
    if next(_requests) == 4:
        raise RuntimeError("injected in a listener")
