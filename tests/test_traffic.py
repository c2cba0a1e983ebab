"""The user's traffic (bench_tasks/traffic): files read as streams, every problem named by file and line before
anything is sent, conversations replayed, and prompts made to an exact token count on the server's tokenizer
(the simulated engine's here; llama.cpp's and vLLM's in test_traffic_engines.py)."""

from __future__ import annotations

import json
import re
import tracemalloc

import pytest

from bench_tasks import engine, server
from bench_tasks.tokens import token_counter
from bench_tasks.traffic import items as items_module
from bench_tasks.traffic.dataset import CONVERSATIONS, PROMPTS, Conversation, Dataset, PromptRequest, Turn
from bench_tasks.traffic.items import MAX_LISTED, TrafficError, read_items
from bench_tasks.traffic.prefixes import SharedPrefixes
from bench_tasks.traffic.trace import BITMAP_IDS, SharedBlocks, Trace, TracePrompts, TraceReuse, reuse
from bench_tasks.traffic.vocabulary import TokenizerError, Vocabulary, de_bruijn_pairs, measure
from simengine.tokenizer import TOKEN_PATTERN, render_chat, tokenize
from tests.traffic_files import (MOONCAKE_README_EXAMPLE, mooncake_rows, sharegpt, write_json_array,
                                 write_jsonl)


def sim_tokens(messages: list[dict]) -> list[int]:
    """The simulated engine's tokens of a chat prompt, as its /tokenize counts them."""
    return tokenize(render_chat(messages, None))


def sim_count(messages: list[dict]) -> int:
    return len(sim_tokens(messages))


@pytest.fixture(scope="module")
def vocabulary() -> Vocabulary:
    return measure(sim_count)


def problems_of(error: pytest.ExceptionInfo) -> list[str]:
    return error.value.problems


# -- items: JSON lines and JSON arrays, one item at a time --

def test_json_lines_carry_their_line_and_skip_blank_ones(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"a": 1}, "", "  ", {"b": 2}, "{not json", [3]])
    got = list(read_items(str(path)))
    assert [(i.line, i.value) for i in got if not i.error] == [(1, {"a": 1}), (4, {"b": 2}), (6, [3])]
    assert [(i.line, i.error.split(" (")[0]) for i in got if i.error] == [(5, "not JSON")]


AWKWARD = [{"text": 'quote " backslash \\ tab \t newline \n unicode é ✓ \u2028', "n": -12.5e3, "flags": [True, False,
                                                                                                       None]},
           {"nested": {"deep": [[], {}, [1, [2, [3]]]], "empty": ""}, "big": 12345678901234567890},
           {"escapes": "\\u00e9 \u00e9 \\\\u12", "true": True}]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 13, 64, 1 << 20])
def test_an_array_is_read_item_by_item_however_the_chunks_cut_it(tmp_path, chunk):
    path = write_json_array(tmp_path / "a.json", AWKWARD * 3)
    got = list(items_module._array_items(str(path), chunk))
    assert [i.error for i in got] == [""] * 9
    assert [i.value for i in got] == AWKWARD * 3
    assert [i.line for i in got] == item_lines(path)


def item_lines(path) -> list[int]:
    """The lines on which write_json_array's items open."""
    lines = path.read_text().split("\n")  # not splitlines(): JSON breaks lines at \n alone, not at U+2028
    return [number for number, line in enumerate(lines, 1) if line.startswith("{")]


def test_a_compact_array_on_one_line_and_a_bom(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf  [{\"a\": 1},{\"a\": 2} ]")
    assert [(i.line, i.value) for i in read_items(str(path))] == [(1, {"a": 1}), (1, {"a": 2})]
    lines = tmp_path / "b.jsonl"
    lines.write_bytes(b'\xef\xbb\xbf{"a": 1}\n')
    assert [(i.line, i.value) for i in read_items(str(lines))] == [(1, {"a": 1})]


@pytest.mark.parametrize("text, line, error", [
    ('[\n{"a": 1}\n{"a": 2}\n]', 3, "expected ',' or ']' after an item, found '{'"),
    ('[\n{"a": 1},\n]', 3, "not JSON (Expecting value)"),
    ('[\n{"a": 1},\n{"a": 2}\n', 4, "the array never closes"),
    ('[\n{"a": 1}\n]\n{"b": 2}', 4, "text after the array's closing ']'"),
    ('[\n{"a": 1},\n{"a":\n  tru}\n]', 4, "not JSON (Expecting value)"),
    ('[\n{"a": 1},\n{"a": "never ends', 3, "not JSON (a string that never ends)"),
    ('[\n{"a": "two\nlines"}]', 2, "not JSON (Invalid control character)"),
])
@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_an_arrays_syntax_error_is_named_by_line_and_ends_the_reading(tmp_path, text, line, error, chunk):
    path = tmp_path / "a.json"
    path.write_text(text)
    got = list(items_module._array_items(str(path), chunk))
    assert got[-1].line == line and got[-1].error.startswith(error), got[-1]
    assert all(not i.error for i in got[:-1])


def test_a_large_array_is_never_held_whole(tmp_path):
    path = write_json_array(tmp_path / "big.json", (sharegpt(n, turns=20) for n in range(1500)))
    size, chunk = path.stat().st_size, 1 << 16
    tracemalloc.start()
    count = sum(1 for _ in items_module._array_items(str(path), chunk))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 1500
    assert peak < 8 * chunk < size / 10, f"peak {peak / 1e6:.2f} MB reading {size / 1e6:.1f} MB"


@pytest.mark.parametrize("make, problem", [
    (lambda p: p, "cannot be read"),
    (lambda p: (p.mkdir(), p)[1], "cannot be read"),
    (lambda p: (p.write_text(" \n\n"), p)[1], "is empty"),
])
def test_a_file_that_cannot_be_read_says_so(tmp_path, make, problem):
    path = make(tmp_path / "x.jsonl")
    with pytest.raises(TrafficError) as error:
        list(read_items(str(path)))
    assert str(error.value).startswith(f"{path}: {problem}")


# -- prompt files --

def test_a_prompt_file_gives_requests_with_their_source(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": [{"type": "text", "text": "Why?"}]}]
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "What is 2+2?"}, "", {"messages": messages, "max_tokens": 64},
                                              {"prompt": "And 3+3?", "max_tokens": 5}])
    dataset = Dataset.open(str(path))
    assert (dataset.kind, dataset.item_count, dataset.request_count) == (PROMPTS, 3, 3)
    assert list(dataset.items()) == [
        PromptRequest(f"{path}:1", [{"role": "user", "content": "What is 2+2?"}], None),
        PromptRequest(f"{path}:3", messages, 64),
        PromptRequest(f"{path}:4", [{"role": "user", "content": "And 3+3?"}], 5)]
    assert len(list(dataset.items())) == 3  # read again, as often as a run needs


PROMPT_PROBLEMS = [
    ('{"prompt": "a",}', "not JSON"),
    ('"just a string"', "not a JSON object but str"),
    ({"prompt": "a", "max_token": 5}, "unknown field 'max_token' (known: prompt, messages, max_tokens)"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, 'give either "prompt" or "messages", not both'),
    ({"prompt": "   "}, "empty prompt"),
    ({"prompt": 12}, '"prompt" must be text, not int'),
    ({"prompt": "a", "max_tokens": -3}, "max_tokens -3 is negative"),
    ({"prompt": "a", "max_tokens": 0}, "max_tokens is 0"),
    ({"prompt": "a", "max_tokens": True}, "max_tokens must be a whole number, not True"),
    ({"prompt": "a", "max_tokens": 2.5}, "max_tokens must be a whole number, not 2.5"),
    ({"messages": []}, '"messages" must be a non-empty list'),
    ({"messages": "hi"}, '"messages" must be a non-empty list'),
    ({"messages": [{"role": "system", "content": "x"}]}, "no user message"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "message 1 has role 'robot'"),
    ({"messages": [{"role": "user", "contents": "x"}]}, "message 1 has unknown field 'contents'"),
    ({"messages": [{"role": "user", "content": ""}]}, "message 1 (user) is empty"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
     "message 1 (user): content must be text, or a list of text parts"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]}, "message 2 (assistant) has no content"),
    ({"messages": ["hi"]}, "message 1 is not an object"),
]


@pytest.mark.parametrize("bad, problem", PROMPT_PROBLEMS, ids=[p[1][:40] for p in PROMPT_PROBLEMS])
def test_each_malformed_prompt_is_named_by_file_and_line(tmp_path, bad, problem):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "fine"}, "", bad, {"prompt": "fine too"}])
    with pytest.raises(TrafficError) as error:
        Dataset.open(str(path))
    assert len(problems_of(error)) == 1 and problems_of(error)[0].startswith(f"{path}:3: {problem}")
    assert str(error.value) == problems_of(error)[0]  # one problem: one line


def test_every_problem_of_a_file_is_listed_up_to_a_limit(tmp_path):
    rows = [{"prompt": "fine"}] + [{"prompt": ""}] * 30 + ["{", {"prompt": "a", "extra": 1}]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(TrafficError) as error:
        Dataset.open(str(path))
    assert error.value.total == 32 and len(problems_of(error)) == MAX_LISTED
    assert problems_of(error)[0] == f"{path}:2: empty prompt"
    message = str(error.value).splitlines()
    assert message[0] == f"{path} cannot be sent as it is (32 problems):"
    assert message[-1] == f"  ... and {32 - MAX_LISTED} more"


@pytest.mark.parametrize("first, problem", [
    (MOONCAKE_README_EXAMPLE[0], "a Mooncake trace line"),
    ({"question": "why?"}, "neither a prompt"),
])
def test_a_file_that_is_neither_prompts_nor_conversations_says_what_it_is(tmp_path, first, problem):
    path = write_jsonl(tmp_path / "p.jsonl", ["{oops", first, {"prompt": "a"}])
    with pytest.raises(TrafficError) as error:
        Dataset.open(str(path))
    assert problems_of(error)[0].startswith(f"{path}:1: not JSON")
    assert problems_of(error)[1].startswith(f"{path}:2: {problem}") and error.value.total == 2


def test_a_line_of_the_other_kind_is_named_as_such(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, sharegpt(1)])
    with pytest.raises(TrafficError) as error:
        Dataset.open(str(path))
    assert problems_of(error) == [f"{path}:2: unknown fields 'id', 'conversations' (known: prompt, messages, "
                                  "max_tokens); this line is one of conversations, but the file's first item made "
                                  "it a file of prompts"]


def test_a_file_changed_after_its_check_stops_the_reading(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, {"prompt": "b"}])
    dataset = Dataset.open(str(path))
    write_jsonl(path, [{"prompt": "a"}, {"prompt": ""}])
    reading = dataset.items()
    assert next(reading).source == f"{path}:1"
    with pytest.raises(TrafficError, match="the file changed after it was checked"):
        next(reading)


# -- ShareGPT conversations --

@pytest.mark.parametrize("form", ["array", "lines"])
def test_sharegpt_conversations_as_an_array_or_one_a_line(tmp_path, form):
    conversations = [sharegpt(1, turns=2, system="You are terse."), sharegpt(2, turns=1),
                     {"conversations": [{"from": "human", "value": "Unanswered?"}]}]
    path = write_json_array(tmp_path / "c.json", conversations) if form == "array" \
        else write_jsonl(tmp_path / "c.jsonl", conversations)
    dataset = Dataset.open(str(path))
    assert (dataset.kind, dataset.item_count, dataset.request_count) == (CONVERSATIONS, 3, 4)
    got = list(dataset.items())
    lines = item_lines(path) if form == "array" else [1, 2, 3]
    assert [c.source for c in got] == [f"{path}:{line}" for line in lines]
    assert got[0] == Conversation(f"{path}:{lines[0]}", (
        Turn("Question 1 of conversation 1: why is the sky blue?", "Answer 1 of conversation 1: Rayleigh scattering."),
        Turn("Question 2 of conversation 1: why is the sky blue?", "Answer 2 of conversation 1: Rayleigh scattering.")),
        "You are terse.")
    assert got[2].turns == (Turn("Unanswered?", None),)


def turns(*pairs) -> dict:
    return {"conversations": [{"from": role, "value": value} for role, value in pairs]}


SHAREGPT_PROBLEMS = [
    (turns(("system", "Be kind.")), "no human turn"),
    ({"conversations": []}, '"conversations" must be a non-empty list'),
    (turns(("gpt", "Hello!"), ("human", "Hi")), "turn 1 is from gpt before any human turn"),
    (turns(("human", "a"), ("gpt", "b"), ("gpt", "c")), "turn 3 is from gpt after a gpt turn"),
    (turns(("human", "a"), ("human", "b")), "turn 2 is from human after a human turn"),
    (turns(("human", "a"), ("system", "b")), "turn 2 is a system turn: only the first turn may be one"),
    (turns(("human", "a"), ("bing", "b")), "turn 2 is from 'bing'"),
    (turns(("human", "  ")), "turn 1 (human) is empty"),
    ({"conversations": [{"from": "human", "value": None}]}, 'turn 1: "value" must be text, not NoneType'),
    ({"conversations": [{"from": "human", "value": "a", "weight": 1}]}, "turn 1 has unknown field 'weight'"),
    ({"id": 1, "conversations": [{"from": "human", "value": "a"}], "model": "gpt-4"}, "unknown field 'model'"),
]


@pytest.mark.parametrize("bad, problem", SHAREGPT_PROBLEMS, ids=[p[1][:40] for p in SHAREGPT_PROBLEMS])
@pytest.mark.parametrize("form", ["array", "lines"])
def test_each_malformed_conversation_is_named_by_file_and_line(tmp_path, bad, problem, form):
    conversations = [sharegpt(1), bad, sharegpt(2)]
    path = write_json_array(tmp_path / "c.json", conversations) if form == "array" \
        else write_jsonl(tmp_path / "c.jsonl", conversations)
    line = 2 + len(json.dumps(sharegpt(1), indent=2).splitlines()) if form == "array" else 2
    with pytest.raises(TrafficError) as error:
        Dataset.open(str(path))
    assert len(problems_of(error)) == 1 and problems_of(error)[0].startswith(f"{path}:{line}: {problem}")


def test_a_conversation_replays_with_the_models_own_answers():
    conversation = Conversation("c.json:1", (Turn("Q1", "A1"), Turn("Q2", "A2"), Turn("Q3", None)), "Sys")
    replay = conversation.replay()
    assert replay.next_messages() == [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Q1"}]
    assert replay.turn == 1
    replay.answered("model one")
    assert replay.next_messages()[-3:] == [{"role": "user", "content": "Q1"},
                                           {"role": "assistant", "content": "model one"},
                                           {"role": "user", "content": "Q2"}]
    replay.answered("model two")
    assert replay.next_messages()[-2:] == [{"role": "assistant", "content": "model two"},
                                           {"role": "user", "content": "Q3"}]
    replay.answered("model three")
    assert replay.next_messages() is None and replay.turn == 3


def test_a_conversation_replays_with_the_files_answers_and_survives_a_failed_turn():
    conversation = Conversation("c.json:1", (Turn("Q1", "A1"), Turn("Q2", "A2")))
    replay = conversation.replay(file_answers=True)
    replay.next_messages()
    replay.answered(None)  # the request failed: the file's answer holds the history together
    assert replay.next_messages() == [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                                      {"role": "user", "content": "Q2"}]
    own = conversation.replay()
    own.next_messages()
    own.answered(None)  # no answer of its own to go on with
    assert own.next_messages() is None and own.turn == 1


def test_a_conversation_must_be_given_each_answer_before_the_next_turn():
    replay = Conversation("c.json:1", (Turn("Q1", "A1"), Turn("Q2", "A2"))).replay()
    with pytest.raises(RuntimeError):
        replay.answered("too early")
    replay.next_messages()
    with pytest.raises(RuntimeError):
        replay.next_messages()


# -- Mooncake traces --

def test_the_mooncake_readmes_example_shares_its_first_twelve_blocks(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", MOONCAKE_README_EXAMPLE)
    trace = Trace.open(str(path))
    summary = trace.summary
    assert (summary.requests, summary.first_timestamp_ms, summary.span_s) == (2, 27482, 3.053)
    assert (summary.input_tokens, summary.output_tokens) == (6955 + 6472, 52 + 26)
    assert (summary.shortest, summary.longest) == ((6472, 2), (6955, 1))
    first, second = trace.requests(speed=2.0)
    total = reuse(trace.requests())
    assert (total.requests, total.blocks, total.shared_blocks) == (2, 27, 12)
    assert total.shared_tokens == 12 * 512  # "they can share prefix caching for the first 12 * 512 = 6144 tokens"
    assert total.shared_token_share == pytest.approx(6144 / (6955 + 6472))
    assert total.shared_block_share == pytest.approx(12 / 27) and TraceReuse().shared_token_share is None
    assert (first.source, first.due_s, first.shared_blocks, first.shared_tokens) == (f"{path}:1", 0.0, 0, 0)
    assert (second.source, second.due_s, second.shared_blocks, second.shared_tokens) == (f"{path}:2", 3.053 / 2, 12,
                                                                                          6144)
    assert (second.input_length, second.output_length, second.hash_ids) == (6472, 26, tuple(range(46, 58)) + (2366,))


def test_a_request_shares_only_the_leading_blocks_an_earlier_one_held():
    shared = SharedBlocks(block_tokens=10)
    assert shared.add([0, 1, 2], 25) == (0, 0)
    assert shared.add([0, 1, 3], 30) == (2, 20)
    assert shared.add([4, 1, 2], 30) == (0, 0)  # block 1 again, but after another first block: no prefix to reuse
    assert shared.add([0, 1, 2], 25) == (3, 25)  # all of it, the partial last block included
    big = BITMAP_IDS + 12_345
    assert shared.add([big, 0], 15) == (0, 0)
    assert shared.add([big, 0, 9], 25) == (2, 20)


TRACE_PROBLEMS = [
    ('{"timestamp": 0, "input_length": 10', "not JSON"),
    ({"timestamp": 500, "input_length": 10, "output_length": 5, "hash_ids": [7]},
     "timestamp 500 goes back from 1000 (line 1)"),
    ({"timestamp": 2000, "input_length": -5, "output_length": 5, "hash_ids": [7]}, "input_length -5 is negative"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 0, "hash_ids": [7]}, "output_length is 0"),
    ({"timestamp": 2000, "input_length": 10.5, "output_length": 5, "hash_ids": [7]},
     "input_length must be a whole number, not 10.5"),
    ({"timestamp": "2000", "input_length": 10, "output_length": 5, "hash_ids": [7]}, "timestamp must be a number"),
    ({"timestamp": -1, "input_length": 10, "output_length": 5, "hash_ids": [7]}, "timestamp must be a number"),
    ({"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [7]},
     "1 hash ids, but input_length 600 makes 2 blocks of 512 tokens (--block-tokens)"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 5, "hash_ids": [-7]},
     "hash_ids must be a list of whole numbers from 0 on, not [-7]"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 5, "hash_ids": ["7"]},
     "hash_ids must be a list of whole numbers from 0 on, not ['7']"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 5, "hash_ids": [7.5]},
     "hash_ids must be a list of whole numbers from 0 on, not [7.5]"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 5, "hash_ids": 7},
     "hash_ids must be a list of whole numbers from 0 on, not 7"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 5, "hash_ids": "7"},
     "hash_ids must be a list of whole numbers from 0 on, not '7'"),
    ({"timestamp": 2000, "input_length": 10, "output_length": 5, "hash_ids": [7], "session_id": "a"},
     "a Mooncake request has unknown field 'session_id' (known: timestamp, input_length, output_length, hash_ids)"),
    ({"timestamp": 2000, "input_length": 10, "hash_ids": [7]}, "no output_length"),
    ([1, 2], "not a JSON object but list"),
]


@pytest.mark.parametrize("bad, problem", TRACE_PROBLEMS, ids=[p[1][:40] for p in TRACE_PROBLEMS])
def test_each_malformed_trace_line_is_named_by_file_and_line(tmp_path, bad, problem):
    good = {"timestamp": 1000, "input_length": 10, "output_length": 5, "hash_ids": [1]}
    path = write_jsonl(tmp_path / "t.jsonl", [good, "", bad, {**good, "timestamp": 3000}])
    with pytest.raises(TrafficError) as error:
        Trace.open(str(path))
    assert len(problems_of(error)) == 1 and problems_of(error)[0].startswith(f"{path}:3: {problem}")


def test_a_trace_lists_requests_too_short_for_the_servers_template(tmp_path):
    rows = [{"timestamp": t, "input_length": n, "output_length": 5, "hash_ids": [t]} for t, n in
            enumerate([40, 12, 30, 19])]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    assert Trace.open(str(path)).summary.shortest == (12, 2)
    with pytest.raises(TrafficError) as error:
        Trace.open(str(path), min_input_tokens=20)
    assert [p.split(": input_length")[0] for p in problems_of(error)] == [f"{path}:2", f"{path}:4"]
    assert "chat template and the prompt's opener (19 tokens)" in problems_of(error)[0]


def test_a_trace_changed_after_its_check_is_not_replayed_further(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", MOONCAKE_README_EXAMPLE)
    trace = Trace.open(str(path))
    write_jsonl(path, MOONCAKE_README_EXAMPLE[:1])
    with pytest.raises(TrafficError, match="holds 1 requests, not the 2 it held; the file changed"):
        list(trace.requests())
    with pytest.raises(ValueError, match="--speed"):
        next(trace.requests(speed=0))


# -- the vocabulary: words of one token each, measured through the server's count --

def test_the_vocabulary_is_measured_through_the_count_alone(vocabulary):
    assert len(vocabulary.words) == 64 and all(len(TOKEN_PATTERN.findall(w)) == 1 for w in vocabulary.words)
    assert vocabulary.empty_tokens == sim_count([{"role": "user", "content": ""}])
    assert vocabulary.opener_tokens == 2  # "Text" ":"
    drawn = vocabulary.draw("mark", "key", 300)
    assert sim_count([{"role": "user", "content": vocabulary.text(drawn)}]) == vocabulary.overhead_tokens + 300
    assert Vocabulary.from_dict(json.loads(json.dumps(vocabulary.to_dict()))) == vocabulary


def test_drawn_words_are_a_pure_function_of_mark_key_and_length(vocabulary):
    assert vocabulary.draw("m1", "k", 50) == vocabulary.draw("m1", "k", 50)
    others = [vocabulary.spaced(vocabulary.draw(mark, "k", 50)).split() for mark in ("m2", "m3", "m4", "m5")]
    mine = vocabulary.spaced(vocabulary.draw("m1", "k", 50)).split()
    assert all(sum(a == b for a, b in zip(mine, other)) < 10 for other in others)  # ~1 in 64 by chance


class FakeTokenizer:
    """The simulated engine's tokenizer with words of two tokens (``split``) and pairs that merge (``merged``)."""

    def __init__(self, split=(), merged=()):
        self.split, self.merged = set(split), list(merged)

    def __call__(self, messages: list[dict]) -> int:
        text = render_chat(messages, None)
        merges = sum(text.count(pair) for pair in self.merged)
        return len(tokenize(text)) + sum(len(re.findall(rf"\b{w}\b", text)) for w in self.split) - merges


def test_words_of_more_than_one_token_are_left_out():
    words = measure(FakeTokenizer(split=("of", "program", "license")), want=40).words
    assert len(words) == 40 and not {"of", "program", "license"} & set(words)
    assert words[:3] == ("the", "and", "to")


@pytest.mark.parametrize("fake, problem", [
    (FakeTokenizer(merged=["and the"]), "some words merge across their spaces"),
    (FakeTokenizer(merged=[": and"]), "a word merges with the opener or the chat template"),
    (FakeTokenizer(split=["the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "with", "was", "on",
                          "be", "by"]), "only 2 of 18 common English words are one token each"),
])
def test_a_tokenizer_that_cannot_count_exactly_is_refused(fake, problem):
    candidates = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "with", "was", "on", "be",
                  "by", "at", "this")
    with pytest.raises(TokenizerError, match=problem):
        measure(fake, candidates=candidates)


def test_the_de_bruijn_order_holds_every_pair_once():
    sequence = de_bruijn_pairs(5)
    assert len(sequence) == 26 and sorted(zip(sequence, sequence[1:])) == [(a, b) for a in range(5) for b in range(5)]


# -- trace prompts of an exact length --

def tail_tokens() -> int:
    """The simulated engine's chat template tokens after a user message's content."""
    return len(tokenize(render_chat([{"role": "user", "content": "X"}], None).split("X", 1)[1]))


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_trace_prompts_count_their_input_length_and_share_their_blocks(tmp_path, vocabulary):
    block = 64
    path = write_jsonl(tmp_path / "t.jsonl", mooncake_rows(60, seed=3, block_tokens=block, max_input=1500))
    trace = Trace.open(str(path), block_tokens=block, min_input_tokens=vocabulary.overhead_tokens + 1)
    prompts = TracePrompts(vocabulary, "[run 1]", block_tokens=block)
    requests = list(trace.requests())
    tokens = [sim_tokens(prompts.messages(r)) for r in requests]
    assert [len(t) for t in tokens] == [r.input_length for r in requests]
    checked = 0
    for i, later in enumerate(requests):
        for j in range(i):
            earlier = requests[j]
            k = common_prefix(list(earlier.hash_ids), list(later.hash_ids))
            if not k:
                continue
            shared = common_prefix(tokens[i], tokens[j])
            ends = min(k * block, earlier.input_length, later.input_length)  # where the shared blocks end
            assert ends - tail_tokens() <= shared < (k + 1) * block - tail_tokens(), (i, j, k, shared)
            checked += 1
    assert checked > 100
    prompts.check(sim_count, requests[:5])
    with pytest.raises(TokenizerError, match=f"{path}:1: .* tokens instead of {requests[0].input_length}"):
        prompts.check(lambda messages: sim_count(messages) + 1, requests[:1])


def test_trace_prompts_of_another_invocation_share_nothing_but_the_template(vocabulary):
    ids = (3, 4, 5)
    one, two = (sim_tokens([{"role": "user", "content": TracePrompts(vocabulary, mark).content(1400, ids)}])
                for mark in ("[run 1]", "[run 2]"))
    opening = vocabulary.overhead_tokens - tail_tokens()
    assert opening <= common_prefix(one, two) < opening + 4
    with pytest.raises(ValueError, match="not longer than this server's chat template"):
        TracePrompts(vocabulary, "m").content(vocabulary.overhead_tokens, (1,))


def test_a_trace_replayed_through_the_simulated_engine_counts_exactly_and_is_cached_by_its_blocks(start_sim,
                                                                                                    tmp_path):
    sim = start_sim(cache_block_tokens=16, prefill_tps=1e6, decode_tps=1000.0)
    count = token_counter(sim.url, engine.profile("sim"), "sim-model")
    vocabulary = measure(count)
    rows = [{"timestamp": 0, "input_length": 1300, "output_length": 1, "hash_ids": [0, 1, 2]},
            {"timestamp": 10, "input_length": 1500, "output_length": 1, "hash_ids": [0, 1, 3]},
            {"timestamp": 20, "input_length": 700, "output_length": 1, "hash_ids": [4, 5]},
            {"timestamp": 30, "input_length": 1100, "output_length": 1, "hash_ids": [0, 6, 7]}]
    trace = Trace.open(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    prompts = TracePrompts(vocabulary, "[run 1]")
    requests = list(trace.requests())
    prompts.check(count, requests)
    cached = []
    for request in requests:
        body = {"model": "sim-model", "messages": prompts.messages(request), "max_tokens": 1, "stream": False}
        usage = server.post_json(sim.url, "/v1/chat/completions", body)["usage"]
        assert usage["prompt_tokens"] == request.input_length
        cached.append(usage["prompt_tokens_details"]["cached_tokens"])
    shared = [r.shared_tokens for r in requests]
    assert shared == [0, 1024, 0, 512]
    for got, legit in zip(cached, shared):  # the engine's 16-token blocks of what the trace says is shared
        assert max(0, legit - tail_tokens() - 16) <= got <= max(legit, vocabulary.overhead_tokens), (cached, shared)


# -- shared prefixes --

def test_shared_prefixes_are_exactly_n_tokens_per_group(vocabulary):
    prefixes = SharedPrefixes(vocabulary, "[run 1]", prefix_tokens=100, groups=3)
    empty = sim_count([{"role": "user", "content": ""}])
    for group in range(3):
        assert sim_count([{"role": "user", "content": prefixes.text(group)}]) - empty == 100
    assert len({prefixes.text(g) for g in range(3)}) == 3
    question = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    sent = [prefixes.messages(question, n) for n in range(7)]
    assert sent[0][0]["content"] == prefixes.text(0) + "\n\nBe brief." and sent[0][1:] == question[1:]
    assert sent[3] == sent[0] and sent[4] == sent[1] and sent[1] != sent[0]
    assert question[0]["content"] == "Be brief."  # the caller's messages are left as they were
    # Shared is judged by what was sent, in the order it was: group 1 first sent by request 4, not request 1.
    assert [prefixes.sent(question, n)[1] for n in (0, 2, 4, 3, 1, 5)] == [0, 0, 0, 100, 100, 100]
    parts = prefixes.messages([{"role": "user", "content": [{"type": "text", "text": "Why?"}]}], 2)
    assert parts[0]["content"] == [{"type": "text", "text": prefixes.text(2) + "\n\n"},
                                   {"type": "text", "text": "Why?"}]
    assert SharedPrefixes(vocabulary, "[run 2]", 100, 3).text(0) != prefixes.text(0)


@pytest.mark.parametrize("tokens, groups, problem", [(2, 3, "--prefix-tokens must be more than 2"),
                                                     (100, 0, "--prefixes must be a whole number")])
def test_shared_prefixes_refuse_what_cannot_be_made(vocabulary, tokens, groups, problem):
    with pytest.raises(ValueError, match=problem):
        SharedPrefixes(vocabulary, "m", tokens, groups)
