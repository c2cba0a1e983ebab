"""The LLM tab: the live table's figures, and Locust's real web UI serving it during a run (in this process,
tests/in_process.py; and in a browser, from Locust run as a user runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from bench_tasks.live_table import LiveTable
from llm_bench.headless import free_port
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.burst import BurstUser
from locustfiles.users.chat import ChatQuestionUser
from tests import in_process
from tests.conftest import CHROMIUM_FLAGS, ROOT


def record(phase="chat", ok=True, ttft=0.1, decode=50.0, tokens=100, start=1000.0, e2e=2.0, scenario="chat"):
    return {"scenario": scenario, "phase": phase, "ok": ok, "ttft_s": ttft if ok else None,
            "decode_tps": decode if ok else None, "completion_tokens": tokens if ok else None,
            "t_start": start, "t_send": start, "e2e_s": e2e}


def test_live_table_figures_exact_and_failures_counted_not_averaged():
    table = LiveTable()
    for i, ttft in enumerate([0.1, 0.2, 0.3, 0.4, 1.0]):
        table.add(record(ttft=ttft, decode=40.0 + i, start=1000.0 + i))
    table.add(record(ok=False, start=1005.0))
    table.add(record(scenario="warmup", phase="warmup-chat"))
    table.add(record(phase="burst-4", ok=False))
    rows = {row["phase"]: row for row in table.rows()}
    chat = rows["chat"]
    assert (chat["requests"], chat["errors"]) == (6, 1)
    assert chat["ttft_p50_s"] == pytest.approx(0.3) and chat["ttft_p95_s"] == pytest.approx(0.88)
    assert chat["decode_tps_p50"] == pytest.approx(42.0)
    assert chat["total_tps"] == pytest.approx(500 / 6.0)  # 1000 .. 1006
    assert chat["total_tps_now"] == pytest.approx(500 / 10.0)
    burst = rows["burst-4"]  # every request failed: no figure, not 0
    assert burst["errors"] == 1 and burst["ttft_p50_s"] is None and burst["total_tps"] is None
    assert "warmup-chat" not in rows


def test_live_table_burst_total_is_per_round_from_the_release_as_in_the_report():
    table = LiveTable()
    for rnd, start in ((1, 1000.0), (2, 1030.0)):  # two rounds 30 s apart: the pause is not the server's
        for i, e2e in enumerate((2.0, 4.0)):
            row = record(phase="burst-2", scenario="burst", tokens=100, start=start + i * 0.01, e2e=e2e)
            table.add({**row, "round": rnd, "release_offset_s": i * 0.01})
    burst = {row["phase"]: row for row in table.rows()}["burst-2"]
    assert burst["total_tps"] == pytest.approx(200 / 4.01)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


class Suite(SuiteShape):
    users = {"chat": ChatQuestionUser, "burst": BurstUser}


def web_ui(sim, tmp_path):
    """Locust's web UI in this process (tests/in_process.py), for the suite of chat and bursts."""
    return in_process.local(["--host", sim.url, "--out", str(tmp_path / "run")], [ChatQuestionUser, BurstUser], Suite,
                            web_ui=True)


def fetch(url: str) -> bytes:
    return in_process.fetch(get, url)  # from a thread: the web UI answers from this process's event loop


@pytest.mark.slow  # a web UI run: 18 s
def test_web_ui_serves_the_llm_tab_and_fills_it_during_a_run(start_sim, tmp_path):
    sim = start_sim(decode_tps=200.0)
    with web_ui(sim, tmp_path) as ui:
        base = ui.url
        page = fetch(base + "/").decode()
        args = json.loads(page.split("window.templateArgs = ", 1)[1].split("\n", 1)[0].rstrip(";"))
        assert args["extended_tabs"] == [{"title": "LLM", "key": "llm"}]
        assert "./llm/requests.csv" in json.dumps(args["extended_csv_files"])
        in_process.fetch(start_run, base, sim.url)

        def filled():
            stats = json.loads(fetch(base + "/stats/requests"))
            rows = {row["phase"]: row for row in stats["extended_stats"][0]["data"]}
            return rows if {"chat", "burst-1", "burst-2"} <= set(rows) else None

        rows = in_process.until(filled, 90, every_s=0.5)
        assert rows["chat"]["requests"] == 3 and rows["chat"]["errors"] == 0
        assert isinstance(rows["chat"]["ttft_p50_s"], float)
        csv_text = fetch(base + "/llm/requests.csv").decode()
        assert csv_text.splitlines()[0].startswith("scenario,phase,round")
        assert sum(1 for line in csv_text.splitlines() if line.startswith("chat,")) == 3
        assert "./llm/report.html" in json.dumps(args["extended_csv_files"])
        # The suite ends by itself; its report is written into --out and served beside the CSV.
        report = in_process.until(lambda: _answered(base + "/llm/report.html"), 120, every_s=0.5).decode()
        assert "llm-bench summary" in report and "burst-2" in report
        assert (tmp_path / "run" / "summary.md").exists()
        # Start again: the second run's records and report are its own; the first run's are kept aside.
        in_process.fetch(start_run, base, sim.url)
        first = tmp_path / "run" / "earlier-runs" / "1"
        in_process.until(lambda: (first / "report.html").exists() and (tmp_path / "run" / "report.html").exists(),
                         120, every_s=0.5)
        ui.run.sink.quit()  # the second report written (its greenlet waits for `llm-bench report`)
    for directory in (first, tmp_path / "run"):
        chat = [line for line in (directory / "requests.csv").read_text().splitlines() if line.startswith("chat,")]
        assert len(chat) == 3, directory


def _answered(url: str) -> bytes | None:
    def get_or_none() -> bytes | None:
        try:
            return get(url)
        except urllib.error.HTTPError:  # 404: not yet
            return None
    return in_process.fetch(get_or_none)


def test_a_bad_value_in_the_start_form_fails_the_run_loudly(start_sim, tmp_path):
    sim = start_sim()
    with web_ui(sim, tmp_path) as ui:
        in_process.fetch(start_run, ui.url, sim.url, bursts="2,lots")
        failure_json = tmp_path / "run" / "failure.json"
        in_process.until(failure_json.exists)
    failure = json.loads(failure_json.read_text())
    assert failure["cause"].startswith("ValueError: --bursts: expected counts like 1,4,12, got '2,lots'"), failure
    assert "Suite" in failure["during"]


def start_web_ui(host: str, tmp_path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "quick_suite.py"),
                           "--host", host, "--web-host", "127.0.0.1", "--web-port", str(port),
                           "--out", str(tmp_path / "run")], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ui, f"http://127.0.0.1:{port}"


def start_run(base: str, host: str, **fields) -> None:
    """Press start as the form does, with the suite's options from the form."""
    form = urllib.parse.urlencode({"user_count": 1, "spawn_rate": 1, "host": host, "runs": 1,
                                   "only": "chat,burst", "bursts": "1,2", **fields}).encode()
    urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=form), timeout=10).read()


def _wait(probe, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return probe()
        except Exception:  # noqa: BLE001 - not ready yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_llm_tab_renders_in_a_real_browser(chromium, start_sim, tmp_path):
    sim = start_sim(decode_tps=200.0)
    ui, base = start_web_ui(sim.url, tmp_path)
    try:
        _wait(lambda: get(base + "/"))
        start_run(base, sim.url)

        def rendered() -> str:
            dom = subprocess.run(
                [chromium, "--headless", *CHROMIUM_FLAGS,
                 f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=6000", "--dump-dom",
                 f"{base}/?tab=llm"], capture_output=True, text=True, timeout=60).stdout
            assert "TTFT p50 (s)" in dom and "burst-2" in dom and ">chat<" in dom
            return dom

        dom = _wait(rendered, timeout_s=120)
        assert "Decode tok/s p50" in dom and ">LLM<" in dom
    finally:
        ui.terminate()
        ui.wait(timeout=30)
