"""A failure is loud, quick and complete: one injected at each place a run can break ends the run well
under a minute, with a one-line cause, a non-zero exit, the records so far kept and the report marked.

Failures are injected into runs of Locust in the test's own process (tests/in_process.py), by servers whose
answers to the set-up requests are odd, through the command line, and (a Locust too stuck to watch itself)
by a small locustfile (tests/locustfiles_for_tests/) run by the command line."""

from __future__ import annotations

import errno
import itertools
import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gevent
import pytest

from bench_tasks import engine, run_failure
from bench_tasks.records_file import read_jsonl
from llm_bench import headless, progress
from locustfiles import llm_run, sink
from locustfiles.shapes.suite import SuiteShape
from locustfiles.sink import RecordsSink
from locustfiles.users.burst import BurstUser
from locustfiles.users.chat import ChatQuestionUser
from tests import in_process
from tests.conftest import ROOT, load_records, run_cli

INJECTED = ROOT / "tests" / "locustfiles_for_tests"
FAST_S = 60  # every injected failure ends its run well under this
SLOW_METRICS_S = 2.0  # a /metrics this slow is still read (its timeout is 5 s)
pytestmark = pytest.mark.timeout(240)


# -- a small OpenAI-like server whose answers a test makes odd, one at a time --

STREAM = [{"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
          {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
          {"id": "c1", "choices": [{"index": 0, "delta": {"content": " there, friend"}}]},
          {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
          {"id": "c1", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}]
MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "someone"}]}


@pytest.fixture
def odd_server():
    """odd_server(answers) -> base URL. ``answers`` maps a path to its JSON answer, a text (str), a list of
    stream events (chat), or a function of how many times the path was asked; other paths answer 404."""
    servers = []

    def start(answers: dict) -> str:
        asked: dict[str, int] = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args) -> None:
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer()

            def _answer(self) -> None:
                asked[self.path] = asked.get(self.path, 0) + 1
                answer = answers.get(self.path)
                if callable(answer):
                    answer = answer(asked[self.path])
                if answer is None:  # a page of several lines, as web servers answer a path they lack
                    self._send(404, "text/html", b"<!DOCTYPE HTML>\n<html>\n  <body>\n    <h1>Not Found</h1>\n"
                                                 b"  </body>\n</html>\n")
                elif self.path == "/v1/chat/completions":
                    events = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
                                      for e in answer)
                    self._send(200, "text/event-stream", events + b"data: [DONE]\n\n")
                elif isinstance(answer, str):
                    self._send(200, "text/html", answer.encode())
                else:
                    self._send(200, "application/json", json.dumps(answer).encode())

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def timed_cli(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    result = run_cli(*args, timeout=FAST_S * 2, **({"cwd": cwd} if cwd else {}))
    return result, time.perf_counter() - started


def assert_one_failure_line(result: subprocess.CompletedProcess, out: Path, during: str) -> str:
    """Exit 3 and exactly one line on stderr: the cause, where, during what, where the traceback is."""
    assert result.returncode == run_failure.EXIT_CODE, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    line = lines[0]
    assert line.startswith("llm-bench: the run failed: ") and f"during {during}" in line, line
    assert line.endswith(f"; traceback in {out / 'failure.txt'}"), line
    assert "Traceback (most recent call last)" in (out / "failure.txt").read_text()
    return line


# -- through the command line: servers whose answers are odd --

@pytest.mark.parametrize("models", [
    {"data": {"id": "m"}},  # data not a list
    {"data": [{"object": "model", "owned_by": "x"}]},  # models without ids
    {"data": [{"id": None}]},
    {"data": []},
    ["m"],
    "<html>a web page, not an API</html>",
    None,  # not served: a 404 page of several lines
], ids=["data-not-a-list", "no-ids", "null-id", "no-models", "a-list", "html", "404-page"])
def test_odd_models_are_refused_by_the_server_check_in_one_line(odd_server, tmp_path, models):
    url = odd_server({"/v1/models": models, "/v1/chat/completions": STREAM})
    result, took_s = timed_cli("run", "chat", "--host", url, "--requests", "2", "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and took_s < FAST_S, (took_s, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"llm-bench: error: {url}/v1/models"), result.stderr


@pytest.mark.parametrize("command", [["run", "chat", "--requests", "3"], ["quick", "--only", "chat", "--runs", "1"]],
                         ids=["run-chat", "quick"])
def test_models_that_turn_odd_after_the_check_fail_the_run_in_on_start(odd_server, tmp_path, command):
    """The server answered the command line's check, then not Locust's (restarted with another config)."""
    url = odd_server({"/v1/models": lambda n: MODELS if n == 1 else {"data": "gone"},
                      "/v1/chat/completions": STREAM})
    out = tmp_path / "run"
    result, took_s = timed_cli(*command, "--host", url, "--out", str(out))
    user = "ChatUser" if command[0] == "run" else "ChatQuestionUser"
    line = assert_one_failure_line(result, out, f"on_start of {user}")
    assert took_s < FAST_S and f"ServerError: {url}/v1/models lists no model" in line, (took_s, line)
    assert json.loads((out / "failure.json").read_text())["traceback"] == "failure.txt"


@pytest.mark.slow  # a suite failed mid-run: 5.5 s
def test_nonsense_from_tokenize_fails_the_run_mid_suite_and_keeps_what_was_measured(odd_server, tmp_path):
    url = odd_server({"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]},  # the vLLM profile: /tokenize
                      "/tokenize": {"tokens": "nonsense"}, "/v1/chat/completions": STREAM})
    out = tmp_path / "run"
    result, took_s = timed_cli("quick", "--host", url, "--only", "chat,prompt", "--runs", "1", "--sizes", "300",
                               "--out", str(out))
    line = assert_one_failure_line(result, out, "task work of PromptUser")
    assert took_s < FAST_S and f"{url}/tokenize answered {{'tokens': 'nonsense'}}, not a token count" in line, line
    assert "(bench_tasks/tokens.py:" in line
    records = load_records(out)  # requests.csv: the chat phase, measured before the failure
    assert (out / "requests.csv").exists()
    assert len(records.query("phase == 'chat'")) == 3 and records.query("phase == 'chat'")["ok"].all()
    summary = (out / "summary.md").read_text()
    assert "**Incomplete run: the run failed**: ServerError:" in summary
    assert summary.index("the run failed") < summary.index("## Details")
    assert "the run failed" in (out / "report.html").read_text()


def test_odd_stream_events_are_failed_requests_and_the_run_ends(odd_server, tmp_path):
    odd = [{"choices": "none"}, b"[1, 2]", {"choices": [None]}]
    url = odd_server({"/v1/models": MODELS, "/v1/chat/completions": lambda n: STREAM if n == 1 else odd})
    out = tmp_path / "run"
    result, took_s = timed_cli("run", "chat", "--host", url, "--requests", "3", "--fail-on-error", "--out", str(out))
    assert result.returncode == 1 and took_s < FAST_S, result.stderr[-3000:]
    assert result.stderr.strip() == "llm-bench: 3 measured request(s) failed (--fail-on-error)"
    chat = load_records(out).query("scenario == 'chat'")
    assert len(chat) == 3 and not chat["ok"].any() and (chat["error"] != "").all()
    assert not (out / "failure.json").exists()  # a failed request is a measurement, not a failed run


def test_garbage_metrics_leave_the_run_whole(odd_server, tmp_path):
    """The engine's counters are a bonus: a /metrics that answers garbage leaves them out, nothing more."""
    url = odd_server({"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]},
                      "/metrics": "<html>not prometheus</html>", "/v1/chat/completions": STREAM})
    out = tmp_path / "run"
    result, took_s = timed_cli("quick", "--host", url, "--only", "chat", "--runs", "1", "--out", str(out))
    assert result.returncode == 0 and took_s < FAST_S, result.stderr[-3000:]
    assert (out / "summary.md").exists() and not (out / "failure.json").exists()
    assert all(json.loads(line)["metrics"] == {} for line in (out / "metrics.jsonl").read_text().splitlines())
    assert "held none of the series its profile names" in (out / "summary.md").read_text()  # said, not silent


def test_a_slow_metrics_endpoint_still_gives_every_phase_both_readings(odd_server, tmp_path):
    """The last phase's "after" reading is taken while the run ends: the run waits for it (a CI run against vLLM
    once lost it, and the engine's side of prompt-1k with it)."""
    def slow_metrics(n: int) -> str:
        time.sleep(SLOW_METRICS_S)
        return f"vllm:prompt_tokens_total {n}\nvllm:generation_tokens_total {2 * n}\n"

    url = odd_server({"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]}, "/metrics": slow_metrics,
                      "/v1/chat/completions": STREAM})
    out = tmp_path / "run"
    result, _ = timed_cli("quick", "--host", url, "--only", "chat,burst", "--bursts", "1", "--runs", "1",
                          "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    readings = [(r["phase"], r["when"]) for r in read_jsonl(out / "metrics.jsonl")[0]]
    assert readings == [("chat", "before"), ("chat", "after"), ("burst-1", "before"), ("burst-1", "after")]


def test_a_metrics_endpoint_that_fails_is_said_once_in_the_report(odd_server, tmp_path):
    """As llama.cpp started without --metrics: every reading fails, the report says so in one line."""
    url = odd_server({"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]}, "/v1/chat/completions": STREAM})
    out = tmp_path / "run"
    result, _ = timed_cli("quick", "--host", url, "--only", "chat", "--runs", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    readings = read_jsonl(out / "metrics.jsonl")[0]
    assert [(r["phase"], r["when"]) for r in readings] == [("chat", "before"), ("chat", "after")]
    assert all(r["error"].startswith("HTTPError: HTTP Error 404") and "metrics" not in r for r in readings)
    summary = (out / "summary.md").read_text()
    assert summary.count("/metrics could not be read") == 1
    assert "could not be read (2 tries; the first: before chat (HTTPError: HTTP Error 404" in summary


def test_an_unknown_engine_or_a_broken_profile_set_is_one_line_before_anything_runs(tmp_path):
    result, _ = timed_cli("run", "chat", "--engine", "nope", "--out", str(tmp_path / "a"))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "llm-bench: error: --engine 'nope' is not an engine profile; choose auto or one of: "
        "generic, llamacpp, ollama, sglang, sim, vllm"]


def test_profile_sets_that_are_missing_or_broken_say_so_in_one_line(tmp_path):
    with pytest.raises(engine.ProfileError, match=r"no 'generic' engine profile in .* \(none found\): the install is"):
        engine.load_profiles(tmp_path / "absent")
    (tmp_path / "vllm.toml").write_text((ROOT / "configs" / "engines" / "vllm.toml").read_text())
    with pytest.raises(engine.ProfileError, match=r"\(only vllm found\)"):
        engine.load_profiles(tmp_path)
    (tmp_path / "generic.toml").write_text("name = \n")
    with pytest.raises(engine.ProfileError, match=r"generic.toml cannot be read \(TOMLDecodeError"):
        engine.load_profiles(tmp_path)
    assert sorted(engine.load_profiles()) == ["generic", "llamacpp", "ollama", "sglang", "sim", "vllm"]


# -- inside Locust: a failure injected at each place, in the test's own Locust (tests/in_process.py) --

class Suite(SuiteShape):
    users = {"chat": ChatQuestionUser, "burst": BurstUser}


class BrokenChatUser(ChatQuestionUser):
    def run_job(self, job) -> None:
        if job.index == 1:
            raise ZeroDivisionError("injected in a task")
        super().run_job(job)


class BrokenChatSuite(SuiteShape):
    """The suite whose chat user raises in its second job (mid-suite, after records were written)."""

    users = {"chat": BrokenChatUser, "burst": BurstUser}


class BrokenSuite(Suite):
    """The suite whose shape raises in tick once the burst phase has begun."""

    def tick(self):
        phase = self.coordinator and self.coordinator.phase
        if phase is not None and phase.scenario == "burst":
            raise LookupError("injected in the shape's tick")
        return super().tick()


class StuckChatUser(ChatQuestionUser):
    """Takes its second job and never finishes it (no request, no byte)."""

    def run_job(self, job) -> None:
        if job.index == 1:
            gevent.sleep(3600)
        super().run_job(job)


class StuckSuite(SuiteShape):
    users = {"chat": StuckChatUser}


def raising_at(n: int):
    """A listener of Locust's request event (one a user adds) that raises at the ``n``-th request; Locust
    itself would log the exception and go on."""
    requests = itertools.count(1)

    def count_requests(**_kwargs) -> None:
        if next(requests) == n:
            raise RuntimeError("injected in a listener")
    return count_requests


def explode_later() -> None:
    gevent.sleep(3.0)
    raise ValueError("injected in a greenlet")


class ExplodingGreenlet(llm_run.RunListener):
    """A greenlet of the user's own that dies of an exception three seconds into the run (gevent would print
    it and go on)."""

    def run_starts(self, run) -> None:
        gevent.spawn(explode_later)


def profiles_gone(monkeypatch, environment) -> None:
    monkeypatch.setattr(engine, "PROFILES_PACKAGE", "configs_that_were_not_installed")


def listener_raising(monkeypatch, environment) -> None:
    environment.events.request.add_listener(raising_at(4))


def disk_full_at_the_fifth_record(monkeypatch, environment) -> None:
    add = RecordsSink.add

    def add_until_the_disk_is_full(self, row: dict) -> None:
        if self.count >= 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        add(self, row)

    monkeypatch.setattr(RecordsSink, "add", add_until_the_disk_is_full)


def nothing(monkeypatch, environment) -> None:
    pass


HERE = "tests/test_failures.py:"
INJECTIONS = {  # what is broken, how -> (shape, listeners, during, cause, where)
    "missing_profiles": (Suite, (), profiles_gone, "on_start of ChatQuestionUser",
                         "ProfileError: the engine profiles are not installed (no package "
                         "'configs_that_were_not_installed'); reinstall llm-bench", "bench_tasks/engine.py:"),
    "failing_task": (BrokenChatSuite, (), nothing, "task work of BrokenChatUser",
                     "ZeroDivisionError: injected in a task", HERE),
    "raising_listener": (Suite, (), listener_raising,
                         "listener raising_at.<locals>.count_requests of Locust's request event",
                         "RuntimeError: injected in a listener", HERE),
    "raising_greenlet": (Suite, (ExplodingGreenlet(),), nothing, "greenlet explode_later",
                         "ValueError: injected in a greenlet", HERE),
    "failing_shape": (BrokenSuite, (), nothing, "tick of BrokenSuite", "LookupError: injected in the shape's tick",
                      HERE),
    "failing_sink": (Suite, (), disk_full_at_the_fifth_record, "task work of ChatQuestionUser",
                     "OSError: [Errno 28] No space left on device", HERE),
}


def failed_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("llm-bench: the run failed")]


@pytest.mark.parametrize("injected", list(INJECTIONS))
def test_a_failure_injected_into_a_run_ends_it_loudly(start_sim, tmp_path, monkeypatch, caplog, injected):
    shape, listeners, inject, during, cause, where = INJECTIONS[injected]
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    argv = ["--host", sim.url, "--out", str(out), "--only", "chat,burst", "--runs", "2", "--bursts", "2",
            "--no-llm-report"]
    started = time.perf_counter()
    with in_process.local(argv, list(shape.users.values()), shape, listeners=listeners) as run:
        inject(monkeypatch, run.environment)
        run.start()
        run.wait(FAST_S)
    assert time.perf_counter() - started < FAST_S and run.environment.process_exit_code == run_failure.EXIT_CODE
    failure = json.loads((out / "failure.json").read_text())
    assert (failure["cause"], failure["during"]) == (cause, during)
    assert where in failure["where"] and failure["traceback"] == "failure.txt"
    lines = failed_lines(caplog)
    assert len(lines) == 1 and f"({failure['where']}, during {during}); traceback in " in lines[0], lines
    if injected != "missing_profiles":  # it failed before its first request
        records = load_records(out)
        assert (out / "requests.csv").exists() and len(records[records["scenario"] != "warmup"]) >= 1


def test_a_failed_run_s_report_says_why_at_the_top_of_its_warnings(start_sim, tmp_path, monkeypatch):
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    reports = []
    monkeypatch.setattr(sink, "_write_report", lambda out_dir: reports.append(out_dir))  # written below, once
    with in_process.local(["--host", sim.url, "--out", str(out), "--only", "chat", "--runs", "2"],
                          [BrokenChatUser], BrokenChatSuite) as run:
        run.start()
        run.wait(FAST_S)
    assert run.environment.process_exit_code == run_failure.EXIT_CODE
    # Asked for once: the failure and the quit both stop the run, with the same records.
    assert reports == [out.resolve()]
    result = run_cli("report", str(out))  # as the run's own report does: `llm-bench report DIR`
    assert result.returncode == 0, result.stderr[-3000:]
    said = next(line for line in (out / "summary.md").read_text().splitlines() if "the run failed" in line)
    assert said.startswith("**Incomplete run: the run failed**: ZeroDivisionError: injected in a task ("), said
    assert (f"test_failures.py:{BrokenChatUser.run_job.__code__.co_firstlineno + 2} in run_job, "
            "during task work of BrokenChatUser); the traceback is in `failure.txt`") in said, said


@pytest.mark.slow  # two runs: 7 s
def test_a_new_run_in_the_same_directory_has_not_failed(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    with in_process.local(["--host", sim.url, "--out", str(out), "--only", "chat", "--runs", "2",
                           "--no-llm-report"], [BrokenChatUser], BrokenChatSuite) as run:
        run.start()
        run.wait(FAST_S)
    assert run.environment.process_exit_code == run_failure.EXIT_CODE
    fine = run_cli("quick", "--host", sim.url, "--only", "chat", "--runs", "1", "--out", str(out))
    assert fine.returncode == 0, fine.stderr[-3000:]
    assert not (out / "failure.json").exists() and "the run failed" not in (out / "summary.md").read_text()
    assert (out / "earlier-runs" / "1" / "failure.json").exists()


@pytest.mark.slow  # waits out the stall limit
def test_a_run_that_stops_moving_is_ended_by_its_stall_watchdog(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    with in_process.local(["--host", sim.url, "--out", str(out), "--only", "chat", "--runs", "2",
                           "--read-timeout", "1", "--no-llm-report"], [StuckChatUser], StuckSuite) as run:
        run.start()
        run.wait(FAST_S)
    assert run.environment.process_exit_code == run_failure.EXIT_CODE
    failure = json.loads((out / "failure.json").read_text())
    assert failure["during"] == "the stall watchdog of StuckSuite"
    assert failure["cause"].startswith("Stalled: no progress for 1"), failure  # 13 s and a tick
    assert failure["cause"].endswith("s (3 x --read-timeout 1 s + 10 s): phase chat, 1 job(s) in flight, "
                                     "4 job(s) not taken yet"), failure
    assert len(load_records(out).query("scenario == 'chat'")) == 1  # the first job's answer, kept


# The backstop's clock starts with Locust's process, whose imports take 1.0-1.6 s here idle: at 4 s, a CI run
# whose other workers were starting vLLM stopped Locust before it had written a byte (locust.log empty).
WEDGED_STALL_S = 12


@pytest.mark.slow  # waits out the stall limit and the backstop
def test_a_wedged_locust_is_stopped_by_the_command_line_s_backstop(start_sim, tmp_path):
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    out.mkdir()
    started = time.perf_counter()
    with pytest.raises(headless.RunFailed, match=r"none of the run's files moved for \d+ s") as failed:
        headless.run_locust(INJECTED / "wedged_process.py", sim.url, out, 1, ["--requests", "20"], api_key="",
                            watch=progress.chat_plan(20, 1), stall_s=WEDGED_STALL_S)
    assert time.perf_counter() - started < FAST_S
    assert str(failed.value).endswith(f"(llm-bench's progress follower, during the run); traceback in "
                                      f"{out / 'failure.txt'}")
    # requests.csv: written by the command line from records.jsonl (the killed Locust could not)
    kept, _bad = read_jsonl(out / "records.jsonl")
    assert (out / "requests.csv").exists() and len(load_records(out)) == len(kept) >= 3
    assert "The last lines of locust.log" in (out / "failure.txt").read_text()


def test_a_worker_s_failure_ends_the_whole_distributed_run_with_its_cause(start_sim, tmp_path, caplog):
    sim = start_sim(decode_tps=400.0)
    out = tmp_path / "run"
    started = time.perf_counter()
    with in_process.distributed(["--host", sim.url, "--out", str(out), "--only", "chat", "--runs", "2",
                                 "--no-llm-report"], [BrokenChatUser], BrokenChatSuite, workers=1) as (master, workers):
        master.start()
        master.wait(FAST_S)
        in_process.until(workers[0].ended, 30)
    assert time.perf_counter() - started < FAST_S
    assert master.environment.process_exit_code == workers[0].environment.process_exit_code == run_failure.EXIT_CODE
    failure = json.loads((out / "failure.json").read_text())
    assert failure["cause"] == "ZeroDivisionError: injected in a task"
    assert failure["during"] == f"task work of BrokenChatUser on worker {workers[0].runner.client_id}"
    assert "Traceback (most recent call last)" in (out / "failure.txt").read_text()  # the worker's, on the master
    lines = failed_lines(caplog)  # the worker's line points to the master's --out; the master's to its files
    assert [line.endswith("traceback in the master's --out") for line in lines] == [True, False], lines
    assert len(load_records(out).query("scenario == 'chat'")) == 1 and (out / "requests.csv").exists()


# -- the locustfiles' paths, for people who run Locust themselves --

def test_llm_bench_locustfile_prints_a_path_or_lists_them(tmp_path):
    one = run_cli("locustfile", "quick_suite", cwd=tmp_path)
    assert one.returncode == 0 and one.stdout == f"{ROOT / 'locustfiles' / 'quick_suite.py'}\n"
    listed = run_cli("locustfile", cwd=tmp_path)
    assert listed.returncode == 0 and "quick_suite  The quick suite: chat, fresh prompts" in listed.stdout
    unknown = run_cli("locustfile", "llm_run", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.startswith("llm-bench: error: no locustfile 'llm_run'")
