"""Shared fixtures: a simulated engine per test (its truth log beside it), and the CLI as a user runs it."""

from __future__ import annotations

import tests.in_process  # noqa: F401 - first: Locust imported unpatched, before anything else imports it

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import simengine
from analysis.load import load_run
from tests.engines.cache import cache_root, file_lock
from tests.machine import Machine
from tests.engines.fixtures import VLLM_FIXTURES
from tests.engines.fixtures import (  # noqa: F401 - real engines, started once per session
    engine_cache_dir,
    llamacpp_server,
    pytest_collection_finish,  # installs vLLM before the first test, outside any test's timeout
    smollm2_ngram_server,
    smollm2_server,
    vllm_ngram_server,
    vllm_server,
)

ROOT = Path(__file__).resolve().parent.parent
ENGINE_FIXTURES = {"llamacpp_server", "smollm2_server", "smollm2_ngram_server", "vllm_server", "vllm_ngram_server"}
BROWSER_FIXTURES = {"chromium", "browser_page"}


@pytest.hookimpl(tryfirst=True)  # the marks must be on before -m selects and before xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    """``engines`` on every test that uses a real engine's fixture, ``browser`` on every test that drives
    Chromium; a marker expression that does not name ``slow`` leaves the slow tests out (the developer's
    loop, ``-m "not engines and not browser and not alone"``). Without -m every test runs. Then the workers' share."""
    for item in items:
        used = set(item.fixturenames)
        if used & ENGINE_FIXTURES:
            item.add_marker(pytest.mark.engines)
        if used & BROWSER_FIXTURES:
            item.add_marker(pytest.mark.browser)
    expression = config.getoption("markexpr")
    if expression and "slow" not in expression:
        slow = [item for item in items if item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
    share_among_workers(items)


# The longest tests, by module: handed out first, so that none of them is left to end the run alone (a
# scheduling hint: a module missing here costs minutes, never a result). The README's blocks wait for its
# set-up (one per session, tests/test_readme.py): they come after the other long tests, not beside it.
LONGEST_FIRST = ("test_readme.py", "test_install.py", "test_real_engines.py", "test_distributed.py",
                 "test_faults.py", "test_failures.py", "test_lost_answers.py", "test_cache_checks.py",
                 "test_readme.py::blocks")
ALONE_GROUP = "vllm-then-alone"


def share_among_workers(items) -> None:
    """What each pytest-xdist worker (``--dist loadgroup``) runs, in which order. vLLM's tests and the tests
    that need the machine alone are one group, on one worker: each vLLM (a minute to start, 4.5 GB) starts
    once, and the ``alone`` tests run back to back, holding the machine as one block (tests/machine.py).
    vLLM's other tests come first in it, on a shared machine, while the other workers run the rest.
    llama.cpp starts in seconds: its tests that share the machine go to any worker, each worker starting
    the engines it needs. A module whose fixtures are made once per module is a group; every other test is
    handed out on its own, the longest first."""
    def order(item):
        if _in_alone_group(item):
            return (0, item.get_closest_marker("alone") is not None, 0)
        name = item.path.name
        if name == "test_readme.py" and "set_up" in item.fixturenames and "set_up_command" not in item.name:
            name = "test_readme.py::blocks"
        return (1, name not in LONGEST_FIRST, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else 0)

    items.sort(key=order)  # stable: a module's tests keep their order
    for item in items:
        if _in_alone_group(item):
            item.add_marker(pytest.mark.xdist_group(ALONE_GROUP))
        elif _has_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


def _in_alone_group(item) -> bool:
    return item.get_closest_marker("alone") is not None or bool(VLLM_FIXTURES & set(item.fixturenames))


def _has_module_fixture(item) -> bool:
    definitions = getattr(item, "_fixtureinfo", None)
    return definitions is not None and any(
        fixture.scope == "module" for chain in definitions.name2fixturedefs.values() for fixture in chain)


def pytest_configure(config) -> None:
    """Stop at once a run whose groups would not take: its workers would each start every engine (three
    vLLMs at 4.5 GB each) and run the ``alone`` tests side by side. pytest-xdist 3.8 names a test's
    group in its node id (``item._nodeid``), which pytest 9.2 no longer reads (pytest-xdist#1386)."""
    if config.getoption("dist", "no") == "loadgroup" and not _node_ids_can_be_renamed():
        raise pytest.UsageError(f"pytest-xdist's --dist loadgroup cannot group tests under pytest {pytest.__version__} "
                                "(pytest-xdist#1386): install the versions pyproject.toml names, or run with -n 0")


def _node_ids_can_be_renamed() -> bool:
    probe = object.__new__(pytest.Function)  # how pytest-xdist renames a test, tried on a bare one
    probe._nodeid = "probe@group"
    try:
        return probe.nodeid == "probe@group"
    except AttributeError:
        return False


MACHINE = Machine()


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outside pytest-timeout: a wait for the machine is no test's
def pytest_runtest_protocol(item, nextitem):
    alone = item.get_closest_marker("alone") is not None
    MACHINE.take(alone=alone)
    try:
        return (yield)
    finally:
        if not (alone and nextitem is not None and nextitem.get_closest_marker("alone")):
            MACHINE.release()


@pytest.fixture
def start_sim(tmp_path):
    """start_sim(**SimConfig fields) -> handle with .url and .truth (a DataFrame reader)."""
    handles = []

    def start(**config):
        truth_log = tmp_path / f"truth-{len(handles)}.jsonl"
        handle = simengine.start_process(simengine.SimConfig(port=0, truth_log=str(truth_log), **config))
        handle.truth_log = truth_log
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


def wait_for(condition, what: str, timeout_s: float = 120.0) -> None:
    """Until CONDITION() is true; an AssertionError naming WHAT after TIMEOUT_S."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def read_truth(path: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows)


def run_cli(*args: str, timeout: float = 300, env: dict | None = None, cpus: set[int] | None = None,
            cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run `llm-bench ARGS` exactly as a user would (on ``cpus`` only, and its children too, if given)."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "OPENAI_BASE_URL"} \
        if "OPENAI_BASE_URL" not in (env or {}) else env  # a developer's own server is never measured
    return subprocess.run([sys.executable, "-m", "llm_bench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env, preexec_fn=pin)


def split_cores(sim) -> set[int] | None:
    """Give the simulated engine the first core and return the others for the client, as `llm-bench
    selftest` does: an accuracy figure is the client's, not the scheduler's when both share a core.
    None (nothing pinned) on a one-core machine."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    os.sched_setaffinity(sim.popen.pid, {cores[0]})
    return set(cores[1:])


# What Chromium needs here: no sandbox (root), no GPU, and nothing that reaches for the network.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, installed when missing (CI runs as root); no browser is downloaded at run time."""
    path = shutil.which("chromium")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        with file_lock(cache_root() / "locks" / "chromium.lock"):  # one apt-get at a time (xdist's workers)
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            if shutil.which("chromium") is None:
                subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, timeout=300)
                subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, check=False, timeout=600)
        path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium could not be installed with apt-get")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture
def browser_page(chromium, tmp_path):
    """A Playwright page in that Chromium: headless, a fresh profile, a 1400 x 1000 window."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            tmp_path / "chromium-profile", executable_path=chromium, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            yield context.new_page()
        finally:
            context.close()


def load_records(out_dir: Path) -> pd.DataFrame:
    records, _info = load_run(out_dir)
    return records

