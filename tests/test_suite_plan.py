"""The suite's plan and coordinator, without Locust: exact counts, order, and the burst barrier."""

from bench_tasks.agent import Session, validate
from bench_tasks.haystack import found, needle_messages
from bench_tasks.prompt import calibrate, fresh_prompt, parse_size, size_label
from bench_tasks.suite import Coordinator, SuiteOptions, plan


def test_plan_counts_and_order():
    phases = plan(SuiteOptions())
    counts = {p.name: p.expected_records for p in phases}
    assert counts == {"chat": 9, "prompt-4k": 3, "prompt-16k": 3, "prompt-32k": 3, "agent": 18, "burst-1": 3,
                      "burst-4": 12, "burst-12": 36, "needle-32k": 3, "needle-128k": 3}
    assert list(counts) == [p.name for p in phases]  # dicts keep order: the suite's fixed order
    assert all(j.phase == p.name for p in phases for j in p.jobs)
    assert len({j.index for p in phases if p.scenario == "prompt" for j in p.jobs}) == 9  # distinct prompts


def test_only_and_bursts_are_respected():
    phases = plan(SuiteOptions(only=("burst",), bursts=(4, 1), runs=2))
    assert [p.name for p in phases] == ["burst-1", "burst-4"]  # ascending: users only ever added


def test_sequential_phase_hands_out_every_job_once_then_moves_on():
    coordinator = Coordinator(plan(SuiteOptions(only=("chat", "agent"), runs=2)), clock=lambda: 0.0)
    taken = []
    while (job := coordinator.take("chat", "u1")) is not None:
        taken.append(job)
        assert coordinator.take("agent", "u2") is None  # not this phase's scenario
        coordinator.done(job)
    assert len(taken) == 6 and coordinator.phase.name == "agent"


def test_burst_barrier_releases_a_round_only_when_all_users_wait():
    now = [100.0]
    coordinator = Coordinator(plan(SuiteOptions(only=("burst",), bursts=(3,), runs=2)), clock=lambda: now[0],
                              release_lead_s=0.25)
    assert coordinator.take("burst", "a") is None
    assert coordinator.take("burst", "b") is None
    job_c = coordinator.take("burst", "c")  # the third arrival releases the round
    job_a, job_b = coordinator.take("burst", "a"), coordinator.take("burst", "b")
    assert {job_a.release_at, job_b.release_at, job_c.release_at} == {100.25}
    assert {job_a.index, job_b.index, job_c.index} == {0, 1, 2} and job_a.round == 1
    coordinator.done(job_a)
    assert coordinator.take("burst", "a") is None  # round 2 waits for b and c to finish
    coordinator.done(job_b)
    coordinator.done(job_c)
    now[0] = 200.0
    assert coordinator.take("burst", "b") is None
    job_c2 = coordinator.take("burst", "c")
    assert job_c2.round == 2 and job_c2.release_at == 200.25
    for user in ("a", "b"):
        coordinator.done(coordinator.take("burst", user))
    coordinator.done(job_c2)
    assert coordinator.finished


def test_late_done_from_a_closed_phase_is_ignored():
    coordinator = Coordinator(plan(SuiteOptions(only=("chat", "prompt"), runs=3)), clock=lambda: 0.0)
    jobs = [coordinator.take("chat", "u") for _ in range(9)]
    for job in jobs:
        coordinator.done(job)
    coordinator.done(jobs[0])
    assert coordinator.phase.name == "prompt-4k" and len(coordinator._queue) == 3


def test_on_enter_hook_gates_the_next_phase_until_begin():
    entered = []
    coordinator = Coordinator(plan(SuiteOptions(only=("chat", "agent"), runs=1)), clock=lambda: 0.0,
                              on_enter=lambda prev, new: entered.append((prev and prev.name, new and new.name)))
    assert entered == [(None, "chat")] and coordinator.take("chat", "u") is None
    coordinator.begin()
    for _ in range(3):
        coordinator.done(coordinator.take("chat", "u"))
    assert entered[-1] == ("chat", "agent") and coordinator.take("agent", "u") is None
    coordinator.begin()
    coordinator.done(coordinator.take("agent", "u"))
    assert entered[-1] == ("agent", None) and coordinator.finished


def test_sizes_parse_and_label():
    assert parse_size("16k") == 16384 and parse_size("1500") == 1500
    assert size_label(32768) == "32k" and size_label(1500) == "1500"


def test_calibrate_hits_the_target_with_a_nonlinear_counter():
    def count(messages):  # ~1.3 tokens a word plus a template head
        return 11 + int(len(messages[0]["content"].split()) * 1.3)

    messages, tokens = calibrate(lambda n: fresh_prompt("[m]", n, seed=1), count, 16384)
    assert abs(tokens - 16384) <= 0.005 * 16384 and count(messages) == tokens


def test_needle_sits_at_its_depth_and_is_found_exactly():
    text = needle_messages(2000, 0.5, "FALCON1234", seed=3, opening="[m]")[0]["content"]
    position = text.index("\n\nThe secret code word is FALCON1234.\n\n") / len(text)
    assert 0.4 < position < 0.6
    assert found("The code word is FALCON1234.", "FALCON1234") and not found("FALCON123", "FALCON1234")


def test_agent_session_grows_and_validates_tool_calls():
    session = Session.start("[m]")
    first = list(session.turn_messages())
    assert [m["role"] for m in first] == ["system", "user"]
    name, valid = session.answered("", [{"id": "c1", "name": "read_file", "arguments": '{"path": "stats.py"}'}])
    assert (name, valid) == ("read_file", True)
    assert [m["role"] for m in session.turn_messages()] == ["system", "user", "assistant", "tool"]
    session.answered("The bug is in median.", [])
    assert session.turn_messages()[-1]["role"] == "user" and session.next_user == 2
    assert not validate({"name": "rm_rf", "arguments": "{}"}) and not validate({"name": "search", "arguments": "[1]"})


def test_prometheus_parse_sums_label_sets_and_tolerates_total_suffix():
    from bench_tasks.metrics import parse

    text = """# HELP x
vllm:time_to_first_token_seconds_sum{model_name="m",engine="0"} 1.5
vllm:time_to_first_token_seconds_count{model_name="m",engine="0"} 3.0
vllm:time_to_first_token_seconds_bucket{le="0.1"} 1.0
vllm:prompt_tokens{model_name="m"} 100
vllm:prompt_tokens{model_name="n"} 20
llamacpp:tokens_predicted_total 7
"""
    wanted = {"vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
              "vllm:prompt_tokens_total", "llamacpp:tokens_predicted_total"}
    assert parse(text, wanted) == {"vllm:time_to_first_token_seconds_sum": 1.5,
                                   "vllm:time_to_first_token_seconds_count": 3.0,
                                   "vllm:prompt_tokens_total": 120.0, "llamacpp:tokens_predicted_total": 7.0}


def test_forgotten_users_release_their_jobs_and_leave_the_barrier():
    coordinator = Coordinator(plan(SuiteOptions(only=("burst",), bursts=(2,), runs=2)), clock=lambda: 0.0)
    assert coordinator.take("burst", "a") is None
    job_b = coordinator.take("burst", "b")  # releases round 1; a's job waits for a
    assert coordinator.forget("a")[0].round == 1  # a died before picking it up: lost, closed
    coordinator.done(job_b)
    assert coordinator.take("burst", "b") is None
    assert coordinator.forget("b") == [] and coordinator.take("burst", "c") is None
    assert coordinator.take("burst", "d").round == 2  # replacements fill round 2
