"""The selftest runs end to end at a small size, and its figures are sane (not a speed assertion)."""

import pandas as pd
import pytest

from bench_tasks import chat, engine
from bench_tasks.payload import chat_body, encode
from llm_bench import bare_reader
from llm_bench.selftest import NO_STAMPS, TABLE_COLUMNS, accuracy, bare_accuracy, verdict
from simengine import SimConfig
from tests.conftest import read_truth, run_cli


@pytest.mark.slow  # three workloads and the bare reader: 5.5 s
@pytest.mark.alone  # engine and client pinned a core each, as the selftest does
def test_small_selftest_prints_a_complete_table_with_bounded_errors(tmp_path):
    result = run_cli("selftest", "--small", "--out", str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TTFT err p50 ms" in result.stdout and "vs bare" in result.stdout and "trust" in result.stdout
    table = pd.read_csv(tmp_path / "selftest.csv")
    assert list(table.columns) == TABLE_COLUMNS and len(table) == 3
    assert table["workload"].str.endswith(NO_STAMPS).sum() == 1  # the fallback of laptops without kernel stamps
    assert table.notna().all().all()
    ratio = table["cpu_us_per_token"] / table["bare_cpu_us_per_token"]
    assert list(table["cpu_vs_bare"]) == pytest.approx(list(ratio))
    # Light load: the client's errors are small (generous bounds: CI machines are shared).
    assert (table["ttft_err_p50_ms"].abs() < 20).all()
    assert (table["decode_err_p50_pct"].abs() < 2).all()
    assert (table["delivered_share"] > 0.9).all() and (table["delivered_share"] < 1.05).all()


def test_bare_reader_counts_every_content_event_the_engine_sent(start_sim):
    # Events of several tokens; streams cut into fragments at any byte (split) and streams held and sent
    # whole (buffered): every content event counted once, per request.
    sim = start_sim(slots=8, decode_tps=400.0, decode_slowdown=0.0, tokens_per_event=3, answer_tokens_min=60,
                    answer_tokens_max=60, fault_rate=1.0, fault_kinds="split,buffered")
    body = chat_body(SimConfig().model, chat.messages(chat.QUESTIONS[0], ""), 60, ignore_eos=True,
                     extras=engine.profile("sim").extras())
    result = bare_reader.run(sim.url, encode(body), streams=4, requests_per_stream=3, timeout_s=60)
    requests = pd.DataFrame(result["requests"]).set_index("request_id")
    truth = read_truth(sim.truth_log).set_index("request_id")
    assert len(requests) == 12 and "error" not in requests
    assert (requests["content_events"] == 20).all()  # 60 tokens, 3 per event
    assert (truth.loc[requests.index, "completion_tokens"] == 60).all()
    assert set(truth["fault"]) == {"split", "buffered"}
    assert (requests["t_first_content"] > requests["t_send"]).all() and result["cpu_s"] > 0


def test_accuracy_joins_on_request_id_and_computes_each_figure():
    records = pd.DataFrame({
        "scenario": ["chat", "chat", "warmup"], "ok": [True, True, True], "request_id": ["a", "b", "w"],
        "ttft_s": [0.105, 0.210, 0.01], "decode_tps": [99.0, 101.0, None], "t_send": [10.0, 10.5, 9.0],
        "e2e_s": [2.0, 2.0, 0.1], "completion_tokens": [100, 100, 8], "flags": ["", "client_saturated", ""],
    })
    # The engine read each request 1 ms after it was sent and wrote its first token 99 / 199 ms later.
    truth = pd.DataFrame({"request_id": ["a", "b", "w"], "ttft_s": [0.099, 0.199, 0.01],
                          "decode_tps": [100.0, 100.0, None], "t_arrival": [10.001, 10.501, 9.0],
                          "t_first_token": [10.100, 10.700, 9.01],
                          "t_last_token": [12.0, 12.5, 9.1], "completion_tokens": [100, 100, 8]})
    row = accuracy(records, truth, {"run_cpu_s": 0.0208, "run_wall_s": 3.0})
    assert row["requests"] == 2
    # The client's own error: its stamps (10.105, 10.710) against the writes; the read lag apart.
    assert row["ttft_err_p50_ms"] == pytest.approx(7.5) and row["engine_read_lag_p50_ms"] == pytest.approx(1.0)
    assert row["decode_err_p50_pct"] == pytest.approx(0.0)
    assert row["delivered_tps"] == pytest.approx(200 / 2.5)
    assert row["true_tps"] == pytest.approx(200 / (12.5 - 10.001))
    assert row["cpu_us_per_token"] == pytest.approx(0.0208 / 208 * 1e6)
    assert row["saturated"] == 1 and not row["trustworthy"]
    assert row["over_limit"] == 0  # 5 and 10 ms off: neither past the 40 ms limit


def test_bare_accuracy_joins_its_requests_with_the_truth():
    bare = {"cpu_s": 0.002, "requests": [
        {"request_id": "a", "t_send": 10.0, "t_first_content": 10.103, "content_events": 100},
        {"request_id": "b", "t_send": 10.5, "t_first_content": 10.709, "content_events": 100},
        {"request_id": None, "t_send": 11.0, "t_first_content": None, "content_events": 0, "error": "HTTP/1.1 500"}]}
    truth = pd.DataFrame({"request_id": ["a", "b", "x"], "t_first_token": [10.100, 10.700, 9.0],
                          "completion_tokens": [100, 100, 8]})
    row = bare_accuracy(bare, truth)
    assert row["bare_ttft_err_p50_ms"] == pytest.approx(6.0)  # 3 and 9 ms late
    assert row["bare_cpu_us_per_token"] == pytest.approx(0.002 / 200 * 1e6)  # the tokens the engine sent it


def test_first_tokens_dated_late_make_a_load_untrustworthy_even_when_the_guard_flagged_none():
    # 100 requests, nothing flagged; 2 first tokens dated 60 ms after the engine wrote them (2% > 1%).
    n = 100
    records = pd.DataFrame({"scenario": ["chat"] * n, "ok": [True] * n, "request_id": [f"r{i}" for i in range(n)],
                            "ttft_s": [0.1 + (0.06 if i < 2 else 0.0) for i in range(n)], "decode_tps": [100.0] * n,
                            "t_send": [10.0] * n, "e2e_s": [2.0] * n, "completion_tokens": [100] * n,
                            "flags": [""] * n})
    truth = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "decode_tps": [100.0] * n,
                          "t_arrival": [10.0] * n, "t_first_token": [10.1] * n, "t_last_token": [12.0] * n,
                          "completion_tokens": [100] * n})
    row = accuracy(records, truth, {})
    assert row["over_limit"] == 2 and row["saturated"] == 0 and row["missed"] == 2 and not row["trustworthy"]
    one_late = accuracy(records.assign(ttft_s=[0.16] + [0.1] * (n - 1)), truth, {})
    assert one_late["over_limit"] == 1 and one_late["trustworthy"]  # 1%: the p99 may be late
    table = pd.DataFrame([{**row, "workload": "W3 c=400 (no kernel stamps)"}])
    said = verdict(table)
    assert said.startswith("This client stops being trustworthy at W3 c=400 (no kernel stamps)")
    assert said.endswith("did not flag first tokens that were really late in: "
                         "W3 c=400 (no kernel stamps) (2 of 2 late)")
    # Both late ones flagged (and one more): none missed. One late and not flagged: missed, and said, though
    # 1% late leaves the row trustworthy.
    flagged = records.assign(flags=["client_saturated"] * 3 + [""] * (n - 3))
    assert accuracy(flagged, truth, {})["missed"] == 0
    trusted = pd.DataFrame([{**one_late, "workload": "W3 c=200"}])
    assert verdict(trusted) == ("This client was trustworthy at every load measured here.\nThe saturation guard did "
                                "not flag first tokens that were really late in: W3 c=200 (1 of 1 late)")
