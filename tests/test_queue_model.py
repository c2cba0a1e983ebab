"""The queueing model of the classroom against capacities known on paper."""

from __future__ import annotations

import pytest

from bench_tasks import slo
from bench_tasks.capacity.queue_model import Server, judge_class, predict, saturation_students, simulate
from bench_tasks.classroom import ThinkTime

# test_capacity_sim's engine (its comment works the capacity out on paper): 4 slots, answers of 41 tokens,
# the first at the end of a negligible prefill, the other 40 at 40 tok/s: a question holds a slot 1.0 s;
# students think exactly 1.125 s. 8 never wait; 9 keep the slots busy and wait 0.125 s a cycle on average.
SIM_CAPACITY_SIM = Server(slots=4, token_s=1 / 40, answer_tokens=(41,), first_token_s=0.002)
# The issue's server: 4 slots, 256-token answers at 100 tok/s each, think 10-40 s: paper capacity 24-25.
ISSUE_SERVER = Server(slots=4, token_s=1 / 100, answer_tokens=(256,), first_token_s=0.003, prefill_tps=40000.0)


def test_the_model_finds_the_paper_capacity_of_the_simulated_engine_of_the_capacity_test():
    prediction = predict(SIM_CAPACITY_SIM, ThinkTime(1.125, 1.125), slo.parse("ttft_p95=0.1"), max_students=256)
    assert prediction.capacity == 8
    assert prediction.classes[8].figures["ttft_p95_s"] < 0.01  # nobody waits: the first token's own time
    assert prediction.classes[9].figures["ttft_p95_s"] > 0.1
    # 8 students never wait: each asks once per 1.0 s answer + 1.125 s of thinking.
    assert prediction.classes[8].requests_per_s == pytest.approx(8 / 2.127, rel=0.01)


def test_the_model_finds_the_issue_s_server_at_24_to_25_students():
    prediction = predict(ISSUE_SERVER, ThinkTime(10, 40), slo.parse("ttft_p95=1.0"), max_students=256)
    assert prediction.capacity in (24, 25)
    p95 = {n: c.figures["ttft_p95_s"] for n, c in prediction.classes.items()}
    assert p95[prediction.capacity] <= 1.0 < p95[prediction.capacity + 1]
    assert p95[min(p95)] < p95[max(p95)]  # a larger class waits longer
    assert prediction.capacity < saturation_students(ISSUE_SERVER, ThinkTime(10, 40)) == 44  # the knee comes first
    again = predict(ISSUE_SERVER, ThinkTime(10, 40), slo.parse("ttft_p95=1.0"), max_students=256)
    assert again.capacity == prediction.capacity and again.classes.keys() == prediction.classes.keys()  # seeded


def test_a_decode_goal_bounds_a_server_without_a_slot_limit_where_the_per_stream_rate_falls_below_it():
    # Think 0: every student always has a question in flight, so N students decode N at once, each token
    # taking 0.01 + 0.001 (N - 1) s: at least 50 tok/s while N - 1 <= 10, so the capacity is 11 exactly.
    server = Server(slots=256, token_s=0.01, token_s_per_stream=0.001, answer_tokens=(101,))
    prediction = predict(server, ThinkTime(0, 0), slo.parse("ttft_p95=5,decode_p5=50"), max_students=64,
                         requests=400)
    assert prediction.capacity == 11
    assert prediction.classes[11].figures["decode_tps_p5"] == pytest.approx(50.0)
    assert prediction.classes[12].figures["decode_tps_p5"] == pytest.approx(1 / 0.021)


def test_a_conversation_s_prompt_grows_by_each_answer_and_question_and_is_read_at_the_prefill_rate():
    server = Server(slots=1, token_s=0.01, answer_tokens=(50,), first_token_s=0.1, prefill_tps=1000.0,
                    first_prompt_tokens=100, question_tokens=20)
    rows, _span = simulate(server, ThinkTime(0, 0), students=1, requests=10)
    # One student alone: each first token is the overhead plus the whole prompt read; the prompt grows by
    # the 50-token answer and a 20-token question for the five questions of a conversation, then a fresh one.
    prompts = [round(row["prompt_tps"] * row["ttft_s"]) for row in rows]
    assert prompts == [100, 170, 240, 310, 380] * 2
    assert all(row["ttft_s"] == pytest.approx(0.1 + p / 1000) for row, p in zip(rows, prompts))
    assert all(row["decode_tps"] == pytest.approx(100.0) for row in rows)
    cached = simulate(Server(**{**server.__dict__, "cached_history": True}), ThinkTime(0, 0), 1, 10)[0]
    # A later turn reads its question alone: the rest is cached; a first turn its whole prompt (no other
    # conversation sent its opening code), or what the probe saw it read (first_read_tokens).
    assert [row["ttft_s"] for row in cached] == pytest.approx([0.2, 0.12, 0.12, 0.12, 0.12] * 2)
    opening_cached = simulate(Server(**{**server.__dict__, "cached_history": True, "first_read_tokens": 70}),
                              ThinkTime(0, 0), 1, 10)[0]
    assert [row["ttft_s"] for row in opening_cached] == pytest.approx([0.17, 0.12, 0.12, 0.12, 0.12] * 2)


def test_where_reading_a_prompt_pauses_the_others_each_read_stops_every_answer_decoding_and_prompts_queue():
    # Two students who never think ask at the same instants: 1000-token prompts read at 1000 tok/s, then
    # 100 tokens at 100 tok/s. Read beside the decoding, both first tokens come at 1 s, both answers in 0.99 s.
    server = Server(slots=2, token_s=0.01, answer_tokens=(100,), prefill_tps=1000.0, first_prompt_tokens=1000,
                    question_tokens=1000, cached_history=True)
    beside = simulate(server, ThinkTime(0, 0), students=2, requests=40)[0]
    assert {(round(row["ttft_s"], 6), round(99 / row["decode_tps"], 6)) for row in beside} == {(1.0, 0.99)}
    # Where a read stops every answer (llama.cpp): the second prompt is read after the first (its first token at
    # 2 s), and the first answer stands still meanwhile (decoded in 1.99 s).
    pausing = simulate(Server(**{**server.__dict__, "prefill_pause_share": 1.0}), ThinkTime(0, 0), 2, 40)[0]
    assert {(round(row["ttft_s"], 6), round(99 / row["decode_tps"], 6)) for row in pausing} == {(1.0, 1.99),
                                                                                              (2.0, 0.99)}
    judged = {share: predict(Server(**{**server.__dict__, "prefill_pause_share": share}), ThinkTime(0.5, 1.5),
                             slo.parse("ttft_p95=3,decode_p5=60"), max_students=16, requests=400).capacity
              for share in (0.0, 1.0)}
    assert judged == {0.0: 4, 1.0: 1}


def test_students_arrive_over_the_ramp_and_only_the_steady_class_is_predicted():
    rows, span = simulate(ISSUE_SERVER, ThinkTime(10, 40), students=10, requests=200)
    assert len(rows) == 200 and span > 0
    figures = judge_class(ISSUE_SERVER, ThinkTime(10, 40), slo.parse("ttft_p95=1.0"), 10, requests=500)
    # A student asks once per think (25 s on average) + answer (2.56 s): 10 ask about 0.36 a second.
    assert figures.requests_per_s == pytest.approx(10 / 27.56, rel=0.1)
    assert figures.response_s == pytest.approx(0.003 + 255 / 100, rel=0.05)
    assert figures.values["ttft_s"] == sorted(figures.values["ttft_s"])
