"""Run a command in its own session and take its whole process group down with us.

    python _guard.py CMD ARGS...

The command (vLLM's API server, which spawns engine-core and worker processes) runs in a new session; the
guard kills that process group when
  - the guard gets SIGTERM/SIGINT (the test process stopping the server by the guard's PID),
  - its stdin reaches EOF (the test process died: the kernel closes its pipe ends), or
  - its parent PID changes (polling backup).
Shutdown: SIGTERM to the group; SIGKILL to whatever is left 2 s after the leader exits (multiprocessing's
resource tracker ignores SIGTERM), or after 15 s. When the command ends by itself the guard exits with its code.
"""

import os
import signal
import subprocess
import sys
import threading
import time


def main() -> None:
    parent = os.getppid()
    child = subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL)
    stop = threading.Event()

    def killpg(sig: int) -> bool:
        try:
            os.killpg(child.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def stdin_eof() -> None:
        try:
            while sys.stdin.buffer.read(1024):
                pass
        except Exception:
            pass
        stop.set()

    def poll_parent() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        stop.set()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=stdin_eof, daemon=True).start()
    threading.Thread(target=poll_parent, daemon=True).start()

    # Only this (main) thread waits on the child: Popen.poll() from elsewhere would race its wait lock.
    while not stop.wait(0.2):
        if child.poll() is not None:
            killpg(signal.SIGKILL)  # leftovers of a group whose leader exited
            code = child.returncode
            os._exit(code if code >= 0 else 128 - code)

    killpg(signal.SIGTERM)
    deadline = time.monotonic() + 15.0
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if child.returncode is not None:
        deadline = time.monotonic() + 2.0
        while killpg(0) and time.monotonic() < deadline:
            time.sleep(0.1)
    killpg(signal.SIGKILL)
    if child.poll() is None:
        child.wait(10)
    os._exit(0)


if __name__ == "__main__":
    main()
