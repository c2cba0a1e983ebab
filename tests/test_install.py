"""Installed as users install a command-line tool: the wheel, non-editable, in a fresh virtual environment
(what `pip install .`, `pipx install .` and `pip install git+URL` do), run from an empty directory.

Nothing of the repository may be read at run time: the engine profiles and the locustfiles come from the
installed package, and an install whose profiles are gone fails in one line, within seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench_tasks import run_failure
from tests.conftest import load_records
from tests.test_readme import fresh_copy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def run(command: list, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_installed_non_editable_runs_the_readme_s_main_command_at_small_sizes(tmp_path, start_sim):
    source = fresh_copy(tmp_path / "clone")  # what a clone holds: no .venv, no egg-info, no results
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, source], tmp_path,
                dict(os.environ))
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(wheels.glob("llm_bench-*.whl"))

    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "VIRTUAL_ENV",
                                                             "PYTHONPATH")}
    assert run([sys.executable, "-m", "venv", venv], tmp_path, env).returncode == 0
    installed = run([venv / "bin" / "pip", "install", "-q", wheel], tmp_path, env, timeout=1200)
    assert installed.returncode == 0, installed.stderr[-3000:]
    bench, env["PATH"] = venv / "bin" / "llm-bench", f"{venv / 'bin'}{os.pathsep}{env['PATH']}"

    # The README's main command, from an empty directory: every scenario, at small sizes. What the wheel must
    # carry (the locustfiles, the engine profiles, the report's assets) every scenario and the report use;
    # the full-size command itself runs in tests/test_readme.py (the same code, installed editable).
    empty = tmp_path / "empty"
    empty.mkdir()
    small = ["--runs", "1", "--sizes", "1k", "--needle-sizes", "1k", "--bursts", "1,4"]
    quick = run([bench, "quick", *small, "--out", "results/quick"], empty, env)
    assert quick.returncode == 0 and "Traceback" not in quick.stdout + quick.stderr, quick.stderr[-3000:]
    assert "phase 1/6 chat" in quick.stdout and "suite done" in quick.stdout
    records = load_records(empty / "results" / "quick")
    measured = records[records["scenario"] != "warmup"]
    assert measured.groupby("phase").size().to_dict() == {
        "chat": 3, "prompt-1k": 1, "agent": 6, "burst-1": 1, "burst-4": 4, "needle-1k": 3}
    assert measured["ok"].all() and set(measured["scenario"]) == {"chat", "prompt", "agent", "burst", "needle"}
    assert set(measured["engine"]) == {"sim"}  # the profiles were found: the engine was recognised
    for name in ("summary.md", "report.html", "requests.csv", "settings.json"):
        assert (empty / "results" / "quick" / name).stat().st_size > 0, name

    # Its locustfiles, for people who run Locust themselves.
    site = Path(run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    empty, env).stdout.strip())
    path = run([bench, "locustfile", "quick_suite"], empty, env)
    assert path.returncode == 0 and Path(path.stdout.strip()) == site / "locustfiles" / "quick_suite.py"
    sim = start_sim(decode_tps=400.0)
    direct = run([venv / "bin" / "locust", "-f", path.stdout.strip(), "--headless", "--host", sim.url, "--only",
                  "chat", "--runs", "1", "--out", "direct", "--no-llm-report"], empty, env)
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert len(load_records(empty / "direct").query("scenario == 'chat'")) == 3

    # A damaged install: its engine profiles gone. Loud, quick, one line; and the same from Locust itself.
    for profile in (site / "configs" / "engines").glob("*.toml"):
        profile.unlink()
    started = time.perf_counter()
    broken = run([bench, "quick", "--only", "chat", "--out", "broken"], empty, env, timeout=120)
    assert broken.returncode == 2 and time.perf_counter() - started < 30, broken.stderr
    assert broken.stderr.strip().splitlines() == [
        f"llm-bench: error: no 'generic' engine profile in {site / 'configs' / 'engines'} (none found): the install "
        "is incomplete; reinstall llm-bench"]
    started = time.perf_counter()
    broken = run([venv / "bin" / "locust", "-f", path.stdout.strip(), "--headless", "--host", sim.url, "--only",
                  "chat", "--runs", "1", "--out", "broken-direct", "--no-llm-report"], empty, env, timeout=120)
    assert broken.returncode == run_failure.EXIT_CODE and time.perf_counter() - started < 30, broken.stderr[-3000:]
    failure = json.loads((empty / "broken-direct" / "failure.json").read_text())
    assert failure["cause"].startswith("ProfileError: no 'generic' engine profile in ")
    assert failure["where"].startswith("bench_tasks/engine.py:") and failure["during"] == "on_start of ChatQuestionUser"
