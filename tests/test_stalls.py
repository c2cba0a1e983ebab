"""Stalls attributed to the prompts read while they happened: analysis.stalls on hand-made records."""

import pandas as pd
import pytest

from analysis import load, stalls
from bench_tasks.record import COLUMNS


def records(*rows: dict) -> pd.DataFrame:
    base = {"scenario": "paste", "ok": True, "setup": "s", "client_host": "laptop", "t_start": 1.7e9}
    return load.typed(pd.DataFrame([{**base, **row} for row in rows], columns=list(COLUMNS)))


def chat(user, t_send, ttft_s, e2e_s, stall_list="", **more):
    return {"phase": "paste-chat", "user": user, "request_id": f"chat-{user}", "t_send": t_send, "ttft_s": ttft_s,
            "e2e_s": e2e_s, "decode_s": e2e_s - ttft_s, "prompt_tokens": 20, "cached_tokens": 0, "stalls": stall_list,
            "stall_count": stall_list.count(":"), "stall_s": sum(float(p.split(":")[1]) for p in stall_list.split(";") if p),
            **more}


def test_the_cause_is_the_prompt_that_read_most_during_the_stall_not_the_one_waiting_behind_it():
    found = stalls.stalls(records(
        chat("a", 100.0, 0.1, 5.0, "1.0000:0.5000;3.0000:0.2500"),  # stalls at 101.0-101.5 and 103.0-103.25
        {"phase": "paste-4k", "user": "p", "request_id": "paste-1", "t_send": 100.8, "ttft_s": 2.0, "e2e_s": 2.5,
         "prompt_tokens": 4000, "cached_tokens": 0},
        # A question sent during the paste waits behind it in the same batch: it overlaps as much.
        chat("b", 100.9, 1.9, 4.0, "", prompt_tokens=20),
    ))
    assert list(found.columns) == stalls.STALL_COLUMNS and len(found) == 2
    first = found.set_index("stall_start_s").loc[1.0]
    assert first["cause_request_id"] == "paste-1" and first["cause_phase"] == "paste-4k" and first["readers"] == 2
    assert first["cause_overlap_s"] == pytest.approx(0.5) and first["cause_tokens"] == pytest.approx(0.5 * 4000 / 2.0)
    assert first["stall_at_s"] == pytest.approx(1.0) and first["clock"] == stalls.PERF_CLOCK
    later = found.set_index("stall_start_s").loc[3.0]  # nobody was reading a prompt then
    assert later["cause_request_id"] == "" and later["readers"] == 0 and pd.isna(later["cause_overlap_s"])
    assert found["stall_s"].tolist() == [0.5, 0.25]  # longest first


def test_the_engines_prompt_time_leaves_a_slot_wait_out_of_the_reading():
    # The paste waited 1.5 s for a slot (prompt_ms 500 of its 2 s): it read nothing during the stall.
    found = stalls.stalls(records(
        chat("a", 100.0, 0.1, 5.0, "1.0000:0.5000"),
        {"phase": "paste-4k", "user": "p", "request_id": "paste-1", "t_send": 100.8, "ttft_s": 2.0, "e2e_s": 2.5,
         "prompt_tokens": 4000, "engine_prompt_ms": 500.0},
        chat("b", 100.9, 0.9, 3.0, "")))
    assert found.loc[0, "cause_request_id"] == "chat-b" and found.loc[0, "readers"] == 1


def test_several_laptops_share_the_masters_clock_or_fall_back_to_wall_time():
    rows = [chat("a", 5.0, 0.1, 5.0, "1.0000:0.5000", client_host="one", clock_offset_s=95.0, t_start=1000.0),
            {"phase": "paste-4k", "user": "p", "client_host": "two", "request_id": "paste-1", "t_send": 50.8,
             "clock_offset_s": 50.0, "t_start": 1000.8, "ttft_s": 2.0, "e2e_s": 2.5, "prompt_tokens": 4000}]
    found = stalls.stalls(records(*rows))
    assert found.loc[0, "clock"] == stalls.MASTER_CLOCK and found.loc[0, "cause_request_id"] == "paste-1"
    rows[1]["clock_offset_s"] = None  # a record without an offset: wall time for all
    rows[1]["t_start"] = 1003.0  # and by the wall clocks the paste came after the stall
    found = stalls.stalls(records(*rows))
    assert found.loc[0, "clock"] == stalls.WALL_CLOCK and found.loc[0, "cause_request_id"] == ""
    assert "wall time" in stalls.sentence(found, records(*rows))


def test_the_share_of_decode_time_lost_per_phase():
    table = stalls.stall_table(records(chat("a", 100.0, 0.1, 5.1, "1.0000:0.5000;2.0000:0.5000"),
                                       chat("b", 100.0, 0.1, 3.1, ""),
                                       {"phase": "paste-4k", "user": "p", "t_send": 1.0, "ttft_s": 2.0, "e2e_s": 2.5,
                                        "decode_s": 0.5, "stall_count": 0, "stall_s": 0.0}))
    figures = table.set_index(["row", "metric"])["median"]
    assert figures[("paste-chat", "stalled_requests")] == 1 and figures[("paste-chat", "stalls")] == 2
    assert figures[("paste-chat", "stall_share")] == pytest.approx(1.0 / 8.0)
    assert figures[("paste-4k", "stall_share")] == 0.0
    assert stalls.stall_table(records(chat("a", 1.0, 0.1, 1.0, "", stall_count=None))).empty


def test_a_run_whose_streams_never_paused_says_so_in_words():
    rows = records(chat("a", 100.0, 0.1, 5.0, ""), chat("b", 100.5, 0.1, 5.0, ""))
    found = stalls.stalls(rows)
    assert found.empty
    assert stalls.sentence(found, rows) == (
        "No stall: no answer's stream paused longer than 3 times its median gap and 0.1 s.")
