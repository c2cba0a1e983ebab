"""What the simulated engine can serve, on paper, and what it truly served an open loop, from its truth log:
the figures the end-to-end tests hold the client's rates, goodput and saturation rate to. Test code only:
the client never computes the engine's capacity.

**Paper capacity** (``paper_capacity``; prefill mode concurrent, every slot busy, one token per event).
A slot serves one request after another: from taking it, ``base_latency_s`` and the prompt's uncached
tokens at ``prefill_tps`` until its first token (``a``, during which it does not decode), then the answer's
other tokens one decode step each (``D`` = completion tokens - 1: the first event's token costs no step,
an end token its own). All requests decoding share one rate, ``decode_tps / (1 + decode_slowdown (n -
1))`` with n decoding, so a request's decode takes d = D (1 + decode_slowdown k) / decode_tps with k the
other slots decoding beside it, and the slots answer slots / (a + d) requests per second. k depends on
how the slots' turns line up:

- in **lockstep** (requests that started together, as a flood's first round, stay together: every slot
  reads its prompt at the same time and decodes beside all the others) k = slots - 1;
- with **independent** turns (an open loop's random arrivals shuffle them) k = (slots - 1) f, f the share
  of a slot's time spent decoding, d / (a + d), solved with d.

The two differ by the share of a cycle spent reading: with the simulated engine's defaults (no base
latency, 40,000 prompt tokens per second) by well under a percent; with slow prompts by as much as the
reading takes. (The rate is not linear in n: its time average is not exactly the rate at the average n;
at the slowdowns used here the difference is far below a percent.)

**The truth of a window** (``true_window``): the client's records give each request's due time and its
``request_id``; the truth log gives when the engine read the request (``t_arrival``), wrote its first
token and generated its last. Both clocks are the machine's CLOCK_MONOTONIC (a local run), so the truth
of a window is the client's definitions applied to the engine's times: due and achieved rates over the
window's span, goodput from each request's true first token and last token after its due time, the true
send lag (the engine reading the request minus its due time: the client's lag plus the network).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from simengine.config import SimConfig


@dataclass(frozen=True)
class PaperCapacity:
    lockstep_rps: float
    independent_rps: float

    def holds(self, measured_rps: float, rel: float) -> bool:
        """``measured_rps`` within ``rel`` of the range the two line-ups span."""
        low, high = sorted((self.lockstep_rps, self.independent_rps))
        return low * (1 - rel) <= measured_rps <= high * (1 + rel)


def paper_capacity(config: SimConfig, answer_tokens: int, prompt_tokens: float,
                   cached_tokens: float = 0.0) -> PaperCapacity:
    """Requests per second the engine answers with every slot busy, each answer ``answer_tokens`` long
    (its completion tokens) after a prompt of ``prompt_tokens`` (``cached_tokens`` of them cached)."""
    if config.prefill_mode != "concurrent" or config.tokens_per_event != 1 or config.draft_tokens:
        raise ValueError("the paper capacity is derived for prefill mode concurrent, one token per event, no drafting")
    reading_s = config.base_latency_s + (prompt_tokens - cached_tokens) / config.prefill_tps
    steps = answer_tokens - 1

    def answered(others: float) -> tuple[float, float]:
        decode_s = steps * (1 + config.decode_slowdown * others) / config.decode_tps
        return config.slots / (reading_s + decode_s), decode_s / (reading_s + decode_s)

    lockstep, _share = answered(config.slots - 1)
    decoding = 1.0  # the share of its time another slot decodes: from "always" to the fixed point
    for _ in range(200):
        independent, decoding = answered((config.slots - 1) * decoding)
    return PaperCapacity(lockstep, independent)


def joined(truth: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """The client's records (phase, offered_rps, t_due, t_send) beside the truth of the same request
    (by ``request_id``); a request the engine never logged keeps empty truth columns."""
    client = records[["request_id", "phase", "offered_rps", "t_due", "t_send", "ok"]]
    engine = truth[["request_id", "status", "t_arrival", "t_first_token", "t_last_token", "completion_tokens"]]
    return client.merge(engine, on="request_id", how="left")


def true_window(both: pd.DataFrame, phase: str, ttft_limit_s: float | None = None,
                e2e_limit_s: float | None = None) -> dict:
    """The truth of window ``phase`` (``rate-R``): ``requests``, ``due_rps``, ``achieved_rps`` (answers of
    the rate, any part, whose last token the engine generated within the span), ``output_tps``,
    ``goodput_rps`` and ``goodput_share`` (each request's true first token within ``ttft_limit_s`` and last
    token within ``e2e_limit_s`` of its due time, either limit optional), ``send_lag_p99_s`` (the engine
    reading each request, after its due time)."""
    window = both[both["phase"] == phase].sort_values("t_due")
    rate = both[both["phase"].isin([phase, f"settle-{phase}", f"drain-{phase}"])]
    first, last = window["t_due"].iloc[0], window["t_due"].iloc[-1]
    span = last - first
    served = rate[(rate["status"] == 200) & rate["t_last_token"].between(first, last)]

    def good(rows: pd.DataFrame) -> pd.Series:
        keep = rows["status"] == 200
        if ttft_limit_s is not None:
            keep &= rows["t_first_token"] - rows["t_due"] <= ttft_limit_s
        if e2e_limit_s is not None:
            keep &= rows["t_last_token"] - rows["t_due"] <= e2e_limit_s
        return keep

    return {"requests": len(window), "due_rps": (len(window) - 1) / span, "achieved_rps": len(served) / span,
            "output_tps": served["completion_tokens"].sum() / span,
            "goodput_rps": int(good(served).sum()) / span, "goodput_share": float(good(window).mean()),
            "send_lag_p99_s": float((window["t_arrival"] - window["t_due"]).quantile(0.99))}
