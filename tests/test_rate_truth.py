"""The truth the open loop's end-to-end tests will hold the client to: the simulated engine's paper capacity
matches what it serves when it never lacks work (measured from its own truth log, a raw client keeping
more requests in flight than it has slots), and the truth of a window is the client's definitions applied
to the engine's times."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from urllib.parse import urlsplit

import pandas as pd
import pytest

from simengine.config import SimConfig
from tests.conftest import read_truth
from tests.rate_truth import joined, paper_capacity, true_window

ANSWER_TOKENS = 48
FLOOD_S = 4.0
CONFIGS = {  # slots, decode, slowdown, prefill and base latency all in play; run alone they take ~10 s
    "default": dict(),
    "slow prompts": dict(slots=3, decode_tps=200.0, decode_slowdown=0.15, prefill_tps=2000.0, base_latency_s=0.05),
}


def flood(url: str, in_flight: int, seconds: float) -> None:
    """``in_flight`` raw streams, each asking again as soon as its answer ends, each prompt fresh."""
    parts = urlsplit(url)
    counter = itertools.count()
    stop = time.perf_counter() + seconds

    def user() -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        while time.perf_counter() < stop:
            words = " ".join(f"w{next(counter)}" for _ in range(40))  # nothing a cache has seen
            body = {"model": "sim-model", "messages": [{"role": "user", "content": words}], "stream": True,
                    "max_tokens": ANSWER_TOKENS, "ignore_eos": True}
            connection.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
            response = connection.getresponse()
            while response.readline():
                pass
        connection.close()

    threads = [threading.Thread(target=user) for _ in range(in_flight)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.alone  # the engine's own times, held to a paper figure within 2% (measured -0.2 to -0.4%)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_engine_serves_its_paper_capacity_when_it_never_lacks_work(start_sim, name):
    sim = start_sim(**CONFIGS[name])
    config = SimConfig(**CONFIGS[name])
    flood(sim.url, 3 * config.slots, FLOOD_S)
    truth = read_truth(sim.truth_log)
    served = truth[truth["status"] == 200].sort_values("t_last_token")
    steady = served.iloc[2 * config.slots:]  # past the first rounds, which started together
    assert (steady["completion_tokens"] == ANSWER_TOKENS).all()
    # Little's law per slot: every slot busy, each request holds one from admission to its last token.
    held_s = (steady["t_last_token"] - steady["t_admitted"]).mean()
    paper = paper_capacity(config, ANSWER_TOKENS, steady["prompt_tokens"].mean(), steady["cached_tokens"].mean())
    print(f"{name}: served {config.slots / held_s:.3f} req/s, paper lockstep {paper.lockstep_rps:.3f}"
          f" ({(config.slots / held_s / paper.lockstep_rps - 1) * 100:+.2f}%), independent {paper.independent_rps:.3f}")
    assert paper.holds(config.slots / held_s, rel=0.02)
    # The flood's requests started together and stay so: the lockstep figure, closely.
    assert config.slots / held_s == pytest.approx(paper.lockstep_rps, rel=0.02)


def test_the_paper_capacity_adds_up_by_hand():
    one = SimConfig(slots=1, decode_tps=100.0, decode_slowdown=0.5, prefill_tps=1000.0, base_latency_s=0.1)
    # One slot: no other stream ever decodes beside it. 0.1 + 500 / 1000 s reading, 99 steps at 100 tok/s.
    alone = paper_capacity(one, 100, 600, cached_tokens=100)
    assert alone.lockstep_rps == alone.independent_rps == pytest.approx(1 / (0.6 + 0.99))
    four = SimConfig(slots=4, decode_tps=100.0, decode_slowdown=0.1, prefill_tps=1e12)
    # Reading takes no time: the others always decode, every step at 1 + 0.1 x 3 = 1.3 times a token's time.
    instant = paper_capacity(four, 11, 10)
    assert instant.independent_rps == pytest.approx(instant.lockstep_rps) == pytest.approx(4 / (10 * 1.3 / 100))
    two = SimConfig(slots=2, decode_tps=100.0, decode_slowdown=1.0, prefill_tps=100.0)
    # 1 s reading, 100 steps: in lockstep each step beside the other (2 s of decode), independent beside it
    # f = d / (1 + d) of the time: d = 1 + f, so d = (1 + sqrt 5) / 2.
    paired = paper_capacity(two, 101, 100)
    golden = (1 + 5 ** 0.5) / 2
    assert paired.lockstep_rps == pytest.approx(2 / 3) and paired.independent_rps == pytest.approx(2 / (1 + golden))
    assert paired.holds(0.7, rel=0.0) and not paired.holds(0.6, rel=0.05)
    with pytest.raises(ValueError, match="concurrent"):
        paper_capacity(SimConfig(prefill_mode="batched"), 10, 10)


def test_the_truth_of_a_window_applies_the_clients_definitions_to_the_engines_times():
    records = pd.DataFrame([
        {"request_id": f"r{k}", "phase": phase, "offered_rps": 2.0, "t_due": due, "t_send": due + 0.001, "ok": True}
        for k, (phase, due) in enumerate([("settle-rate-2", -0.5), *[("rate-2", 0.5 * i) for i in range(5)],
                                          ("drain-rate-2", 2.5)])])
    truth = pd.DataFrame([
        {"request_id": f"r{k}", "status": 200, "t_arrival": due + 0.002, "t_first_token": due + 0.1 * (k + 1),
         "t_last_token": due + 1.0, "completion_tokens": 10}
        for k, due in enumerate([-0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5])])
    window = true_window(joined(truth, records), "rate-2", ttft_limit_s=0.35)
    assert window["requests"] == 5 and window["due_rps"] == pytest.approx(2.0)
    # Last tokens at 0.5 (the settle request), 1.0, 1.5, 2.0 within the span [0, 2]: 4 answers over 2 s.
    assert window["achieved_rps"] == pytest.approx(2.0) and window["output_tps"] == pytest.approx(20.0)
    # First tokens 0.2, 0.3, 0.4, 0.5, 0.6 s after due: two of the window's five within 0.35 s; of the
    # answers in the span (the settle one at 0.1, the window's first three) three.
    assert window["goodput_share"] == pytest.approx(0.4) and window["goodput_rps"] == pytest.approx(1.5)
    assert window["send_lag_p99_s"] == pytest.approx(0.002)
