"""The machine lock the tests share (tests/machine.py): a test that needs the machine alone waits only for
the tests already running, and no test starts while it waits or runs. Locks of one process's separate
opens conflict as two processes' do (flock), so threads stand in for pytest-xdist's workers."""

import threading
import time

from tests.machine import Machine

SETTLE_S = 0.3  # long enough for a thread that could take the lock to have taken it


def take_in_thread(machine: Machine, alone: bool, taken: list[str], name: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: (machine.take(alone=alone), taken.append(name)), daemon=True)
    thread.start()
    time.sleep(SETTLE_S)
    return thread


def test_an_alone_test_waits_for_the_running_ones_only_and_the_machine_is_its_own_until_it_lets_go(tmp_path):
    (first, beside, alone, later), taken = (Machine(tmp_path) for _ in range(4)), []
    first.take(alone=False)
    take_in_thread(beside, False, taken, "beside").join(1)
    assert taken == ["beside"]  # shared tests run side by side
    waiting_alone = take_in_thread(alone, True, taken, "alone")
    waiting_later = take_in_thread(later, False, taken, "later")
    assert taken == ["beside"]  # it waits for those running; one that came after it does not go ahead
    first.release()
    time.sleep(SETTLE_S)
    assert taken == ["beside"]  # one shared test still runs
    beside.release()
    waiting_alone.join(2)
    time.sleep(SETTLE_S)
    assert taken == ["beside", "alone"]  # the machine is its own: the later shared test still waits
    alone.take(alone=True)  # the next alone test of the same worker keeps it
    time.sleep(SETTLE_S)
    assert taken == ["beside", "alone"]
    alone.release()
    waiting_later.join(2)
    assert taken == ["beside", "alone", "later"]
    later.release()
