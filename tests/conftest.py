"""Shared fixtures: a simulated engine per test (its truth log beside it), and the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import simengine
from analysis.load import load_run
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


@pytest.hookimpl(tryfirst=True)  # before -m selects: the markers must be on the tests by then
def pytest_collection_modifyitems(config, items) -> None:
    """``engines`` on every test that uses a real engine's fixture, ``browser`` on every test that drives
    Chromium; a marker expression that does not name ``slow`` leaves the slow tests out (the developer's
    loop, ``-m "not engines and not browser"``). Without -m every test runs."""
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
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
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

