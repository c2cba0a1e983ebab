"""An API key is sent to the target host only, and appears in no file the tool or Locust writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli

SECRET = "sk-test-4f9c2e7d1b8a6350"


def files_containing(directory, text: str) -> list[str]:
    return [str(p) for p in directory.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.slow  # a whole quick suite: 12 s
def test_key_from_flag_is_in_no_output_file(start_sim, tmp_path):
    sim = start_sim(decode_tps=1000.0)  # what is written matters here, not how fast it came
    out = tmp_path / "run"
    result = run_cli("quick", "--host", sim.url, "--api-key", SECRET, "--only", "chat,agent", "--runs", "1",
                     "--setup", "secret-test", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list(out.iterdir())) >= 3  # records, settings, log, report...
    assert files_containing(out, SECRET) == []
    assert SECRET not in result.stdout + result.stderr
    assert "***" in (out / "settings.json").read_text()  # the command line is kept, redacted


def test_key_from_environment_is_in_no_locust_export(start_sim, tmp_path):
    sim = start_sim(decode_tps=1000.0)
    out = tmp_path / "run"
    env = {**os.environ, "OPENAI_API_KEY": SECRET}
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "quick_suite.py"), "--headless",
         "--host", sim.url, "--out", str(out), "--only", "chat", "--runs", "1",
         "--csv", str(out / "locust"), "--html", str(out / "locust.html"), "--json-file", str(out / "locust")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for export in ("locust_stats.csv", "locust.html", "locust.json", "requests.csv"):
        assert (out / export).exists(), export
    assert files_containing(out, SECRET) == []
    assert SECRET not in result.stdout + result.stderr
