"""The study's three tables, the result in words and the setups' legend, on hand-made figures."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import headline, legend, winners
from analysis.spread import NAN, long_frame, long_rows, share_figure, single, spread
from bench_tasks import formatting


def runs(*values) -> dict:
    """A median over runs of these per-run values, as the study makes it (with its interval)."""
    return spread(pd.Series(values, dtype=float))


def needle(found: int, answered: int) -> dict:
    """A needle cell's found count and its share (with the share's interval), as the study makes them."""
    flags = pd.Series([True] * found + [False] * (answered - found), dtype=object)
    return {"found": single(found if answered else NAN, answered), "found_share": share_figure(flags)}


def figures(setup: str, table: str, row: str, **metrics) -> list[dict]:
    return [{**r, "setup": setup} for r in long_rows(table, row, metrics)]


def long_of(*parts: list[dict]) -> pd.DataFrame:
    return long_frame([row for part in parts for row in part])


LONG = long_of(
    figures("a", "chat", "chat", decode_tps=runs(30, 40, 50), ttft_s=runs(0.1, 0.2, 0.3)),
    figures("b", "chat", "chat", decode_tps=runs(70, 80, 90), ttft_s=runs(0.2, 0.25, 0.4)),
    figures("a", "prompt", "prompt-4k", prompt_tps=runs(1900, 2000, 2100), ttft_s=runs(2, 2.05, 2.1)),
    figures("a", "prompt", "prompt-16k", prompt_tps=runs(1400, 1500, 1600), ttft_s=runs(10, 11, 12)),
    figures("b", "prompt", "prompt-4k", prompt_tps=runs(), ttft_s=runs()),
    figures("a", "agent", "agent", ttft_s=runs(0.4, 0.6), decode_tps=runs(29, 31)),
    figures("b", "agent", "agent", ttft_s=runs(0.25, 0.35), decode_tps=runs(30, 31)),
    figures("a", "burst", "burst-1", total_tps=runs(39, 40, 41), ttft_p95_s=runs(0.1, 0.1, 0.1)),
    figures("a", "burst", "burst-12", total_tps=runs(290, 300, 310), ttft_p95_s=runs(1.4, 1.5, 1.6)),
    figures("b", "burst", "burst-1", total_tps=runs(79, 80, 81), ttft_p95_s=runs(0.04, 0.05, 0.06)),
    figures("b", "burst", "burst-12", total_tps=runs(200, 250, 295), ttft_p95_s=runs(0.8, 0.9, 1.0)),
    figures("a", "needle", "needle-32k depth 0.5", **needle(1, 1), e2e_s=runs(3.0)),
    figures("a", "needle", "needle-32k all depths", **needle(3, 3), e2e_s=runs(2.5, 3.0, 3.5)),
    figures("b", "needle", "needle-32k all depths", **needle(2, 3), e2e_s=runs(0.5, 1.0, 1.5)),
    figures("a", "needle", "needle-128k all depths", **needle(1, 3), e2e_s=runs(8.0, 9.0, 10.0)),
)
KEYS = {"a": "A", "b": "B"}


def table_cells(table: str, text=headline.cell_text, long: pd.DataFrame = LONG) -> list[list[str]]:
    lines = headline.headline(long, ["a", "b"])
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


def test_every_headline_figure_carries_its_interval_at_the_level_it_reached():
    lines = headline.headline(LONG, ["a", "b"])
    measured = lines[lines["n"] > 1]
    assert measured["ci_level"].notna().all() and measured["ci_method"].isin(["order statistics",
                                                                              "Clopper-Pearson"]).all()
    medians = measured[measured["metric"] != "found"]
    assert ((medians["ci_low"] <= medians["median"]) & (medians["median"] <= medians["ci_high"])).all()
    bracketed = measured[measured["second"] != ""]
    assert bracketed["second_ci_level"].notna().all()
    # The median of 3 runs: its interval is the min–max, and it covers the true median with 75%, not 90%.
    chat = lines[(lines["test"] == "chat decode tok/s") & (lines["setup"] == "a")].iloc[0]
    assert (chat["ci_low"], chat["ci_high"], chat["ci_level"]) == pytest.approx((30.0, 50.0, 0.75))
    two = lines[(lines["test"] == "agent turn first token s") & (lines["setup"] == "a")].iloc[0]
    assert two["ci_level"] == pytest.approx(0.5)  # 2 runs: min–max at 50%
    found = lines[(lines["test"] == "32K needle: found / total") & (lines["setup"] == "b")].iloc[0]
    assert found["ci_method"] == "Clopper-Pearson" and found["ci_level"] == pytest.approx(0.9)  # the share's
    assert (found["ci_low"], found["ci_high"]) == pytest.approx((0.135, 0.983), abs=1e-3)
    missing = lines[(lines["test"] == "4K prompt tok/s (first token s)") & (lines["setup"] == "b")].iloc[0]
    assert pd.isna(missing["ci_level"]) and missing["ci_method"] == ""  # no value, no interval: empty, not 0


def test_the_interval_is_one_click_away():
    one = table_cells("one_at_a_time", headline.detail_text)
    assert one[0] == ["chat decode tok/s",
                      "75% CI 30.0–50.0 (order statistics: the min–max of 3); range 30.0–50.0, n=3",
                      "75% CI 70.0–90.0 (order statistics: the min–max of 3); range 70.0–90.0, n=3"]
    assert one[2][1:] == ["75% CI 1900–2100 (order statistics: the min–max of 3); range 1900–2100, n=3; first "
                          "token s 75% CI 2.00–2.10, range 2.00–2.10", "no value"]
    at_once = table_cells("at_once", headline.detail_text)
    assert at_once[1][1] == ("75% CI 290–310 (order statistics: the min–max of 3); range 290–310, n=3; slowest "
                             "first token s 75% CI 1.40–1.60, range 1.40–1.60")
    needles = table_cells("needles", headline.detail_text)
    assert needles[0][1:] == ["found in 3 of 3 answered requests; the share found: 95% CI 37%–100% (Clopper-Pearson)",
                              "found in 2 of 3 answered requests; the share found: 90% CI 14%–98% (Clopper-Pearson)"]
    assert needles[1][1:] == ["median 3.00, 75% CI 2.50–3.50 (order statistics: the min–max of 3), 3 answers",
                              "median 1.00, 75% CI 0.500–1.50 (order statistics: the min–max of 3), 3 answers"]
    five = long_of(figures("a", "chat", "chat", decode_tps=runs(1, 2, 3, 4, 5, 6, 7, 8)))
    assert table_cells("one_at_a_time", headline.detail_text, five)[0][1] == (
        "93% CI 2.0–7.0 (order statistics); range 1.0–8.0, n=8")  # the 2nd and 7th of 8


def test_at_three_runs_the_result_in_words_cannot_tell_and_says_how_many_runs_would():
    words = winners.winners(headline.headline(LONG, ["a", "b"]), KEYS)
    assert words == [
        # 70-90 is clear of 30-50, but each is the min–max of 3 runs: a 75% interval
        "fastest chat decode for one user: can't tell at n = 3; run with --runs 5",
        "quickest chat first token: can't tell at n = 3; run with --runs 5",
        # 4K and 16K prompts: only a measured them, no line
        "quickest agent turn first token: can't tell at n = 2; run with --runs 5",
        "fastest agent turn decode: can't tell at n = 2; run with --runs 5",
        "most total tok/s with 1 at once: can't tell at n = 3; run with --runs 5",
        "quickest slowest first token with 1 at once: can't tell at n = 3; run with --runs 5",
        "most total tok/s with 12 at once: can't tell at n = 3; run with --runs 5",
        "quickest slowest first token with 12 at once: can't tell at n = 3; run with --runs 5",
        # shares have exact intervals at any n: 3/3 (37%-100%) and 2/3 (14%-98%) overlap
        "most needles found at 32K: can't tell at n = 3: the 90–95% intervals overlap"]
    assert winners.runs_needed() == 5  # the fewest runs whose median's interval reaches 90% (94%)


FIVE = long_of(
    # the simulated engine's two setups: first tokens 0.1 ms apart, the runs' own spread larger
    figures("a", "chat", "chat", ttft_s=runs(0.0121, 0.0125, 0.0123, 0.0127, 0.0122),
            decode_tps=runs(118, 119, 120, 121, 122)),
    figures("b", "chat", "chat", ttft_s=runs(0.0122, 0.0126, 0.0124, 0.0128, 0.0123),
            decode_tps=runs(38, 39, 40, 41, 42)),
    figures("a", "burst", "burst-4", total_tps=runs(460, 462, 463, 465, 470), ttft_p95_s=runs(1, 1, 1, 1, 1)),
    figures("b", "burst", "burst-4", total_tps=runs(230, 231, 232, 233, 300), ttft_p95_s=runs(1, 1, 1, 1, 1)),
)


def test_a_clear_difference_is_named_and_a_tenth_of_a_millisecond_is_not():
    words = winners.winners(headline.headline(FIVE, ["a", "b"]), KEYS)
    assert words == [
        "fastest chat decode for one user: A (a), 120 tok/s (94% CI 118–122; its interval clear of every other "
        "setup's, at 94%)",
        "quickest chat first token: can't tell at n = 5: the 94% intervals overlap",  # 0.0123 against 0.0124
        "most total tok/s with 4 at once: A (a), 463 tok/s (94% CI 460–470; its interval clear of every other "
        "setup's, at 94%)",
        "quickest slowest first token with 4 at once: can't tell at n = 5: the 94% intervals overlap"]  # a tie
    # One setup short of the runs: said, with which.
    mixed = pd.concat([FIVE[FIVE["setup"] == "a"], LONG[(LONG["setup"] == "b") & (LONG["table"] == "chat")]])
    assert winners.winners(headline.headline(mixed, ["a", "b"]), KEYS)[0] == (
        "fastest chat decode for one user: can't tell at n = 3 for B; run with --runs 5")


def test_apart_by_less_than_the_tables_show_is_no_winner():
    close = long_of(figures("a", "chat", "chat", decode_tps=runs(119.6, 119.6, 119.6, 119.6, 119.6)),
                    figures("b", "chat", "chat", decode_tps=runs(119.9, 119.9, 119.9, 119.9, 119.9)))
    assert winners.winners(headline.headline(close, ["a", "b"]), KEYS) == [
        "fastest chat decode for one user: no clear winner (equal as shown)"]  # both quoted as 120


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
    shown = [formatting.brief(v, m) for v, m in ((36379.4, "prompt_tps"), (133.4, "decode_tps"),
                                                    (59.06, "decode_tps"), (12.345, "ttft_s"), (1.234, "ttft_s"),
                                                    (0.0512, "ttft_s"), (0.00234, "ttft_s"), (NAN, "ttft_s"))]
    assert shown == ["36379", "133", "59.1", "12.3", "1.23", "0.051", "0.0023", "–"]
