"""The quick suite whose records sink fails at its fifth record, as a full disk would."""

import errno
import os

from locustfiles import sink
from locustfiles.quick_suite import ChatQuestionUser, QuickSuite  # noqa: F401 - what Locust runs

_add = sink.RecordsSink.add


def add_until_the_disk_is_full(self, row: dict) -> None:
    if self.count >= 4:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    _add(self, row)


sink.RecordsSink.add = add_until_the_disk_is_full
