"""The official `anthropic` and `openai` Python SDKs against the agent APIs of the real gateway, backed by the
scripted fake LLM: Messages passed through to an Anthropic-shaped upstream and translated to an OpenAI-compatible
one, Responses passed through to an OpenAI upstream and translated to an Anthropic-shaped one, count_tokens,
embeddings, budgets, and spend recorded with the client."""

import json
import time

import anthropic
import httpx
import openai
import pytest

from conftest import admin_get, fake_requests, new_key

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SYSTEM = [
    {"type": "text", "text": "You are a careful agent."},
    {"type": "text", "text": "Answer briefly.", "cache_control": {"type": "ephemeral"}},
]


@pytest.fixture(scope="module")
def agent_key(agent_gateway):
    return new_key(agent_gateway, {"team_id": "agents", "key_alias": "sdk-agent"})


def ant(gateway, key):
    return anthropic.Anthropic(base_url=gateway, api_key=key, max_retries=0, timeout=20)


def oai(gateway, key):
    return openai.OpenAI(base_url=gateway + "/v1", api_key=key, max_retries=0, timeout=20)


def last_request(fake, suffix):
    return [r for r in fake_requests(fake) if r["path"].split("?")[0].endswith(suffix)][-1]


@pytest.mark.parametrize("model", ["claude-sonnet-5-5", "via-chat-claude"])
def test_messages_plain_streamed_and_tool_round_trip(agent_gateway, agent_key, fake_llm, model):
    c = ant(agent_gateway, agent_key)
    msg = c.messages.create(model=model, max_tokens=1000, system=SYSTEM, messages=[{"role": "user", "content": "say hi"}])
    assert msg.type == "message" and msg.model == model
    assert msg.content[0].text == "Hello from the fake upstream."
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens == 7
    if model.startswith("claude-"):
        sent = last_request(fake_llm, "/messages")["body"]
        expected = {"model": model, "max_tokens": 1000, "system": SYSTEM, "messages": [{"role": "user", "content": "say hi"}]}
        assert sent == expected, "passed through unchanged"
        assert msg.usage.input_tokens == 100 and msg.usage.cache_read_input_tokens == 40

    with c.messages.stream(model=model, max_tokens=1000, messages=[{"role": "user", "content": "say hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Hello from the fake upstream."
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 7

    first = c.messages.create(
        model=model, max_tokens=1000, tools=[WEATHER],
        messages=[{"role": "user", "content": "what is in hello.txt?"}],
    )
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    second = c.messages.create(
        model=model, max_tokens=1000, tools=[WEATHER],
        messages=[
            {"role": "user", "content": "what is in hello.txt?"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C",
                                          "cache_control": {"type": "ephemeral"}}]},
        ],
    )
    assert second.content[0].text == "The tool said: sunny, 21 C"


def test_count_tokens_passes_through_or_estimates(agent_gateway, agent_key):
    c = ant(agent_gateway, agent_key)
    messages = [{"role": "user", "content": "count these tokens please"}]
    assert c.messages.count_tokens(model="claude-sonnet-5-5", messages=messages).input_tokens == 123
    estimated = c.messages.count_tokens(model="via-chat-claude", messages=messages).input_tokens
    assert 5 <= estimated <= 100


def test_messages_errors_reach_the_sdk_in_anthropic_shape(agent_gateway, agent_key):
    with pytest.raises(anthropic.AuthenticationError):
        ant(agent_gateway, "sk-wrong").messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.NotFoundError):
        ant(agent_gateway, agent_key).messages.create(model="llama-3", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    # A budget refusal is final (`x-should-retry: false`): the SDK does not retry it, whatever its max_retries.
    poor = new_key(agent_gateway, {"team_id": "agents", "max_budget": 0.000001})
    sent = []
    counting = httpx.Client(event_hooks={"request": [sent.append]})
    retrying = anthropic.Anthropic(base_url=agent_gateway, api_key=poor, max_retries=3, http_client=counting)
    with pytest.raises(anthropic.RateLimitError) as e:
        retrying.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["message"] == "Budget exceeded"
    assert len(sent) == 1, f"retried {len(sent) - 1} times"


@pytest.mark.parametrize("model", ["gpt-5-codex", "via-anthropic-codex"])
def test_responses_plain_streamed_and_function_tools(agent_gateway, agent_key, fake_llm, model):
    c = oai(agent_gateway, agent_key)
    r = c.responses.create(model=model, input="say hi", store=False)
    assert r.output_text == "Hello from the fake upstream."
    assert r.model == model and r.usage.output_tokens == 7
    if model.startswith("gpt-"):
        assert last_request(fake_llm, "/responses")["body"] == {"model": model, "input": "say hi", "store": False}

    kinds, text, completed = [], "", None
    for ev in c.responses.create(model=model, input=[{"role": "user", "content": "say hi"}], stream=True):
        kinds.append(ev.type)
        if ev.type == "response.output_text.delta":
            text += ev.delta
        if ev.type == "response.completed":
            completed = ev.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert text == "Hello from the fake upstream." and completed.usage.output_tokens == 7

    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
    first = c.responses.create(model=model, input="cat hello.txt", tools=tools)
    call = next(o for o in first.output if o.type == "function_call")
    assert call.name == "exec_command" and json.loads(call.arguments) == {"cmd": "cat hello.txt"}
    second = c.responses.create(
        model=model, tools=tools,
        input=[
            {"role": "user", "content": "cat hello.txt"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "hi there"},
        ],
    )
    assert second.output_text == "The tool said: hi there"


def test_embeddings_and_spend_by_client(agent_gateway, agent_key):
    c = oai(agent_gateway, agent_key)
    e = c.embeddings.create(model="text-embedding-3-small", input=["one", "two"])
    assert len(e.data) == 2 and len(e.data[0].embedding) == 16
    assert e.usage.prompt_tokens > 0
    again = c.embeddings.create(model="text-embedding-3-small", input=["one", "two"])
    assert again.data[0].embedding == e.data[0].embedding, "deterministic"
    deadline = time.time() + 10
    while True:
        groups = {g["group"]: g for g in admin_get(agent_gateway, "/spend/logs?group_by=client")["data"]}
        apis = {g["group"] for g in admin_get(agent_gateway, "/spend/logs?group_by=api")["data"]}
        if {"Anthropic", "OpenAI"} <= set(groups) and {"messages", "responses", "embeddings"} <= apis or time.time() > deadline:
            break
        time.sleep(0.1)
    assert {"Anthropic", "OpenAI"} <= set(groups), groups
    assert {"messages", "responses", "embeddings"} <= apis, apis
