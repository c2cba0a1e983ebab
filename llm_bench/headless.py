"""Running Locust headless in a child process, and what a run needs around it.

Locust runs in its own process so that its gevent monkey-patching never touches the CLI, the
simulated engine or the analysis.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import locustfiles
from bench_tasks import engine, run_failure, server, stall
from bench_tasks.records_file import CLI_RUN_FILES, RECORDS_JSONL, REQUESTS_CSV, archive_run, read_jsonl, write_csv
from llm_bench import progress

TERMINATE_GRACE_S = 10.0  # a stopped Locust writes requests.csv in this time, or is killed


class UsageError(Exception):
    """A mistake the user can fix; the message says how."""


class RunFailed(Exception):
    """The run started and failed: ``failure`` (failure.json) says what, where and during what."""

    def __init__(self, failure: dict, traceback_at: Path) -> None:
        self.failure = failure
        super().__init__(run_failure.line(failure, traceback_at))


def prepare_out_dir(out: str) -> Path:
    """Create DIR; an earlier run's files in it move to DIR/earlier-runs/N, so nothing stale is
    presented as new and nothing measured is lost."""
    path = prepare_report_dir(out)
    archive_run(path, CLI_RUN_FILES)
    return path


def prepare_report_dir(out: str) -> Path:
    """Create DIR if needed and check it is writable; records already in it are left alone (a
    comparison may be written beside the runs it reads)."""
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to output directory {path} ({exc.strerror}); choose another --out") from None
    return path


@contextmanager
def target_server(host: str | None, out_dir: Path, sim_options: dict | None = None):
    """Yield the base URL to measure: the given host, or a simulated engine started for this run."""
    if host:
        yield server.base_url(host)
        return
    import simengine  # only needed when no server is given

    config = simengine.SimConfig(port=0, truth_log=str(out_dir / "sim-truth.jsonl"), **(sim_options or {}))
    handle = simengine.start_process(config)
    try:
        yield handle.url
    finally:
        handle.stop()


def check_server(url: str, api_key: str, model: str = "") -> dict:
    """The server's /v1/models, or a one-line error saying what to do."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--host must be a URL like http://127.0.0.1:8000, got {url!r}")
    try:
        models = server.list_models(url, api_key=api_key)
    except server.ServerError as exc:
        raise UsageError(str(exc)) from None
    names = [str(m.get("id")) for m in models["data"]]
    if model and model not in names:
        # Gateways and proxies list only some of what they route: ask anyway; a refusal is recorded.
        print(f"warning: model {model!r} is not listed by {url}/v1/models (it lists: {', '.join(names[:8])}"
              f"{', ...' if len(names) > 8 else ''}); asking for it anyway", file=sys.stderr)
    return models


def check_engine(name: str) -> None:
    """This install's engine profiles are readable, and ``--engine NAME`` is one of them (or auto)."""
    try:
        profiles = engine.load_profiles()
    except engine.ProfileError as exc:
        raise UsageError(str(exc)) from None
    if name != "auto" and name not in profiles:
        raise UsageError(f"--engine {name!r} is not an engine profile; choose auto or one of: "
                         f"{', '.join(sorted(profiles))}")


def locustfile_path(name: str) -> Path:
    try:
        return locustfiles.path(name)
    except LookupError as exc:
        raise UsageError(str(exc)) from None


def run_locust(locustfile: str | Path, url: str, out_dir: Path, users: int, extra: list[str], api_key: str,
               run_time_s: int = 3600, cpu: int | None = None, watch: progress.Plan | None = None,
               stall_s: float | None = None) -> int:
    """Run one headless Locust; return its exit code. Our records go to out_dir. ``locustfile``: a
    runnable locustfile's name (``chat.py``), or a path.

    With ``watch``, a progress line follows the run (read from the files the run writes as it goes);
    with ``stall_s`` too, Locust is stopped when none of those files has moved for that long (a
    backstop: the run's own watchdog should have ended it first). Raises RunFailed when the run
    failed (failure.json), UsageError when Locust exited non-zero for another reason.
    """
    path = locustfile if isinstance(locustfile, Path) else locustfile_path(locustfile)
    command = [
        sys.executable, "-m", "locust", "-f", str(path), "--headless",
        "--host", url, "-u", str(users), "-r", str(max(users, 1)), "-t", f"{run_time_s}s",
        "--out", str(out_dir), "--only-summary", "--loglevel", "INFO", "--stop-timeout", "30",
        "--exit-code-on-error", "0", "--no-llm-report",  # the CLI writes the report itself
        *extra, *own_master_port(extra),
    ]
    env = dict(os.environ)
    env.pop("OPENAI_BASE_URL", None)  # the host is given; Locust must not pick another
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # by environment, never on a command line others can read
    # Locust's own printed stats are rounded and would sit beside ours: they go to a log file.
    with open(out_dir / "locust.log", "w") as log:
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        child = subprocess.Popen(command, env=env, cwd=out_dir, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=pin)
        still_s = None
        try:
            if watch is not None:
                still_s = progress.follow(child, out_dir, watch, sys.stdout, stall_s)
            if still_s is not None:
                _stop(child)
            code = child.wait()
        finally:
            _let_finish(child)
    if still_s is not None:
        _record_backstop(out_dir, still_s)
    failure = run_failure.read(out_dir)
    if failure is not None:
        raise RunFailed(failure, out_dir / run_failure.FAILURE_TXT)
    if code == run_failure.EXIT_CODE:  # Locust failed the run but could not write failure.json
        raise RunFailed({"cause": "the run failed and its failure.json could not be written", "where": "Locust",
                         "during": "the run"}, out_dir / "locust.log")
    if code != 0:
        raise UsageError(f"locust exited with code {code}; see {out_dir / 'locust.log'}")
    return code


def own_master_port(argv: list[str]) -> list[str]:
    """A port of its own for a ``--processes`` run's master and workers. Left to Locust they use 5557, and
    a second such run on the machine cannot bind it: its workers then join the first run's master, which
    measures with them (seen: 4 workers connected to a run of 2, the second run failed)."""
    if "--processes" not in argv:
        return []
    port = str(free_port())
    return ["--master-bind-port", port, "--master-port", port]


def free_port() -> int:
    """A TCP port free on every interface now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM: Locust stops its users and writes requests.csv; a Locust too stuck for that is killed."""
    child.terminate()
    try:
        child.wait(TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(10)


def _record_backstop(out_dir: Path, still_s: float) -> None:
    """The backstop stopped Locust: keep the records as a table and say why (unless Locust said first)."""
    records = out_dir / RECORDS_JSONL
    if records.exists() and not (out_dir / REQUESTS_CSV).exists():
        write_csv(read_jsonl(records)[0], out_dir / REQUESTS_CSV)
    if run_failure.read(out_dir) is not None:
        return
    log = out_dir / "locust.log"
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:] if log.exists() else []
    run_failure.write(out_dir, {
        "cause": f"none of the run's files moved for {still_s:.0f} s (its stall limit + {stall.BACKSTOP_S:g} s) "
                 "and its own watchdog did not end it; Locust was stopped", "where": "llm-bench's progress follower",
        "during": "the run", "t": time.time(), "text": "The last lines of locust.log:\n" + "\n".join(tail) + "\n"})


def _let_finish(child: subprocess.Popen, grace_s: float = 60.0) -> None:
    """After Ctrl-C (which reaches Locust too, from the terminal) Locust writes what it has: let it."""
    try:
        child.wait(grace_s)
    except subprocess.TimeoutExpired:
        child.terminate()
        child.wait(10)


def write_settings(out_dir: Path, url: str, models: dict, argv: list[str], api_key: str, extra: dict) -> None:
    """What was measured, with what, how: enough to reproduce or question a figure. No API key."""
    props = None
    try:
        props = server.get_json(url, "/props", api_key=api_key, timeout_s=3)  # llama.cpp only
    except server.ServerError:
        pass
    settings = {
        "command": " ".join(shlex.quote(a) for a in _redact(argv)),
        "host": url,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "models": models,
        "props": _without_key(props, api_key),
        "client": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "hostname": platform.node(),
            "versions": {name: _version(name) for name in ("llm-bench", "locust", "gevent", "pandas", "orjson")},
        },
        **extra,
    }
    (out_dir / "settings.json").write_text(json.dumps(settings, indent=2, default=str))


def _redact(argv: list[str]) -> list[str]:
    redacted, hide_next = [], False
    for arg in argv:
        if hide_next:
            redacted.append("***")
            hide_next = False
        elif arg == "--api-key":
            redacted.append(arg)
            hide_next = True
        elif arg.startswith("--api-key="):
            redacted.append("--api-key=***")
        else:
            redacted.append(arg)
    return redacted


def _without_key(obj, api_key: str):
    if not api_key or obj is None:
        return obj
    return json.loads(json.dumps(obj).replace(api_key, "***"))


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""
