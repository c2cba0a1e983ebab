"""Stalls, their causes and the wait's parts held against the simulated engine's truth.

In batched prefill the simulated engine reads a prompt as llama.cpp does (chunks of n_batch tokens, every
decoding stream paused during each) and logs every true pause of every stream with the request that
caused it; it also logs when each request took its slot and when its first answer token (after the
reasoning) was written. Engine and client share the machine's monotonic clock.
"""

import pandas as pd
import pytest

from analysis import stalls
from bench_tasks.stream import STALLS_KEPT, parse_stalls
from tests.conftest import load_records, read_truth, run_cli, split_cores

pytestmark = pytest.mark.alone  # its figures are held to a truth: the machine to itself (tests/machine.py)

# A 2k paste is read in chunks of 1021 tokens (1024 less the 3 decoding chats) at 4000 tok/s: 255 ms
# pauses; a chat decodes at 50 tok/s (20 ms a token), so its threshold is the 0.1 s floor.
PASTE_SIM = dict(prefill_mode="batched", n_batch=1024, prefill_tps=4000.0, decode_tps=50.0, decode_slowdown=0.0,
                 slots=6)
MATCH_S = 0.005  # a client stall and a true pause are the same one when their starts are this close


def true_pauses(record, truth_row) -> list[dict]:
    """The truth's pauses of this stream that the client's threshold calls stalls."""
    return [p for p in truth_row["pauses"] if pause_s(p) > record["stall_threshold_s"]]


def pause_s(pause: dict) -> float:
    return pause["t_end"] - pause["t_start"]


def kept_length(kept: list[tuple[float, float]], pause: dict) -> float | None:
    """The length of the client's kept stall that starts with this true pause, if it kept one."""
    return next((length for start, length in kept if abs(start - pause["t_start"]) <= MATCH_S), None)


# A paste run of 3 chats and 3 pastes (11 s): the developer's loop keeps the faster truth tests of this file
# (ttfo_s, slot_wait_s); the whole suite runs this one.
@pytest.mark.slow
def test_the_stalls_are_the_engines_true_pauses_and_their_causes_the_true_causes(start_sim, tmp_path):
    sim = start_sim(**PASTE_SIM)
    out = tmp_path / "run"
    result = run_cli("run", "paste", "--host", sim.url, "--users", "3", "--size", "2k", "--requests", "3",
                     "--max-tokens", "150", "--ignore-eos", "--out", str(out), cpus=split_cores(sim))
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out)
    measured = records[(records["scenario"] != "warmup") & records["ok"]]
    assert set(measured["phase"]) == {"paste-chat", "paste-2k"} and (measured["phase"] == "paste-2k").sum() == 3
    truth = read_truth(sim.truth_log).set_index("request_id")
    expected, counts = [], []
    for _, record in measured.iterrows():
        above = true_pauses(record, truth.loc[record["request_id"]])
        counts.append((record["stall_count"], len(above)))
        kept = [(record["t_send"] + start, length) for start, length in parse_stalls(record["stalls"])]
        longest = sorted(above, key=pause_s, reverse=True)
        chosen, spare = longest[:STALLS_KEPT], longest[STALLS_KEPT:]
        for pause in chosen:
            if kept_length(kept, pause) is None:
                # A stream paused by 3 pastes pauses 6 times, each ~275 ms within a millisecond: the client's
                # 5 longest may hold, in place of this one, a pause as long within its error.
                twin = next((p for p in spare if abs(pause_s(p) - pause_s(pause)) <= MATCH_S
                             and kept_length(kept, p) is not None), None)
                if twin is not None:
                    spare.remove(twin)
                    pause = twin
            length = kept_length(kept, pause)
            expected.append({"request_id": record["request_id"], "t_start": pause["t_start"],
                             "length_s": pause_s(pause), "cause": pause["cause_request_id"],
                             "error_s": None if length is None else length - pause_s(pause)})
    expected = pd.DataFrame(expected)
    assert len(expected) >= 6, "the pastes should have paused the chats' answers"
    found = expected["error_s"].notna()
    error_ms = expected["error_s"].abs() * 1000
    # Every pause above the threshold is counted; the longest STALLS_KEPT of each stream kept, at their times.
    assert all(mine == true for mine, true in counts), counts
    assert found.mean() >= 0.95, expected[~found]
    assert error_ms.max() <= MATCH_S * 1000, expected.sort_values("error_s")
    # The cause: stalls.csv's, against the truth's, for each stall kept.
    table = pd.read_csv(out / "stalls.csv", keep_default_na=False)
    sent = measured.set_index("request_id")["t_send"]
    table = table.assign(t_start=table["request_id"].map(sent) + table["stall_start_s"])
    agree = []
    for _, stall in table.iterrows():
        same = expected[(expected["request_id"] == stall["request_id"])
                        & ((expected["t_start"] - stall["t_start"]).abs() <= MATCH_S)]
        agree += [same.iloc[0]["cause"] == stall["cause_request_id"]] if len(same) else []
    print(f"true pauses above the threshold: {len(expected)} expected kept, found {found.mean():.1%}; |length error| "
          f"median {error_ms.median():.3f} ms, max {error_ms.max():.3f} ms; causes agree {sum(agree)} of {len(agree)}")
    assert len(agree) == len(table) and sum(agree) >= 0.95 * len(agree)
    chats = table[table["phase"] == "paste-chat"]
    assert len(chats) and (chats["cause_phase"] == "paste-2k").all() and set(table["clock"]) == {stalls.PERF_CLOCK}
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert measured["ttfo_s"].notna().all() and measured["rtt_s"].notna().all()


def test_the_first_answer_token_after_the_reasoning_and_the_reasoning_tokens_match_the_truth(start_sim, tmp_path):
    sim = start_sim(reasoning_tokens=20, decode_tps=100.0, slots=4, answer_tokens_min=30, answer_tokens_max=60)
    for thinking in ("on", "off"):
        out = tmp_path / thinking
        result = run_cli("run", "chat", "--host", sim.url, "--users", "2", "--requests", "4", "--thinking", thinking,
                         "--out", str(out), cpus=split_cores(sim))
        assert result.returncode == 0, result.stderr[-3000:]
        measured = load_records(out).query("scenario == 'chat'")
        truth = read_truth(sim.truth_log).set_index("request_id").add_suffix("_true")
        joined = measured.set_index("request_id").join(truth, how="inner")
        assert len(joined) == 4 and joined["ok"].all()
        error_ms = (joined["t_send"] + joined["ttfo_s"] - joined["t_first_answer_token_true"]).abs() * 1000
        print(f"thinking {thinking}: |ttfo error| median {error_ms.median():.3f} ms, max {error_ms.max():.3f} ms")
        assert error_ms.median() <= 2.0
        if thinking == "on":
            assert (joined["reasoning_tokens"] == joined["reasoning_tokens_true"]).all()
            assert (joined["reasoning_tokens"] == 20).all() and (joined["ttfo_s"] > joined["ttft_s"]).all()
        else:  # no reasoning: the server says nothing of it (missing, not 0), and the answer is the first token
            assert joined["reasoning_tokens"].isna().all() and (joined["reasoning_tokens_true"] == 0).all()
            assert (joined["ttfo_s"] == joined["ttft_s"]).all()


def test_the_wait_for_a_slot_matches_the_engines_admission(start_sim, tmp_path):
    sim = start_sim(slots=1, decode_tps=200.0, answer_tokens_min=40, answer_tokens_max=40)
    out = tmp_path / "run"
    result = run_cli("run", "chat", "--host", sim.url, "--users", "3", "--requests", "6", "--out", str(out),
                     cpus=split_cores(sim))
    assert result.returncode == 0, result.stderr[-3000:]
    measured = load_records(out).query("scenario == 'chat'")
    truth = read_truth(sim.truth_log).set_index("request_id").add_suffix("_true")
    joined = measured.set_index("request_id").join(truth, how="inner")
    # From the send to the engine taking it into a slot: its queue, and what the server did with the
    # request before (reading it took the busy engine up to a few ms here), which no network carried.
    waited = joined["t_admitted_true"] - joined["t_send"]
    error_s = joined["slot_wait_s"] - waited
    # The figure's error is the first token's: how much later the client saw it than the engine wrote it
    # (its TTFT error), less the round trip. Each request's is exactly that, whatever the host took from
    # either process; and the typical one is as small as TTFT's (test_accuracy_sim holds its median).
    seen_late_s = joined["t_send"] + joined["ttft_s"] - joined["t_first_token_true"]
    print(f"slot wait: true {waited.min():.3f}-{waited.max():.3f} s; |error| median "
          f"{error_s.abs().median() * 1000:.3f} ms, max {error_s.abs().max() * 1000:.3f} ms; first token seen late "
          f"{seen_late_s.min() * 1000:.3f}-{seen_late_s.max() * 1000:.3f} ms; rtt_s "
          f"{joined['rtt_s'].min() * 1e6:.0f}-{joined['rtt_s'].max() * 1e6:.0f} us")
    assert waited.max() > 0.1  # one slot, three users: they queue
    assert (joined["rtt_s"] > 0).all() and (error_s - (seen_late_s - joined["rtt_s"])).abs().max() < 1e-6
    assert error_s.abs().median() <= 0.002
