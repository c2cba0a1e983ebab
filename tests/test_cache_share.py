"""The run's mark and the cache check as pure functions: what opens a prompt, what a request may share, and
when it was served beyond that (bench_tasks.run_mark, bench_tasks.cache_share)."""

import pytest

from bench_tasks import agent, cache_share, chat, run_mark
from bench_tasks.record import Record


def test_a_mark_is_eight_hex_digits_drawn_afresh_and_parsed_back():
    marks = {run_mark.draw() for _ in range(50)}
    assert len(marks) == 50 and all(run_mark.parse(m) == m and len(m) == 8 for m in marks)
    assert run_mark.parse(" 3F9A0C1E ") == "3f9a0c1e"
    for bad in ("3f9a0c1", "3f9a0c1eg", "zzzzzzzz", ""):
        with pytest.raises(ValueError, match="8 hex digits"):
            run_mark.parse(bad)


def test_an_opening_is_a_pure_function_of_the_mark_and_the_jobs_identity():
    mark = "3f9a0c1e"
    first = run_mark.opening(mark, "burst-4", 1, 2)
    assert first == run_mark.opening(mark, "burst-4", 1, 2)  # a repeat sends the same text
    assert first.startswith(f"[{mark} ") and first.endswith("]") and len(first) == 2 + 8 + 1 + 8
    others = {run_mark.opening(mark, "burst-4", r, i) for r in (1, 2) for i in range(4)}
    others |= {run_mark.opening(mark, "burst-12", 1, 2), run_mark.opening("00000000", "burst-4", 1, 2)}
    assert len(others) == 10  # another user, round, size or run: another code


def test_common_prefix_and_the_shape_of_a_prompt():
    assert cache_share.common_prefix([1, 2, 3, 4], [1, 2, 9]) == 2
    assert cache_share.common_prefix([], [1]) == 0 and cache_share.common_prefix([5, 6], [5, 6]) == 2
    user = chat.messages("Hi?", "[m c]")
    system = [{"role": "system", "content": "[m c] tutor"}, {"role": "user", "content": "Hi?"}]
    assert cache_share.shape(user) == cache_share.USER and cache_share.shape(system) == cache_share.SYSTEM
    assert cache_share.shape(system, agent.TOOLS) == cache_share.TOOLS


def test_the_agents_tools_carry_its_opening_before_the_first_description():
    tools = agent.tools("[m c]")
    assert tools[0]["function"]["description"].startswith("[m c] ") and tools[1:] == agent.TOOLS[1:]
    assert [t["function"]["name"] for t in tools] == [t["function"]["name"] for t in agent.TOOLS]
    assert not agent.TOOLS[0]["function"]["description"].startswith("[")  # the declared tools are left alone


def fake_tokenizer(messages, tools=None):
    """A template that puts the tools first, then each message; a character is a token."""
    text = (f"<tools>{tools}</tools>" if tools else "") + "".join(f"<{m['role']}>{m['content']}" for m in messages)
    return [ord(c) for c in text]


@pytest.mark.parametrize("kind", cache_share.SHAPES)
def test_the_share_is_the_common_prefix_of_two_probes_and_a_codes_chance_tokens(kind):
    mark = "3f9a0c1e"
    share = cache_share.measure(kind, mark, token_ids=fake_tokenizer)
    codes = run_mark.probe_codes()
    assert codes[0][0] != codes[1][0] and len(set(codes + run_mark.probe_codes())) == 4
    probed = cache_share.probe(kind, mark, codes[0])
    first = probed[0]
    rendered = "".join(map(chr, fake_tokenizer(*probed)))
    before_code = rendered.index(f"[{mark} ") + len(f"[{mark} ")  # the tools (for TOOLS) and the mark come first
    assert share == before_code + run_mark.CHANCE_TOKENS
    assert first[0]["role"] == ("user" if kind == cache_share.USER else "system")
    # Any two jobs of the run share at most that much, whatever their codes begin with.
    worst = 0
    for i in range(200):
        a, b = (fake_tokenizer(*cache_share.probe(kind, mark, run_mark.code(mark, "job", i, j))) for j in (0, 1))
        worst = max(worst, cache_share.common_prefix(a, b))
    assert before_code < worst <= share


def test_without_a_tokenizer_the_share_is_what_the_cache_served_a_second_different_request():
    served = iter([3, 12])
    assert cache_share.measure(cache_share.USER, "3f9a0c1e", cached_after=lambda m, t: next(served)) == 12 + 9
    assert cache_share.measure(cache_share.USER, "3f9a0c1e", cached_after=lambda m, t: None) is None
    assert cache_share.measure(cache_share.USER, "3f9a0c1e") is None


@pytest.mark.parametrize("cached, shareable, hit", [(0, 17, False), (17, 17, False), (18, 17, True),
                                                    (None, 17, None), (30, None, None), (float("nan"), 5, None)])
def test_a_request_is_a_cache_hit_when_served_beyond_its_share_and_unknown_when_either_is(cached, shareable, hit):
    assert cache_share.is_hit(cached, shareable) is hit
    record = Record(cached_tokens=cached, shareable_tokens=shareable, flags="bunched")
    cache_share.check(record)
    assert record.flags == ("bunched;cache_hit" if hit else "bunched")


def turn(prompt, answer, ok=True, opening=17):
    return Record(ok=ok, prompt_tokens=prompt, completion_tokens=answer, shareable_tokens=opening)


def test_a_conversation_may_share_what_it_sent_and_was_answered_before():
    resent = cache_share.Conversation()
    first, second, third = turn(100, 40), turn(160, 30), turn(220, 10)
    for record in (first, second, third):
        resent.judge(record)
    assert [r.shareable_tokens for r in (first, second, third)] == [17, 140, 190]


def test_a_request_sent_again_after_a_failure_may_share_all_of_its_prompt():
    resent = cache_share.Conversation()
    first, failed, again, next_turn = turn(100, 40), turn(None, None, ok=False), turn(160, 20), turn(200, 5)
    for record in (first, failed, again, next_turn):
        resent.judge(record)
    assert failed.shareable_tokens == 140  # what the first sent
    assert again.shareable_tokens == 160  # its whole prompt: the failed request may have left it cached
    assert next_turn.shareable_tokens == 180


def test_a_caller_may_say_what_a_request_shares():
    record = Record(cached_tokens=4096, shareable_tokens=4096)  # e.g. a trace's request naming cached blocks
    cache_share.check(record)
    assert record.flags == ""
