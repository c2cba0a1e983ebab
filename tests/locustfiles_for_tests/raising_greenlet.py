"""The quick suite beside a greenlet of the user's own that dies of an exception three seconds into the run
(gevent would print it and go on)."""

import gevent
from locust import events

from locustfiles.quick_suite import ChatQuestionUser, QuickSuite  # noqa: F401 - what Locust runs


def explode_later() -> None:
    gevent.sleep(3.0)
    raise ValueError("injected in a greenlet")


@events.test_start.add_listener
def spawn_it(**_kwargs) -> None:
    gevent.spawn(explode_later)
