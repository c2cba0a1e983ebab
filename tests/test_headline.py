"""The study's three tables, the result in words and the setups' legend, on hand-made figures."""

from __future__ import annotations

import pandas as pd

from analysis import headline, legend, verdict
from analysis.spread import NAN, long_frame, long_rows, single


def spread(median, low, high, n):
    return {"median": median, "min": low, "max": high, "n": n}


def figures(setup: str, table: str, row: str, **metrics) -> list[dict]:
    return [{**r, "setup": setup} for r in long_rows(table, row, metrics)]


def long_of(*parts: list[dict]) -> pd.DataFrame:
    return long_frame([row for part in parts for row in part])


LONG = long_of(
    figures("a", "chat", "chat", decode_tps=spread(40.0, 30.0, 50.0, 3), ttft_s=spread(0.2, 0.1, 0.3, 3)),
    figures("b", "chat", "chat", decode_tps=spread(80.0, 70.0, 90.0, 3), ttft_s=spread(0.25, 0.2, 0.4, 3)),
    figures("a", "prompt", "prompt-4k", prompt_tps=spread(2000.0, 1900.0, 2100.0, 3), ttft_s=spread(2.05, 2, 2.1, 3)),
    figures("a", "prompt", "prompt-16k", prompt_tps=spread(1500.0, 1400.0, 1600.0, 3), ttft_s=spread(11, 10, 12, 3)),
    figures("b", "prompt", "prompt-4k", prompt_tps=spread(NAN, NAN, NAN, 0), ttft_s=spread(NAN, NAN, NAN, 0)),
    figures("a", "agent", "agent", ttft_s=spread(0.5, 0.4, 0.6, 2), decode_tps=spread(30.0, 29.0, 31.0, 2)),
    figures("b", "agent", "agent", ttft_s=spread(0.3, 0.2, 0.35, 2), decode_tps=spread(30.5, 30.0, 35.0, 2)),
    figures("a", "burst", "burst-1", total_tps=spread(40.0, 39.0, 41.0, 3), ttft_p95_s=spread(0.1, 0.1, 0.1, 3)),
    figures("a", "burst", "burst-12", total_tps=spread(300.0, 290.0, 310.0, 3), ttft_p95_s=spread(1.5, 1.4, 1.6, 3)),
    figures("b", "burst", "burst-1", total_tps=spread(80.0, 79.0, 81.0, 3), ttft_p95_s=spread(0.05, 0.04, 0.06, 3)),
    figures("b", "burst", "burst-12", total_tps=spread(250.0, 200.0, 295.0, 3), ttft_p95_s=spread(0.9, 0.8, 1.0, 3)),
    figures("a", "needle", "needle-32k depth 0.5", found=single(1, 1), e2e_s=spread(3.0, 3.0, 3.0, 1)),
    figures("a", "needle", "needle-32k all depths", found=single(3, 3), e2e_s=spread(3.0, 2.5, 3.5, 3)),
    figures("b", "needle", "needle-32k all depths", found=single(2, 3), e2e_s=spread(1.0, 0.5, 1.5, 3)),
    figures("a", "needle", "needle-128k all depths", found=single(1, 3), e2e_s=spread(9.0, 8.0, 10.0, 3)),
)
KEYS = {"a": "A", "b": "B"}


def table_cells(table: str, text=headline.cell_text) -> list[list[str]]:
    lines = headline.headline(LONG, ["a", "b"])
    return headline.cells(lines[lines["table"] == table], KEYS, text).values.tolist()


def test_the_three_tables_have_the_studys_rows_in_its_order():
    assert table_cells("one_at_a_time") == [
        ["chat decode tok/s", "40.0", "80.0"],
        ["chat first token s", "0.200", "0.250"],
        ["4K prompt tok/s (first token s)", "2000 (2.05)", "–"],  # b's 4k prompts all failed: missing, not 0
        ["16K prompt tok/s (first token s)", "1500 (11.0)", "–"],  # b did not run 16k
        ["agent turn first token s", "0.500", "0.300"],
        ["agent turn decode tok/s", "30.0", "30.5"]]
    assert table_cells("at_once") == [
        ["1 at once: total tok/s (slowest first token s)", "40.0 (0.100)", "80.0 (0.050)"],
        ["12 at once: total tok/s (slowest first token s)", "300 (1.50)", "250 (0.900)"]]
    assert table_cells("needles") == [
        ["32K needle: found / total", "3/3", "2/3"], ["32K needle: answer time s", "2.50–3.50", "0.500–1.50"],
        ["128K needle: found / total", "1/3", "–"], ["128K needle: answer time s", "8.00–10.0", "–"]]


def test_the_range_is_one_click_away():
    one = table_cells("one_at_a_time", headline.detail_text)
    assert one[0] == ["chat decode tok/s", "range 30.0–50.0, n=3", "range 70.0–90.0, n=3"]
    assert one[2][1:] == ["range 1900–2100, n=3; first token s 2.00–2.10", "no value"]
    at_once = table_cells("at_once", headline.detail_text)
    assert at_once[1][1] == "range 290–310, n=3; slowest first token s 1.40–1.60"
    needles = table_cells("needles", headline.detail_text)
    assert needles[0][1:] == ["found in 3 of 3 answered requests", "found in 2 of 3 answered requests"]
    assert needles[1][1:] == ["median 3.00, 3 answers", "median 1.00, 3 answers"]


def test_the_result_in_words_names_a_winner_only_outside_the_ranges():
    words = verdict.verdicts(headline.headline(LONG, ["a", "b"]), KEYS)
    assert words == [
        "fastest chat decode for one user: B (b), 80.0 tok/s",  # 70-90 clear of 30-50
        "quickest chat first token: no clear winner (the ranges overlap)",  # 0.1-0.3 against 0.2-0.4
        # 4K and 16K prompts: only a measured them, no line
        "quickest agent turn first token: B (b), 0.300 s",  # 0.2-0.35 below 0.4-0.6
        "fastest agent turn decode: no clear winner (the ranges overlap)",
        "most total tok/s with 1 at once: B (b), 80.0 tok/s",
        "quickest slowest first token with 1 at once: B (b), 0.050 s",
        "most total tok/s with 12 at once: no clear winner (the ranges overlap)",  # 300 beats 250, not 295
        "quickest slowest first token with 12 at once: B (b), 0.900 s",
        "most needles found at 32K: A (a), 3/3"]


def test_a_tie_or_a_difference_the_tables_do_not_show_is_no_winner():
    tied = long_of(figures("a", "needle", "needle-2k all depths", found=single(2, 3), e2e_s=spread(1, 1, 1, 3)),
                   figures("b", "needle", "needle-2k all depths", found=single(2, 3), e2e_s=spread(2, 2, 2, 3)),
                   # apart, but both quoted as 120
                   figures("a", "chat", "chat", decode_tps=spread(119.6, 119.5, 119.7, 3)),
                   figures("b", "chat", "chat", decode_tps=spread(119.9, 119.8, 120.0, 3)))
    assert verdict.verdicts(headline.headline(tied, ["a", "b"]), KEYS) == [
        "fastest chat decode for one user: no clear winner (equal as shown)",
        "most needles found at 2K: no clear winner (a tie)"]


def test_keys_go_on_as_spreadsheet_columns():
    keys = legend.setup_keys([f"setup {i}" for i in range(28)])
    assert list(keys.values())[:3] == ["A", "B", "C"] and list(keys.values())[25:] == ["Z", "AA", "AB"]


LLAMACPP_SETTINGS = {
    "host": "http://127.0.0.1:40123",
    "models": {"object": "list", "data": [{"id": "smollm2-135m-instruct", "owned_by": "llamacpp",
                                           "meta": {"n_ctx": 8192, "n_params": 134515008, "ftype": "Q4_1"}}]},
    "props": {"total_slots": 4, "model_ftype": "Q4_1", "build_info": "b0-unknown",
              "model_path": "/root/.cache/llm-bench/models/SmolLM2-135M-Instruct.Q4_1.gguf",
              "default_generation_settings": {"n_ctx": 8192}}}


def test_the_legend_spells_each_setup_out_from_what_the_server_said():
    facts = {"llama": {"engine": "llamacpp", "model": "smollm2-135m-instruct"},
             "sim": {"engine": "sim", "model": "sim-model"}, "bare": {"engine": "", "model": ""}}
    settings = {"llama": LLAMACPP_SETTINGS,
                "sim": {"models": {"data": [{"id": "sim-model", "owned_by": "llm-bench-sim", "max_model_len": 163840}]}}}
    items = legend.legend_items(legend.legend(legend.setup_keys(list(facts)), facts, settings))
    assert items == [
        "**A**: llama (engine llamacpp, model smollm2-135m-instruct; owned by llamacpp, 135M parameters, Q4_1, "
        "context 8192, 4 slots, file SmolLM2-135M-Instruct.Q4_1.gguf, build b0-unknown, at http://127.0.0.1:40123)",
        "**B**: sim (engine sim, model sim-model; owned by llm-bench-sim, context 163840)",
        "**C**: bare"]


def test_headline_numbers_keep_about_three_significant_digits():
    shown = [headline.value_text(v, m) for v, m in ((36379.4, "prompt_tps"), (133.4, "decode_tps"),
                                                    (59.06, "decode_tps"), (12.345, "ttft_s"), (1.234, "ttft_s"),
                                                    (0.0512, "ttft_s"), (0.00234, "ttft_s"), (NAN, "ttft_s"))]
    assert shown == ["36379", "133", "59.1", "12.3", "1.23", "0.051", "0.0023", "–"]
