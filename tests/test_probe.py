"""The capacity search's probe without Locust: its phases, and the server it measures, from synthetic records."""

from __future__ import annotations

import pytest

from bench_tasks.capacity.probe import (ANSWERS, ANSWERS_PHASE, BURST, PAUSE_TOKENS, PROMPT, SCENARIO, Probe,
                                        answers_phase, fit_token_time, kind, longest_prompt, served_at_once)
from bench_tasks.suite import BURST_TOKENS


class FakeServer:
    """Answers probe jobs as a server with ``slots`` slots would: per-token time token_s + per_stream (k - 1)
    while k decode, a first token after ``first_token_s`` plus the prompt read at ``prefill_tps``. With ``cached``,
    its cache holds that many tokens of every prompt (the run's opening), and a conversation's second turn is
    served the first turn's prompt and answer too, unless ``keeps_conversations`` is off."""

    def __init__(self, slots: int | None, token_s: float, per_stream: float = 0.0, first_token_s: float = 0.01,
                 prefill_tps: float = 10000.0, answers=(100, 150, 200), fail_at: int | None = None,
                 cached: int = 0, pause_share: float = 0.0, keeps_conversations: bool = True) -> None:
        self.slots, self.token_s, self.per_stream, self.cached = slots, token_s, per_stream, cached
        self.keeps_conversations = keeps_conversations
        self.first_token_s, self.prefill_tps, self.answers, self.fail_at = first_token_s, prefill_tps, answers, fail_at
        self.pause_share = pause_share  # of a prompt's reading time, what the answers decoding beside it lose

    def rows(self, phase: str, jobs: list) -> list[list[dict]]:
        """Each job's records."""
        if kind(phase) == BURST:
            return [[answer] for answer in self._burst(jobs)]
        if phase == PROMPT:
            return [[answer] for answer in self._prompt(jobs)]
        return [self._conversation(phase, job) for job in jobs]

    def _conversation(self, phase: str, job) -> list[dict]:
        """A first question of 80 tokens, its answer, and a second question that adds 30 tokens."""
        answer = self.answers[job.index % len(self.answers)]
        kept = 80 + answer if self.cached and self.keeps_conversations else self.cached
        return [row(phase, 0.05, 0.05 + 100 * self.token_s, prompt_tokens=80, cached_tokens=self.cached,
                    completion_tokens=answer, turn=1),
                row(phase, 0.05, 0.05 + 15 * self.token_s, prompt_tokens=80 + answer + 30, cached_tokens=kept,
                    completion_tokens=16, turn=2)]

    def _prompt(self, jobs: list) -> list[dict]:
        """The answer decoding from 0 s; the long prompt, sent 0.1 s later (after it was sized), read meanwhile."""
        size = next(job.size for job in jobs if job.size)
        reading_s = size / self.prefill_tps
        ttft = self.first_token_s + reading_s
        long = row(PROMPT, ttft, ttft + 15 * self.token_s, prompt_tokens=size + self.cached, cached_tokens=self.cached,
                   completion_tokens=16, prompt_size=size, t_send=0.1)
        first = self.first_token_s + 20 / self.prefill_tps
        decode_s = (PAUSE_TOKENS - 1) * self.token_s + 15 * self.per_stream + self.pause_share * reading_s
        beside = row(PROMPT, first, first + decode_s, prompt_tokens=20, completion_tokens=PAUSE_TOKENS,
                     decode_s=decode_s, t_send=0.0)
        return [beside if job.size is None else long for job in jobs]

    def _burst(self, jobs: list) -> list[dict]:
        k = len(jobs)
        if self.fail_at is not None and k >= self.fail_at:
            return [{**row(jobs[0].phase, None, None), "ok": False, "error": "http_429"} for _ in jobs]
        at_once = min(k, self.slots or k)
        per_token = self.token_s + self.per_stream * (at_once - 1)
        ttft = self.first_token_s + 20 / self.prefill_tps
        answer_s = (BURST_TOKENS - 1) * per_token
        rows = []
        for i, job in enumerate(jobs):
            wave = i // at_once  # those past the slots wait for a whole answer per wave ahead of them
            start = wave * (ttft + answer_s)
            rows.append(row(job.phase, start + ttft, start + ttft + answer_s, prompt_tokens=20 + self.cached,
                            cached_tokens=self.cached, completion_tokens=BURST_TOKENS, decode_tps=1 / per_token,
                            release_offset_s=0.001))
        return rows


def row(phase: str, ttft_s, e2e_s, **fields) -> dict:
    return {"scenario": SCENARIO, "phase": phase, "ok": ttft_s is not None, "ttft_s": ttft_s, "e2e_s": e2e_s,
            **fields}


def run_probe(probe: Probe, server: FakeServer, now: list | None = None) -> list[str]:
    """Drive the probe to its end as its users would; the phases it ran."""
    phases = []
    while not probe.finished:
        phase = probe.phase
        phases.append(phase.name)
        users = [f"u{i}" for i in range(phase.users)]
        jobs = []
        while len(jobs) < len(phase.jobs):
            # A barrier hands out its jobs only when all its users wait; then each takes its own.
            jobs += [job for user in users if (job := probe.take(SCENARIO, user)) is not None]
            if now is not None:
                now[0] += 0.25
        for job, answers in zip(jobs, server.rows(phase.name, jobs)):
            for answer in answers:
                probe.record(answer)
            probe.done(job)
    return phases


def test_the_probe_climbs_bursts_a_little_past_the_slots_then_reads_a_long_prompt_and_answers():
    now = [0.0]
    probe = Probe(max_tokens=256, clock=lambda: now[0])
    server = FakeServer(slots=4, token_s=0.01, per_stream=0.001)
    assert run_probe(probe, server, now) == [f"{BURST}-1", f"{BURST}-2", f"{BURST}-4", f"{BURST}-8", PROMPT,
                                             ANSWERS_PHASE]
    assert probe.slots == 4
    measured = probe.server(unlimited_slots=256)
    assert measured.slots == 4
    assert measured.token_s == pytest.approx(0.01) and measured.token_s_per_stream == pytest.approx(0.001)
    assert measured.prefill_tps == pytest.approx(10000.0)
    assert measured.first_token_s == pytest.approx(0.01)  # the first rung's first token less its 20 tokens read
    assert sorted(set(measured.answer_tokens)) == [100, 150, 200] and len(measured.answer_tokens) == ANSWERS
    assert measured.first_prompt_tokens == 80 and not measured.cached_history and measured.first_read_tokens is None
    assert measured.question_tokens == 30  # the second turns' prompts less the first turns' prompts and answers
    assert probe.rows[PROMPT][1]["prompt_tokens"] == longest_prompt(256) > 4 * 256
    assert measured.prefill_pause_share == pytest.approx(0.0, abs=1e-9) and not probe.notes


@pytest.mark.parametrize("share", [1.0, 0.4])
def test_the_probe_measures_how_much_reading_a_prompt_pauses_the_answers_decoding_beside_it(share):
    # llama.cpp stops every stream while it reads a prompt (1); an engine that mixes reading and decoding
    # slows them by part of it.
    probe = Probe(max_tokens=256, clock=lambda: 0.0)
    run_probe(probe, FakeServer(slots=4, token_s=0.01, per_stream=0.001, prefill_tps=2000.0, pause_share=share))
    assert probe.server(unlimited_slots=256).prefill_pause_share == pytest.approx(share)


def test_a_pause_is_not_told_from_an_answer_that_did_not_span_the_prompts_reading():
    probe = Probe(max_tokens=256, clock=lambda: 0.0)
    # An engine that reads beside the decoding, slowly: the 2.6 s answer ended 5 s into the prompt's reading.
    run_probe(probe, FakeServer(slots=4, token_s=0.01, prefill_tps=300.0, pause_share=0.0))
    assert probe.server(unlimited_slots=256).prefill_pause_share == 0.0
    assert "no answer was streaming when the long prompt's reading ended" in probe.why()


def test_a_server_that_keeps_prefixes_is_read_by_what_it_did_not_hold():
    probe = Probe(max_tokens=256, clock=lambda: 0.0)
    run_probe(probe, FakeServer(slots=4, token_s=0.01, cached=24))
    measured = probe.server(unlimited_slots=256)
    # Each prompt's cached 24 tokens cost nothing: the rate and the first token's cost are the same as without.
    assert measured.prefill_tps == pytest.approx(10000.0) and measured.first_token_s == pytest.approx(0.01)
    # The second turns were served their conversation: a later turn reads only its 30-token question, a first turn
    # its prompt less the run's opening (each conversation's instructions open with its own code: never shared).
    assert measured.cached_history and measured.question_tokens == 30 and measured.first_read_tokens == 80 - 24
    assert measured.answer_tokens == (100, 150, 200) * 4  # the first turns' answers: the second's 16 left out


def test_a_server_that_caches_only_the_run_s_opening_does_not_keep_conversations():
    # Every prompt served its opening, but no second turn its first: each turn reads its whole prompt.
    probe = Probe(max_tokens=256, clock=lambda: 0.0)
    run_probe(probe, FakeServer(slots=4, token_s=0.01, cached=24, keeps_conversations=False))
    measured = probe.server(unlimited_slots=256)
    assert not measured.cached_history and measured.first_read_tokens is None and measured.question_tokens == 30


def test_the_answers_phase_waits_for_both_turns_of_each_conversation():
    assert answers_phase(4).expected_records == 2 * ANSWERS


def test_a_server_that_seats_every_burst_has_no_slot_limit_the_class_would_meet():
    probe = Probe(max_tokens=64, clock=lambda: 0.0, max_burst=16)
    phases = run_probe(probe, FakeServer(slots=None, token_s=0.02))
    assert phases[:5] == [f"{BURST}-{k}" for k in (1, 2, 4, 8, 16)] and phases[5:] == [PROMPT, ANSWERS_PHASE]
    assert probe.slots is None and "no slot limit seen" in probe.why()
    assert probe.server(unlimited_slots=200).slots == 200


def test_a_burst_the_server_refuses_ends_the_ladder_and_a_refused_first_request_ends_the_probe():
    probe = Probe(max_tokens=64, clock=lambda: 0.0)
    run_probe(probe, FakeServer(slots=None, token_s=0.02, fail_at=8))
    assert probe.slots == 4 and "8 of 8 requests sent at once failed" in probe.why()
    refused = Probe(max_tokens=64, clock=lambda: 0.0)
    assert run_probe(refused, FakeServer(slots=4, token_s=0.02, fail_at=1)) == [f"{BURST}-1"]
    assert refused.finished and refused.server(unlimited_slots=64) is None
    assert "the first request of the probe failed" in refused.why()


def test_a_request_that_waited_for_a_slot_is_told_from_one_served_at_once():
    # Fast prefill: the waiting request's first token comes as the first answer ends, a little before the
    # client sees that answer's end; a served one's comes at once.
    rows = [row(f"{BURST}-4", 0.004, 1.283, release_offset_s=0.002) for _ in range(2)]
    rows += [row(f"{BURST}-4", 1.2806, 2.56, release_offset_s=0.002), row(f"{BURST}-4", None, None)]
    assert len(served_at_once(rows)) == 2
    assert served_at_once([]) == []


def test_the_decode_line_is_fitted_through_the_rungs_and_never_falls_with_load():
    assert fit_token_time([(1, 0.010), (2, 0.011), (4, 0.013)]) == pytest.approx((0.010, 0.001))
    assert fit_token_time([(1, 0.012), (4, 0.010)]) == pytest.approx((0.011, 0.0))  # noise, not a speed-up
    assert fit_token_time([(4, 0.02)]) == (0.02, 0.0)
    with pytest.raises(ValueError):
        fit_token_time([])


def test_records_of_other_phases_are_not_the_probe_s():
    probe = Probe(max_tokens=64, clock=lambda: 0.0)
    probe.record({**row(f"{BURST}-1", 0.1, 1.0), "scenario": "classroom"})
    probe.record(row("class-4", 0.1, 1.0))
    assert probe.rows == {} and probe.take("classroom", "u0") is None


def test_a_probe_phase_whose_answer_never_comes_goes_on_with_what_came_once_it_is_overdue():
    now = [0.0]
    probe = Probe(max_tokens=64, clock=lambda: now[0], overdue_s=37.0)
    first = probe.take(SCENARIO, "u0")  # the first rung: one question, which never answers
    now[0] = 36.9
    probe.poll()
    assert probe.phase.name == f"{BURST}-1" and "1 job(s) in flight" in probe.waiting_on()
    now[0] = 37.0
    probe.poll()  # nothing came of the first rung: nothing measured, the search goes on without the model
    assert probe.finished and "1 of the 1 answers of probe-burst-1 were overdue" in probe.why()
    probe.done(first)  # late: nothing changes
    assert probe.finished and probe.server(unlimited_slots=64) is None

