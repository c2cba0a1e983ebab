"""Every request's cached tokens held against what it may share: per phase in the report (analysis.cache_hits),
and against the simulated engine's truth, whose prefix cache keeps every token it read (blocks of one token, as
llama.cpp's slots keep them): two runs one after the other share nothing, a repeat on purpose is served from the
cache and flagged request by request exactly where the engine's truth says so."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis import cache_hits, study
from tests.conftest import load_records, read_truth, run_cli
from tests.test_analysis import frame, figure

NAN = float("nan")


def test_per_phase_the_share_of_requests_and_of_tokens_served_beyond_their_share():
    records = frame({"phase": "chat", "scenario": "chat", "prompt_tokens": 40, "cached_tokens": 8, "shareable_tokens": 17},
                    {"phase": "chat", "scenario": "chat", "prompt_tokens": 40, "cached_tokens": 39,
                     "shareable_tokens": 17, "flags": "cache_hit"},
                    {"phase": "chat", "scenario": "chat", "ok": False, "error": "timeout"},  # not counted
                    {"phase": "prompt-1k", "scenario": "prompt", "prompt_tokens": 1024, "cached_tokens": 0,
                     "shareable_tokens": 17})
    table = cache_hits.checks(records).set_index("phase")
    assert table.loc["chat", ["requests", "checked", "hits", "beyond_tokens", "prompt_tokens"]].tolist() == \
        [2, 2, 1, 22.0, 80.0]
    assert table.loc["chat", "hit_share"] == 0.5 and table.loc["chat", "beyond_share"] == 22 / 80
    assert table.loc["prompt-1k", "hits"] == 0
    notes = study.warnings(records)
    assert ("chat: 1 of 2 requests (50%), 22 of their 80 prompt tokens (28%) were served from a cache beyond what they "
            "may share") in " ".join(notes)
    assert not any(note.startswith("prompt-1k") for note in notes)


def test_a_phase_whose_cached_tokens_were_not_reported_could_not_be_checked_never_zero_hits():
    records = frame({"phase": "chat", "scenario": "chat", "prompt_tokens": 40, "shareable_tokens": 17},
                    {"phase": "burst-4", "scenario": "burst", "prompt_tokens": 40, "cached_tokens": 30},
                    {"phase": "agent", "scenario": "agent", "prompt_tokens": 40, "cached_tokens": 3,
                     "shareable_tokens": 17})
    notes = study.warnings(records)
    assert "chat: the server reported no cached tokens, so whether these requests were served from a cache could " \
           "not be checked." in notes
    assert any(n.startswith("burst-4: what these requests may share with the cache was not measured") for n in notes)
    long = study.requests_table(records)
    assert pd.isna(figure(long, "requests", "chat", "cache_hit")["median"])  # unknown, not 0
    assert pd.isna(figure(long, "requests", "burst-4", "cache_hit")["median"])
    assert figure(long, "requests", "agent", "cache_hit")["median"] == 0


def test_a_repeat_on_purpose_is_said_to_be_meant_to_be_served_from_the_cache():
    records = frame({"phase": "chat", "scenario": "chat", "prompt_tokens": 40, "cached_tokens": 39,
                     "shareable_tokens": 17, "flags": "cache_hit", "run_mark": "3f9a0c1e", "mark_repeated": True})
    notes = study.warnings(records)
    assert notes[0].startswith("This run repeated the texts of run mark 3f9a0c1e on purpose (--repeat-mark): it was "
                               "meant to be served from the server's cache")
    assert notes[1].endswith("as the repeat meant.")


def measured(out) -> pd.DataFrame:
    return load_records(out).query("scenario != 'warmup'")


def against_truth(out, truth: pd.DataFrame) -> pd.DataFrame:
    """Each record of the run beside the engine's own count of the tokens its cache served it."""
    records = load_records(out)
    joined = records.merge(truth[["request_id", "cached_tokens"]], on="request_id", suffixes=("", "_truth"))
    assert len(joined) == len(records) and records["ok"].all()
    assert (joined["cached_tokens"] == joined["cached_tokens_truth"]).all()
    return joined


def flagged(records: pd.DataFrame) -> pd.Series:
    return records["flags"].fillna("").str.contains("cache_hit")


def test_run_chat_twice_shares_nothing_and_a_repeat_is_flagged_where_the_engine_served_it(start_sim, tmp_path):
    sim = start_sim(cache_block_tokens=1, decode_tps=1000.0)
    runs = {}
    for name, extra in (("first", ()), ("second", ()), ("repeat", None)):
        if extra is None:
            extra = ("--repeat-mark", json.loads((tmp_path / "first" / "settings.json").read_text())["run_mark"])
        runs[name] = run_cli("run", "chat", "--host", sim.url, "--requests", "3", "--max-tokens", "8",
                             "--out", str(tmp_path / name), *extra)
        assert runs[name].returncode == 0, runs[name].stderr[-3000:]
    truth = read_truth(sim.truth_log)
    first, second, repeat = (against_truth(tmp_path / name, truth) for name in ("first", "second", "repeat"))
    marks = [json.loads((tmp_path / n / "settings.json").read_text())["run_mark"] for n in ("first", "second")]
    assert marks[0] != marks[1] and set(first["run_mark"]) == {marks[0]} and set(repeat["run_mark"]) == {marks[0]}
    assert not first["mark_repeated"].any() and repeat["mark_repeated"].all()
    for fresh in (first, second):  # the template's opening and the mark at most: nothing from another run
        assert (fresh["cached_tokens"] <= fresh["shareable_tokens"]).all() and not flagged(fresh).any()
    assert second["cached_tokens"].max() <= first["cached_tokens"].max()
    chat = repeat[repeat["scenario"] == "chat"]
    assert (chat["cached_tokens"] == chat["prompt_tokens"] - 1).all()  # all but the token the engine computes
    assert (flagged(repeat) == (repeat["cached_tokens_truth"] > repeat["shareable_tokens"])).all()
    assert "run mark " in runs["first"].stdout and f"--repeat-mark {marks[0]}" in runs["first"].stdout
    assert "warning: This run repeated the texts of run mark" in runs["repeat"].stdout
    assert "warning: chat: 3 of 3 requests (100%)" in runs["repeat"].stdout
    assert not [line for line in runs["second"].stdout.splitlines() if line.startswith("warning:") and "cache" in line]


@pytest.mark.slow  # three suites: 40 s
def test_every_workload_of_a_second_suite_is_as_fresh_as_the_first_and_a_repeat_is_caught(start_sim, tmp_path):
    sim = start_sim(cache_block_tokens=1, decode_tps=1000.0)
    suite = ("quick", "--host", sim.url, "--runs", "2", "--sizes", "1k", "--needle-sizes", "1k", "--bursts", "1,3")
    first = run_cli(*suite, "--out", str(tmp_path / "first"))
    second = run_cli(*suite, "--out", str(tmp_path / "second"))
    mark = json.loads((tmp_path / "first" / "settings.json").read_text())["run_mark"]
    repeat = run_cli(*suite, "--repeat-mark", mark, "--out", str(tmp_path / "repeat"))
    for result in (first, second, repeat):
        assert result.returncode == 0, result.stderr[-3000:]
    truth = read_truth(sim.truth_log)
    runs = {name: against_truth(tmp_path / name, truth) for name in ("first", "second", "repeat")}
    for name in ("first", "second"):
        fresh = runs[name]
        assert not flagged(fresh).any() and (fresh["cached_tokens"] <= fresh["shareable_tokens"]).all(), name
    # Phase by phase the second run was served from the cache no more than the first (conversations share their
    # own turns: the agent's cache is its own history, turn by turn, the same in both).
    for phase, group in runs["second"].query("scenario != 'warmup'").groupby("phase"):
        before = runs["first"][runs["first"]["phase"] == phase]
        if phase != "agent":
            assert group["cached_tokens"].max() <= before["cached_tokens"].max(), phase
    again = runs["repeat"]
    assert (flagged(again) == (again["cached_tokens_truth"] > again["shareable_tokens"])).all()
    assert flagged(again[again["scenario"] != "warmup"]).all()  # every measured request: the same text again
    summary = (tmp_path / "repeat" / "summary.md").read_text()
    assert "meant to be served from the server's cache" in summary and "as the repeat meant" in summary
    assert "meant to be served" in (tmp_path / "repeat" / "report.html").read_text()
    assert "served from a cache" not in (tmp_path / "second" / "summary.md").read_text()
