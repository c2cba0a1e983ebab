"""Starting the sim in its own process, so it never shares a GIL or a core with the client."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

from simengine.config import SimConfig
from simengine.server import READY_PREFIX

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


class SimProcess:
    """A running sim: `.url`, `.port`, `.stop()`."""

    def __init__(self, popen: subprocess.Popen, url: str) -> None:
        self.popen = popen
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if self.popen.stdout:
            self.popen.stdout.close()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


def start_process(config: SimConfig) -> SimProcess:
    """Start `python -m simengine` with this config; returns once it listens."""
    argv = [sys.executable, "-m", "simengine", *config.to_argv(), "--parent-pid", str(os.getpid())]
    popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    line = _read_ready_line(popen)
    if not line.startswith(READY_PREFIX):
        popen.kill()
        popen.wait()
        raise RuntimeError(f"simulated engine did not start (exit code {popen.returncode}); said {line!r}")
    return SimProcess(popen, line[len(READY_PREFIX):].strip())


def _read_ready_line(popen: subprocess.Popen) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([popen.stdout], [], [], 0.1)
        if ready:
            return popen.stdout.readline()
        if popen.poll() is not None:
            return ""
    return ""
