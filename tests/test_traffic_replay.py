"""The user's traffic as a run sends it: a file's requests handed to users (bench_tasks/traffic/feed.py), a trace
replayed on its times through the open loop (bench_tasks/traffic/replay.py), and what the report sets beside the
engine's cache (analysis/traffic.py). Pure: an injected clock, the simulated engine's tokenizer in process."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis import traffic
from bench_tasks import run_mark
from bench_tasks.open_loop import WINDOW, OpenLoop
from bench_tasks.record import COLUMNS
from bench_tasks.traffic.dataset import Dataset
from bench_tasks.traffic.feed import ArrivalFeed, DatasetFeed
from bench_tasks.traffic.items import TrafficError
from bench_tasks.traffic.prefixes import SharedPrefixes
from bench_tasks.traffic.replay import (PHASE, TraceCursor, TracePlan, opened, ready, shareable_tokens,
                                        summary_text)
from bench_tasks.traffic.trace import Trace
from bench_tasks.traffic.vocabulary import TokenizerError, measure
from tests.test_traffic import sim_count
from tests.traffic_files import mooncake_rows, sharegpt, write_json_array, write_jsonl

MARK = "0123abcd"


@pytest.fixture(scope="module")
def vocabulary():
    return measure(sim_count)


def content(messages: list[dict]) -> str:
    return messages[0]["content"]


# -- a file's requests, handed to users --

def test_a_prompt_file_goes_out_in_order_each_request_opened_by_the_mark_and_its_item(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        {"prompt": "Why is the sky blue?", "max_tokens": 7},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
        {"prompt": "Third"}])
    feed = DatasetFeed(Dataset.open(str(path)), MARK)
    first, second = feed.next("a"), feed.next("b")
    assert (first.source, first.max_tokens, first.turn, first.shared_tokens) == (f"{path}:1", 7, None, None)
    assert content(first.messages) == f"{run_mark.opening(MARK, 'dataset', 0, 0)} Why is the sky blue?"
    assert second.source == f"{path}:2" and second.max_tokens is None
    assert content(second.messages) == f"{run_mark.opening(MARK, 'dataset', 0, 1)} Be brief."
    assert second.messages[1] == {"role": "user", "content": "Hi"}
    assert not feed.over
    feed.answered("a", "blue")
    feed.answered("b", None)
    third = feed.next("a")
    assert third.source == f"{path}:3" and feed.next("b") is None and not feed.over
    feed.answered("a", "ok")
    assert feed.over and feed.sent == 3
    other = DatasetFeed(Dataset.open(str(path)), "ffff0000").next("a")
    assert content(other.messages) != content(first.messages)  # another invocation: fresh from the bracket on
    # Another Locust process of the run sends the file too: its copy never reads the first process's cache.
    worker = DatasetFeed(Dataset.open(str(path)), MARK, process=1).next("a")
    assert content(worker.messages) == f"{run_mark.opening(MARK, 'dataset', 1, 0)} Why is the sky blue?"


def test_the_limit_caps_the_requests_sent(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": f"Question {n}"} for n in range(5)])
    feed = DatasetFeed(Dataset.open(str(path)), MARK, limit=2)
    asked = [feed.next("a"), feed.next("b"), feed.next("c")]
    assert asked[2] is None and [a.source for a in asked[:2]] == [f"{path}:1", f"{path}:2"]
    feed.answered("a", "x")
    assert not feed.over
    feed.answered("b", "y")
    assert feed.over


def test_conversations_are_held_by_their_user_turn_after_turn_with_the_models_answers(tmp_path):
    path = write_json_array(tmp_path / "c.json", [sharegpt(1, turns=2, system="Be kind."), sharegpt(2, turns=1)])
    feed = DatasetFeed(Dataset.open(str(path)), MARK)
    a1, b1 = feed.next("a"), feed.next("b")
    assert (a1.turn, b1.turn) == (1, 1) and a1.source == f"{path}:2" and a1.source != b1.source
    assert content(a1.messages).startswith(run_mark.opening(MARK, "dataset", 0, 0) + " Be kind.")
    feed.answered("a", "My own answer.")
    feed.answered("b", "Done.")
    a2 = feed.next("a")
    assert a2.turn == 2 and a2.source == a1.source
    assert a2.messages[:3] == [*a1.messages, {"role": "assistant", "content": "My own answer."}]
    assert feed.next("b") is None and not feed.over  # b's conversation is over, a's turn is in flight
    feed.answered("a", "Second.")
    assert feed.next("a") is None and feed.over and feed.sent == 3


def test_a_failed_turn_ends_its_conversation_unless_the_files_answers_are_sent(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [sharegpt(1, turns=3)])
    own = DatasetFeed(Dataset.open(str(path)), MARK)
    own.next("a")
    own.answered("a", None)
    assert own.next("a") is None and own.over and own.sent == 1
    files = DatasetFeed(Dataset.open(str(path)), MARK, file_answers=True)
    files.next("a")
    files.answered("a", None)
    second = files.next("a")
    assert second.turn == 2 and second.messages[1] == {"role": "assistant",
                                                       "content": "Answer 1 of conversation 1: Rayleigh scattering."}


def test_prefixes_open_each_item_and_say_what_it_shares(tmp_path, vocabulary):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": f"Question {n}"} for n in range(4)])
    prefixes = SharedPrefixes(vocabulary, MARK, prefix_tokens=40, groups=2)
    feed = DatasetFeed(Dataset.open(str(path)), MARK, prefixes=prefixes)
    asked = [feed.next(user) for user in "abcd"]
    assert [a.shared_tokens for a in asked] == [0, 0, 40, 40]
    assert content(asked[2].messages).startswith(prefixes.text(0) + "\n\n" + run_mark.opening(MARK, "dataset", 0, 2))
    assert content(asked[1].messages).startswith(prefixes.text(1) + "\n\n")
    conversations = write_jsonl(tmp_path / "c.jsonl", [sharegpt(1, turns=2)])
    prefixes = SharedPrefixes(vocabulary, MARK, prefix_tokens=40, groups=2)  # another run: nothing sent yet
    feed = DatasetFeed(Dataset.open(str(conversations)), MARK, prefixes=prefixes)
    first = feed.next("a")
    feed.answered("a", "Yes.")
    assert (first.shared_tokens, feed.next("a").shared_tokens) == (0, 40)  # the second turn resends its prefix


# -- a file's requests as the open loop's arrivals --

def test_each_part_of_an_open_loop_reads_the_file_from_its_start_and_again_when_it_runs_out(tmp_path, vocabulary):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": f"Question {n}", "max_tokens": 3 + n} for n in range(3)])
    prefixes = SharedPrefixes(vocabulary, MARK, prefix_tokens=40, groups=2)
    feed = ArrivalFeed(Dataset.open(str(path)), MARK, prefixes=prefixes)
    window = [feed.next("rate-4") for _ in range(7)]
    assert [a.source for a in window] == [f"{path}:{line}" for line in (1, 2, 3, 1, 2, 3, 1)]
    assert [a.max_tokens for a in window[:3]] == [3, 4, 5] and all(a.turn is None for a in window)
    # The prefixes are shared across the whole run: only each group's very first request sent it first.
    assert [a.shared_tokens for a in window] == [0, 0, 40, 40, 40, 40, 40]
    assert content(window[2].messages).startswith(prefixes.text(0) + "\n\n")
    settle = feed.next("settle-rate-8")
    assert settle.source == f"{path}:1" and settle.shared_tokens == 40  # a new part: from the file's start
    # Every sending of a line opens with a code of its own (part, pass, item): nothing is sent twice in a run.
    openings = [content(a.messages).split("\n\n", 1)[1].split("]")[0] for a in [*window, settle]]
    assert len(set(openings)) == len(openings)
    assert openings[3] == run_mark.opening(MARK, "dataset", "rate-4", 0, 2, 0).rstrip("]")
    other = ArrivalFeed(Dataset.open(str(path)), MARK, process=1).next("rate-4")
    assert content(other.messages) != content(window[0].messages).split("\n\n", 1)[1]  # another process's own


def test_an_arrival_sends_the_next_turn_of_the_conversation_whose_answer_came_back_first(tmp_path):
    path = write_json_array(tmp_path / "c.json", [sharegpt(n, turns=2) for n in range(3)])
    feed = ArrivalFeed(Dataset.open(str(path)), MARK)
    a1, b1 = feed.next("rate-2"), feed.next("rate-2")
    assert (a1.turn, b1.turn) == (1, 1) and a1.source != b1.source
    feed.answered(b1, "B's own answer.")
    feed.answered(a1, "A's own answer.")
    b2 = feed.next("rate-2")  # b's answer came back first: its second turn goes with the next arrival
    assert (b2.source, b2.turn) == (b1.source, 2)
    assert b2.messages[:2] == [*b1.messages, {"role": "assistant", "content": "B's own answer."}]
    assert feed.next("rate-2").source == a1.source
    c1 = feed.next("rate-2")  # no conversation waits for its next turn: the next one opens
    assert (c1.source, c1.turn) == (f"{path}:{sharegpt_lines(2)}", 1)
    feed.answered(c1, None)  # a failed turn ends a conversation of the model's own answers
    feed.answered(b2, "Done.")
    again = feed.next("rate-2")
    assert again.turn == 1 and again.source == a1.source  # the file ran out: read again, a new pass
    assert content(again.messages) != content(a1.messages)
    # The cache check: a turn may share what its conversation sent before.
    assert b2.judge is not None and b2.held is b1.held


def sharegpt_lines(number: int, turns: int = 2) -> int:
    """The line conversation ``number`` starts on in write_json_array's file of such conversations."""
    return 2 + number * (len(json.dumps(sharegpt(0, turns), indent=2).splitlines()))


def test_with_the_files_answers_a_failed_turn_goes_on(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [sharegpt(1, turns=2)])
    feed = ArrivalFeed(Dataset.open(str(path)), MARK, file_answers=True)
    first = feed.next("rate-1")
    feed.answered(first, None)
    second = feed.next("rate-1")
    assert second.turn == 2 and second.messages[1]["content"] == "Answer 1 of conversation 1: Rayleigh scattering."


# -- a trace replayed on its times --

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def trace_file(tmp_path, rows) -> Trace:
    return Trace.open(str(write_jsonl(tmp_path / "t.jsonl", rows)))


ROWS = [{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [0, 2]},
        {"timestamp": 3000, "input_length": 100, "output_length": 5, "hash_ids": [3]},
        {"timestamp": 7000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 2, 4]}]


def take_all(loop: OpenLoop, clock: Clock, until: float) -> list:
    jobs = []
    while clock.now < until:
        while (job := loop.take("rate", "u")) is not None:
            jobs.append((clock.now, job))
        clock.now += 0.01
    return jobs


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_a_traces_requests_are_due_at_its_timestamps_divided_by_the_speed(tmp_path, speed):
    clock = Clock()
    loop = OpenLoop(TracePlan(trace_file(tmp_path, ROWS), speed=speed), clock=clock, start_delay_s=1.0)
    start = 100.0 + 1.0 + loop.step.lead_s
    jobs = take_all(loop, clock, start + 7)
    assert [job.index for _t, job in jobs] == [1, 2, 3, 4]
    assert [job.release_at - start for _t, job in jobs] == pytest.approx([0, 0, 2 / speed, 6 / speed])
    assert all(job.phase == PHASE and job.offered_rps is None for _t, job in jobs)
    assert all(job.release_at - loop.step.lead_s - 0.011 <= taken <= job.release_at for taken, job in jobs)
    assert not loop.finished
    for _t, job in jobs:
        loop.done(job)
    assert loop.finished


def test_requests_caps_the_replay_and_a_job_given_back_goes_out_again(tmp_path):
    clock = Clock()
    loop = OpenLoop(TracePlan(trace_file(tmp_path, ROWS), requests=3), clock=clock)
    first = loop.take("rate", "u")
    loop.give_back(first)
    assert loop.step.outstanding[WINDOW] == 0
    jobs = [job for _t, job in take_all(loop, clock, 104)]
    assert sorted(job.index for job in jobs) == [1, 2, 3] and first in jobs
    for job in jobs:
        loop.done(job)
    assert loop.finished


def test_a_plan_sizes_its_pool_by_the_traces_mean_rate(tmp_path):
    plan = TracePlan(trace_file(tmp_path, ROWS), speed=2.0)
    assert plan.mean_rps == pytest.approx(3 / 3.0)  # 3 gaps over 6 s, twice as fast
    assert TracePlan(trace_file(tmp_path, ROWS[:2])).mean_rps == pytest.approx(2.0)  # all at once: as many
    assert TracePlan(trace_file(tmp_path, ROWS), requests=3).mean_rps == pytest.approx(2 / 2.0)  # its first 3: 2 s


def test_a_trace_handed_with_its_summary_is_not_read_again_but_still_checked_as_it_is_replayed(tmp_path):
    trace = trace_file(tmp_path, ROWS)
    again = opened(trace.path, trace.block_tokens, summary_text(trace))
    assert again.summary == trace.summary and list(again.requests()) == list(trace.requests())
    write_jsonl(tmp_path / "t.jsonl", ROWS[:3])  # changed since its check
    with pytest.raises(TrafficError, match="it holds 3 requests, not the 4 it held"):
        list(again.requests())


def test_the_cursor_gives_each_jobs_request_read_forward_once(tmp_path):
    trace = trace_file(tmp_path, ROWS)
    cursor = TraceCursor(trace.requests(), keep=1)
    assert cursor.at(2).source.endswith(":2")
    assert cursor.at(4).shared_tokens == 1024  # 1 and 3 read past: 3 kept, 1 forgotten (keep=1)
    assert cursor.at(3).source.endswith(":3")
    with pytest.raises(LookupError, match="read past 1 requests ago"):
        cursor.at(1)
    with pytest.raises(LookupError, match="no request 5"):
        cursor.at(5)


def test_ready_measures_the_tokenizer_and_checks_a_sample(tmp_path, vocabulary):
    trace = trace_file(tmp_path, ROWS)
    prompts = ready(trace, sim_count, MARK)
    request = next(trace.requests())
    assert sim_count(prompts.messages(request)) == 600
    assert shareable_tokens(request, prompts.vocabulary) == vocabulary.overhead_tokens + 2
    with pytest.raises(TokenizerError, match=r"t.jsonl:1: 601 tokens instead of 600"):
        ready(trace, Miscounting(), MARK)
    short = trace_file(tmp_path, [ROWS[0], {**ROWS[2], "input_length": 3}, {**ROWS[2], "input_length": 5}])
    with pytest.raises(TrafficError) as error:
        ready(short, sim_count, MARK)
    assert [p.split(": ")[0].rsplit(":", 1)[1] for p in error.value.problems] == ["2", "3"]


class Miscounting:
    """The simulated engine's count, one more for prompts of 500 to 4000 tokens: a trace's here, not the
    vocabulary's checks (short groups, and all pairs of its words: 4097 of them)."""

    def __call__(self, messages):
        found = sim_count(messages)
        return found + 1 if 500 < found < 4000 else found


def test_a_traces_sample_includes_its_longest_prompt(tmp_path):
    rows = list(mooncake_rows(40, seed=5, block_tokens=64, max_input=900))
    trace = Trace.open(str(write_jsonl(tmp_path / "t.jsonl", rows)), block_tokens=64)
    seen = []
    ready(trace, lambda messages: seen.append(messages) or sim_count(messages), MARK)
    longest = max(row["input_length"] for row in rows)
    assert longest in {sim_count(m) for m in seen}


# -- what the report sets beside the engine's cache --

def test_reuse_sets_the_shared_tokens_beside_the_cached_ones():
    rows = [{"phase": "trace", "prompt_tokens": 1000, "shared_tokens": 0, "cached_tokens": 10, "flags": ""},
            {"phase": "trace", "prompt_tokens": 1000, "shared_tokens": 512, "cached_tokens": 500, "flags": ""},
            {"phase": "trace", "prompt_tokens": 2000, "shared_tokens": 1024, "cached_tokens": None, "flags": ""},
            {"phase": "trace", "prompt_tokens": 900, "shared_tokens": 512, "cached_tokens": 900, "flags": "cache_hit"},
            {"phase": "trace", "prompt_tokens": 900, "shared_tokens": 512, "cached_tokens": 900, "ok": False},
            {"phase": "chat", "prompt_tokens": 40, "shared_tokens": None, "cached_tokens": 3, "flags": ""}]
    records = pd.DataFrame([{**dict.fromkeys(COLUMNS), "scenario": "rate", "ok": True, **row} for row in rows])
    table = traffic.reuse(records)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["requests"], row["prompt_tokens"], row["shared_tokens"], row["cached_requests"]) == (4, 4900, 2048, 3)
    assert row["cached_tokens"] == 1410 and row["cached_share"] == pytest.approx(1410 / 2900)
    assert row["cached_of_shared"] == pytest.approx(1410 / 1024) and row["cache_hits"] == 1
    assert row["shared_share"] == pytest.approx(2048 / 4900)
    long = traffic.tables(records)
    assert set(long["metric"]) >= {"shared_tokens", "cached_tokens", "cached_of_shared"}
    assert "trace" in traffic.format_reuse(table) and traffic.reuse(records[records["phase"] == "chat"]).empty


def test_a_file_read_again_in_a_phase_by_one_process_is_said_once():
    def row(phase, line, pid=1, turn=None):
        return {**dict.fromkeys(COLUMNS), "scenario": "rate", "ok": True, "phase": phase, "client_host": "h",
                "client_pid": pid, "source": f"f.jsonl:{line}", "turn": turn}

    once = [row("rate-4", 1), row("rate-4", 2), row("settle-rate-4", 1), row("rate-4", 1, pid=2),  # another process
            row("rate-8", 1, turn=1), row("rate-8", 1, turn=2), {**row("chat", 0), "source": ""}, row("chat", 1)]
    assert traffic.reread(pd.DataFrame(once)) == []
    again = pd.DataFrame([*once, row("rate-8", 1, turn=1), row("rate-8", 1, turn=1), row("rate-4", 2)])
    assert traffic.reread(again) == ["the file ran out and was read again from its start in rate-4 (2 times), rate-8 "
                                     "(3 times): its requests were sent more than once (each time opened afresh, so "
                                     "none was served from an earlier sending's cache)"]
