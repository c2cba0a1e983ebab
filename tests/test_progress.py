"""The progress line: a pure function of what the run's files said, at exact synthetic times."""

from __future__ import annotations

import io
import json

from llm_bench.progress import HEARTBEAT_S, Plan, Printer, Progress, Tail, chat_plan

SUITE = {"event": "suite", "t": 0.0, "phases": [{"phase": "chat", "expected_records": 3},
                                                  {"phase": "needle-128k", "expected_records": 3}]}


def record(phase, t_send, e2e_s, ok=True, ttft_s=0.5, decode_tps=40.0, tokens=100, scenario=None, turn=None):
    return {"scenario": scenario or phase.split("-")[0], "phase": phase, "ok": ok, "t_send": t_send,
            "e2e_s": e2e_s, "ttft_s": ttft_s if ok else None, "decode_tps": decode_tps if ok else None,
            "completion_tokens": tokens if ok else None, "t_start": 1000.0 + t_send, "turn": turn}


def test_a_long_request_is_seen_in_flight_with_its_age():
    progress = Progress(Plan(), t_started=0.0)
    for event in (SUITE, {"event": "phase", "t": 1.0, "phase": "chat"}):
        progress.on_event(event)
    assert progress.line(1.5) == "0:01 | phase 1/2 chat | 0/3 done"  # warming up: nothing handed out yet
    progress.on_event({"event": "job", "t": 2.0, "phase": "chat", "round": 1, "index": 0})
    assert progress.line(4.5) == "0:04 | phase 1/2 chat | 0/3 done, 1 in flight for 2.5 s"
    progress.on_record(record("chat", t_send=2.0, e2e_s=3.0, ttft_s=0.25))
    progress.on_record(record("warmup-needle", 5.0, 0.1, scenario="warmup"))  # never counted
    progress.on_event({"event": "phase", "t": 5.5, "phase": "needle-128k"})
    progress.on_event({"event": "job", "t": 6.0, "phase": "needle-128k", "round": 1, "index": 0})
    line = progress.line(6.0 + 133.0)
    assert line == "2:19 | phase 2/2 needle-128k | 0/3 done, 1 in flight for 2m13s"
    assert progress.line(9.0, "chat").startswith("0:09 | phase 1/2 chat | 1/3 done | TTFT p50 0.250 s")


def test_figures_are_the_phase_s_own_and_failures_are_counted_not_averaged():
    progress = Progress(chat_plan(requests=4, users=2), t_started=10.0)
    progress.on_record(record("chat", 10.0, 2.0, ttft_s=0.2, decode_tps=30.0))
    progress.on_record(record("chat", 10.0, 3.0, ttft_s=0.4, decode_tps=50.0))
    progress.on_record(record("chat", 12.0, 1.0, ok=False))
    line = progress.line(14.0)
    # No job events for chat.py: users are in flight while requests remain, since the last one ended.
    assert "3/4 done, 1 in flight for 1.0 s" in line
    assert "1 failed" in line and "TTFT p50 0.300 s" in line and "decode p50 40.0 tok/s" in line


def test_an_agent_job_ends_at_its_last_turn_or_a_failed_one():
    progress = Progress(Plan(), t_started=0.0)
    progress.on_event({"event": "suite", "t": 0.0, "phases": [{"phase": "agent", "expected_records": 12}]})
    progress.on_event({"event": "phase", "t": 0.0, "phase": "agent"})
    for index in (0, 1):
        progress.on_event({"event": "job", "t": 1.0, "phase": "agent", "round": index + 1, "index": index})
    for turn in range(1, 7):
        progress.on_record(record("agent", 1.0 + turn, 0.5, turn=turn))
    assert progress.in_flight("agent") == 1
    progress.on_record(record("agent", 9.0, 0.5, ok=False, turn=2))
    assert progress.in_flight("agent") == 0


def test_tail_reads_whole_lines_only(tmp_path):
    path = tmp_path / "records.jsonl"
    tail = Tail(path)
    assert tail.read() == []  # not created yet
    path.write_text(json.dumps({"a": 1}) + "\n" + '{"b":')
    assert tail.read() == [{"a": 1}]
    with open(path, "a") as f:
        f.write(' 2}\n{"c": 3}\n')
    assert tail.read() == [{"b": 2}, {"c": 3}]


def test_without_a_terminal_a_line_per_phase_and_a_heartbeat():
    out = io.StringIO()  # not a TTY
    printer, progress = Printer(out), Progress(Plan(), t_started=0.0)
    progress.on_event(SUITE)
    progress.on_event({"event": "phase", "t": 0.0, "phase": "chat"})
    printer.show(progress, 1.0)
    printer.show(progress, 2.0)  # nothing new to say
    printer.show(progress, 1.0 + HEARTBEAT_S)  # still running: say so
    for i in range(3):
        progress.on_record(record("chat", 1.0 + i, 1.0))
    progress.on_event({"event": "phase", "t": 40.0, "phase": "needle-128k"})
    printer.show(progress, 40.0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert lines[2].startswith("0:40 | phase 1/2 chat | 3/3 done")  # the phase that ended, as it ended
    assert lines[3] == "0:40 | phase 2/2 needle-128k | 0/3 done"
    assert "\r" not in out.getvalue()


def test_a_capacity_search_s_verdicts_are_printed_as_lines_of_their_own_and_it_ends_as_a_search():
    progress = Progress(Plan(), t_started=0.0)
    progress.on_event({"event": "suite", "t": 0.0, "run": "search", "phases": []})
    progress.on_event({"event": "phase", "t": 0.0, "phase": "class-4"})
    stream = io.StringIO()
    printer = Printer(stream)
    printer.show(progress, 1.0)
    progress.on_event({"event": "note", "t": 2.0, "line": "4 students: 20 requests, TTFT p95 0.300 s: meets the SLO"})
    progress.on_event({"event": "phase", "t": 2.0, "phase": "settle-8"})
    printer.show(progress, 2.5)
    progress.on_event({"event": "end", "t": 3.0})
    printer.close(progress, 3.0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "0:01 | phase class-4 | 0 done"
    assert lines[1] == "4 students: 20 requests, TTFT p95 0.300 s: meets the SLO"  # once, as it came
    assert lines[-1] == "0:03 | phase settle-8 | 0 done | search done"
    assert stream.getvalue().count("meets the SLO") == 1


def test_a_capacity_search_s_line_counts_down_the_time_its_model_says_is_left():
    progress = Progress(Plan(), t_started=0.0)
    progress.on_event({"event": "suite", "t": 0.0, "run": "search", "phases": []})
    progress.on_event({"event": "phase", "t": 1.0, "phase": "probe-burst-1"})
    assert "left" not in progress.line(2.0)  # the probe runs: nothing is known yet
    progress.on_event({"event": "phase", "t": 30.0, "phase": "settle-24"})
    progress.on_event({"event": "eta", "t": 30.0, "remaining_s": 600.0}, now=31.0)
    assert progress.line(31.0).endswith("| about 10 min left")
    assert progress.line(31.0 + 530.0).endswith("| about 70 s left")  # counted on this process's clock
    assert progress.line(31.0 + 700.0).endswith("| longer than expected")
    progress.on_event({"event": "end", "t": 700.0})
    assert progress.line(800.0).endswith("| search done")
