"""llama.cpp's own C++ HTTP server (from the pinned `xllamacpp` wheel) in a child process on 127.0.0.1.

    server = start_llamacpp(model_path)            # tiny GGUF: 4 slots, unified KV, ctx 32768, metrics, 2 threads
    server.url    -> "http://127.0.0.1:PORT"       (no /v1)
    server.model  -> served model name (alias; default: the file stem)
    server.stop()                                  # SIGTERM to the PID, SIGKILL after a grace period

The child dies with the parent (stdin-EOF watch + parent-PID polling, see _llamacpp_child.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CHILD = Path(__file__).with_name("_llamacpp_child.py")


class EngineStartError(RuntimeError):
    pass


class ServerProcess:
    """What every engine handle offers; subclasses are dataclasses with url, proc and log_path."""

    stop_grace_s = 10.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        """OpenAI base URL (url + /v1)."""
        return self.url + "/v1"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc, self.stop_grace_s)


@dataclass
class LlamaServer(ServerProcess):
    url: str
    model: str
    proc: subprocess.Popen = field(repr=False)
    log_path: Path
    n_ctx: int
    n_parallel: int
    model_path: Path
    startup_s: float = 0.0

    stop_grace_s = 10.0


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop one child by its PID: SIGTERM, then SIGKILL after GRACE_S."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass
    for stream in (proc.stdin, proc.stdout):
        if stream:
            try:
                stream.close()
            except OSError:
                pass


def wait_health(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    """Poll URL/health until HTTP 200 (llama.cpp answers 503 while loading)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EngineStartError(f"server exited with code {proc.returncode} before /health was OK")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise EngineStartError(f"{url}/health not OK after {timeout_s:.0f} s (last: {last!r})")


def start_llamacpp(model_path: Path | str, *, alias: str | None = None, n_ctx: int = 32768, n_parallel: int = 4,
                   threads: int = 2, kv_unified: bool = True, metrics: bool = True, port: int = 0,
                   extra_params: dict | None = None, log_path: Path | None = None,
                   timeout_s: float = 120.0) -> LlamaServer:
    """Start llama.cpp's server on 127.0.0.1 (port 0 = a free port chosen by the server itself).

    EXTRA_PARAMS: more xllamacpp.CommonParams fields by dotted name, e.g. {"sampling.seed": 1, "n_batch": 512}.
    """
    model_path = Path(model_path)
    alias = alias or model_path.name.split(".")[0]
    params = {
        "model.path": str(model_path),
        "model_alias": [alias],
        "hostnames": ["127.0.0.1"],
        "port": port,
        "n_ctx": n_ctx,
        "n_parallel": n_parallel,
        "kv_unified": kv_unified,
        "endpoint_metrics": metrics,
        "endpoint_slots": True,
        "endpoint_props": True,
        "cpuparams.n_threads": threads,
        "cpuparams_batch.n_threads": threads,
        **(extra_params or {}),
    }
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="llamacpp-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    log_path = Path(log_path)
    config = {"parent_pid": os.getpid(), "params": params}
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, str(CHILD), json.dumps(config)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, close_fds=True)
    url = None
    buf = b""
    try:
        deadline = time.monotonic() + timeout_s
        while url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EngineStartError(f"llama.cpp did not listen within {timeout_s:.0f} s")
            ready, _, _ = select.select([proc.stdout], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    proc.wait(10)
                    raise EngineStartError(f"llama.cpp child exited (code {proc.returncode})")
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    if line.startswith("LISTENING "):
                        url = line.split(" ", 1)[1].strip().rstrip("/")
            elif proc.poll() is not None:
                raise EngineStartError(f"llama.cpp child exited (code {proc.returncode})")
        wait_health(url, max(5.0, deadline - time.monotonic()), proc)
    except BaseException as exc:
        stop_process(proc, 5)
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        if isinstance(exc, EngineStartError):
            raise EngineStartError(f"{exc}\n--- {log_path} (tail) ---\n{tail}") from None
        raise
    return LlamaServer(url=url, model=alias, proc=proc, log_path=log_path, n_ctx=n_ctx, n_parallel=n_parallel,
                       model_path=model_path, startup_s=time.monotonic() - t0)
