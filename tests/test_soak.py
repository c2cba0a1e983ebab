"""A bounded soak: 50 streams with 5% injected faults. Every request is accounted for and the
client's memory stays flat."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, load_records, read_truth

pytestmark = pytest.mark.slow  # 700 streamed answers

REQUESTS = 700


def test_soak_accounts_for_every_request_with_flat_memory(start_sim, tmp_path):
    sim = start_sim(slots=64, decode_tps=150.0, fault_rate=0.05, stall_s=3.0, answer_tokens_min=40,
                    answer_tokens_max=80)
    out = tmp_path / "run"
    cli = subprocess.Popen([sys.executable, "-m", "llm_bench.cli", "run", "chat", "--host", sim.url, "--users", "50",
                            "--requests", str(REQUESTS), "--read-timeout", "2", "--out", str(out)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss_mb = _sample_locust_rss(cli, str(out))
    _stdout, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr[-3000:]

    records = load_records(out)
    chat = records[records["scenario"] == "chat"]
    assert len(chat) == REQUESTS  # ok + failed = sent
    assert len(read_truth(sim.truth_log)) == len(records)  # the engine saw exactly those (and the warm-ups)
    failed = chat[~chat["ok"]]
    assert 0 < len(failed) < 0.2 * REQUESTS and (failed["error"] != "").all()
    assert len(rss_mb) >= 5
    quarter = rss_mb[len(rss_mb) // 4]
    assert max(rss_mb[len(rss_mb) // 4:]) - quarter < 40, rss_mb


def _sample_locust_rss(cli: subprocess.Popen, marker: str) -> list[float]:
    samples, locust = [], None
    while cli.poll() is None:
        if locust is None:
            locust = next((p for p in psutil.Process(cli.pid).children() if marker in " ".join(p.cmdline())), None)
        if locust is not None:
            try:
                samples.append(locust.memory_info().rss / 2**20)
            except psutil.NoSuchProcess:
                break
        time.sleep(0.5)
    return samples
