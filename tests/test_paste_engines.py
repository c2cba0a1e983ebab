"""`llm-bench run paste` against llama.cpp with SmolLM2 (several slots, one compute thread).

llama.cpp reads a prompt in batches of up to n_batch tokens between the decode steps of its other
slots: while a pasted document is read, every streaming answer stops. Here a 512-token paste is read in
one batch of 3 to 8 s (60 to 160 prompt tokens a second on one thread, as the machine's other work allows),
and the chats' streams show it.
"""

import json

import pandas as pd
import pytest

from tests.conftest import load_records, run_cli

pytestmark = pytest.mark.alone  # its figures are held to a truth: the machine to itself (tests/machine.py)

LONG_S = 1.0  # a chat question's own prompt pauses the others 0.3-0.65 s; a 512-token paste, seconds


@pytest.mark.engines
def test_a_paste_pauses_the_chatting_streams_and_is_named_as_their_cause(smollm2_server, tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", "paste", "--host", smollm2_server.url, "--users", "2", "--size", "512", "--requests", "2",
                     "--max-tokens", "96", "--ignore-eos", "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    records = load_records(out)
    measured = records[records["scenario"] != "warmup"]
    assert measured["ok"].all() and (measured["phase"] == "paste-512").sum() == 2
    assert measured["ttfo_s"].notna().all() and (measured["ttfo_s"] == measured["ttft_s"]).all()  # no reasoning
    assert measured["rtt_s"].notna().all() and measured["slot_wait_s"].notna().all()
    table = pd.read_csv(out / "stalls.csv", keep_default_na=False)
    chats = table[(table["phase"] == "paste-chat") & (table["stall_s"] > LONG_S)]
    print(table[["phase", "user", "stall_at_s", "stall_start_s", "stall_s", "cause_phase", "cause_user",
                 "cause_overlap_s", "readers"]].to_string())
    # Each paste was sent while an answer streamed: each paused one at least, and was named for it.
    assert (chats["cause_phase"] == "paste-512").all() and chats["cause_request_id"].nunique() == 2
    pastes = measured[measured["phase"] == "paste-512"].set_index("request_id")
    for _, stall in chats.iterrows():  # as long as the paste's prompt, within a decode step or two
        assert stall["stall_s"] == pytest.approx(pastes.loc[stall["cause_request_id"], "engine_prompt_ms"] / 1000,
                                                 abs=0.25)
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG" and "timeline.png" in (out / "report.html").read_text()
    readings = [json.loads(line) for line in (out / "engine_series.jsonl").read_text().splitlines()]
    assert len(readings) >= 5 and max(r["requests_running"] for r in readings) >= 2
    assert all("kv_cache_usage" not in r for r in readings)  # this llama.cpp serves no KV cache gauge
