"""One conversation said in each API's request shape (bench_tasks.apis): pure, no server."""

import json

import pytest

from bench_tasks import agent, apis, engine
from bench_tasks.decoders import ChatDecoder, MessagesDecoder, ResponsesDecoder


def session_after_a_tool_call() -> agent.Session:
    """System, user, the model's call of read_file, its result, the model's text, the next user question."""
    session = agent.Session.start("[m1]")
    session.turn_messages()
    session.answered("", [{"id": "call_1", "name": "read_file", "arguments": '{"path": "stats.py"}'}])
    session.answered("The median is wrong.", [])
    session.turn_messages()
    return session


def test_a_session_in_responses_items():
    instructions, items = apis.responses_input(session_after_a_tool_call().messages)
    assert instructions == f"[m1] {agent.SYSTEM}"
    assert [item.get("type", "message") for item in items] == ["message", "function_call", "function_call_output",
                                                                "message", "message"]
    assert items[0] == {"role": "user", "content": agent.USER_MESSAGES[0]}
    assert items[1] == {"type": "function_call", "call_id": "call_1", "name": "read_file",
                        "arguments": '{"path": "stats.py"}'}
    assert items[2] == {"type": "function_call_output", "call_id": "call_1", "output": agent.TOOL_RESULTS["read_file"]}
    assert items[3] == {"type": "message", "role": "assistant", "content": "The median is wrong."}
    assert items[4] == {"role": "user", "content": agent.USER_MESSAGES[1]}


def test_a_session_in_messages_turns():
    system, turns = apis.messages_turns(session_after_a_tool_call().messages)
    assert system == f"[m1] {agent.SYSTEM}"
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert turns[0]["content"] == agent.USER_MESSAGES[0]
    assert turns[1]["content"] == [{"type": "tool_use", "id": "call_1", "name": "read_file",
                                    "input": {"path": "stats.py"}}]
    assert turns[2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1",
                                    "content": agent.TOOL_RESULTS["read_file"]}]
    assert turns[3]["content"] == "The median is wrong." and turns[4]["content"] == agent.USER_MESSAGES[1]


def test_tool_results_and_text_of_one_role_join_one_turn_and_invalid_arguments_are_an_empty_input():
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "Two calls.", "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{broken"}},
                    {"id": "b", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "a", "content": "found"},
                {"role": "tool", "tool_call_id": "b", "content": "passed"},
                {"role": "user", "content": [{"type": "text", "text": "and now?"}]}]
    _, turns = apis.messages_turns(messages)
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"][0] == {"type": "text", "text": "Two calls."}
    assert turns[1]["content"][1]["input"] == {}
    assert [block["type"] for block in turns[2]["content"]] == ["tool_result", "tool_result", "text"]
    _, items = apis.responses_input(messages)
    assert [item.get("type") for item in items] == [None, "message", "function_call", "function_call", *[
        "function_call_output"] * 2, None]
    assert items[-1]["content"] == "and now?"


@pytest.mark.parametrize("api,path,decoder,limit", [
    ("chat", "/v1/chat/completions", ChatDecoder, "max_tokens"),
    ("responses", "/v1/responses", ResponsesDecoder, "max_output_tokens"),
    ("messages", "/v1/messages", MessagesDecoder, "max_tokens"),
])
def test_build_says_the_request_in_each_api_with_its_decoder(api, path, decoder, limit):
    llamacpp = engine.profile("llamacpp")
    request = apis.build(api, "m", agent.Session.start("[m2]").turn_messages(), 256, profile=llamacpp,
                         tools=agent.TOOLS, stop=["END"], ignore_eos=True)
    body = request.body
    assert (request.api, request.path, type(request.decoder)) == (api, path, decoder)
    assert body[limit] == 256 and body["temperature"] == 0 and body["stream"] is True and body["ignore_eos"] is True
    assert body["chat_template_kwargs"] == {"enable_thinking": False}  # llama.cpp's switch, on every path
    assert json.loads(json.dumps(body)) == body
    names = {tool.get("name") or tool.get("function", {}).get("name") for tool in body["tools"]}
    assert names == agent.TOOL_NAMES
    if api == "responses":
        assert request.decoder.max_output_tokens == 256 and body["store"] is False and body["stop"] == ["END"]
        # No strict: vLLM would write it into the prompt (docs/engines.md#vllm-responses-stream).
        assert all("strict" not in tool and tool["parameters"]["type"] == "object" for tool in body["tools"])
    if api == "messages":
        assert body["stop_sequences"] == ["END"] and body["system"].startswith("[m2]")
        assert all(tool["input_schema"]["type"] == "object" for tool in body["tools"])


def test_what_each_profile_adds_on_each_api():
    question = [{"role": "user", "content": "hi"}]
    vllm, generic = engine.profile("vllm"), engine.profile("generic")
    # vLLM's Messages take no ignore_eos (docs/engines.md#vllm-messages-stream): not sent.
    assert "ignore_eos" not in apis.build("messages", "m", question, 8, profile=vllm, ignore_eos=True).body
    assert apis.build("responses", "m", question, 8, profile=vllm, ignore_eos=True).body["ignore_eos"] is True
    # An engine whose paths nobody has read gets the APIs' bodies as their own documents say, nothing more.
    for api in ("responses", "messages"):
        body = apis.build(api, "m", question, 8, profile=generic, ignore_eos=True).body
        assert "ignore_eos" not in body and "chat_template_kwargs" not in body
    # --thinking on: the switch is not sent.
    body = apis.build("messages", "m", question, 8, profile=vllm, thinking=True).body
    assert "chat_template_kwargs" not in body
    # Only Chat Completions asks for per-event usage (vLLM's continuous_usage_stats).
    assert apis.build("chat", "m", question, 8, profile=vllm).body["stream_options"]["continuous_usage_stats"]
    assert "stream_options" not in apis.build("responses", "m", question, 8, profile=vllm).body
    with pytest.raises(ValueError, match="unknown API"):
        apis.build("completions", "m", question, 8, profile=vllm)


def test_each_request_gets_a_decoder_of_its_own():
    question = [{"role": "user", "content": "hi"}]
    sim = engine.profile("sim")
    first, second = (apis.build("messages", "m", question, 8, profile=sim) for _ in range(2))
    assert first.decoder is not second.decoder
