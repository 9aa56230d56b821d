"""The official `openai` Python SDK against the gateway with an `anthropic/…` alias served by the fake Anthropic
Messages API (a separate process): plain, streamed and tool-calling completions look as they would from OpenAI,
streamed tool-call arguments reassemble to valid JSON, and the upstream receives a proper Messages API request."""

import json
import urllib.request

import openai
from openai import OpenAI

from conftest import ANTHROPIC_ALIAS, ANTHROPIC_KEY

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
TOOL_INPUT = {"city": "Paris", "unit": "c", "details": {"hourly": [1, 2, 3], "note": "quotes \" and ünïcode"}}


def client(gateway, key):
    return OpenAI(base_url=gateway + "/v1", api_key=key, max_retries=0, timeout=20)


def control(fake, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        fake["control"] + path, data=data, headers={"Content-Type": "application/json"}, method="POST" if data else "GET"
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def upstream_requests(fake):
    return [r for r in control(fake, "/requests") if r["path"] == "/v1/messages"]


def tool_message(text=None):
    content = [] if text is None else [{"type": "text", "text": text}]
    content.append({"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": TOOL_INPUT})
    return {
        "id": "msg_tool",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 25},
    }


def test_chat_completion(anthropic_gateway, orchestrator_key, fake_anthropic):
    r = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        temperature=0.2,
        stop=["END"],
    )
    assert r.object == "chat.completion"
    assert r.model == ANTHROPIC_ALIAS
    assert isinstance(r.id, str) and r.id and isinstance(r.created, int)
    assert r.choices[0].index == 0
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello from the fake Anthropic server."
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (10, 5, 15)
    sent = upstream_requests(fake_anthropic)[-1]
    assert sent["headers"]["x-api-key"] == ANTHROPIC_KEY
    assert sent["headers"]["anthropic-version"]
    body = sent["body"]
    assert body["model"] == "claude-fake"
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert body["max_tokens"] == 1024 and body["temperature"] == 0.2 and body["stop_sequences"] == ["END"]


def test_raw_response_names_the_deployment(anthropic_gateway, orchestrator_key):
    raw = client(anthropic_gateway, orchestrator_key).chat.completions.with_raw_response.create(
        model=ANTHROPIC_ALIAS, messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-svc-model-id"] == "claude-fake-1"
    assert raw.parse().model == ANTHROPIC_ALIAS


def test_streaming(anthropic_gateway, orchestrator_key):
    stream = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS,
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.model == ANTHROPIC_ALIAS for c in chunks)
    assert len({c.id for c in chunks}) == 1, "one id for the whole stream"
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert text == "Hello from the fake Anthropic server."
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (10, 5)


def test_streaming_without_usage_has_no_usage_chunk(anthropic_gateway, orchestrator_key):
    stream = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_tool_call(anthropic_gateway, orchestrator_key, fake_anthropic):
    control(fake_anthropic, "/push", {"message": tool_message()})
    r = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.role == "assistant"
    (call,) = choice.message.tool_calls
    assert (call.id, call.type, call.function.name) == ("toolu_01", "function", "get_weather")
    assert isinstance(call.function.arguments, str)
    assert json.loads(call.function.arguments) == TOOL_INPUT
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (40, 25)
    body = upstream_requests(fake_anthropic)[-1]["body"]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather in a city",
            "input_schema": WEATHER_TOOL["function"]["parameters"],
        }
    ]
    assert body["tool_choice"] == {"type": "auto"}


def test_streamed_tool_call_arguments_reassemble_to_json(anthropic_gateway, orchestrator_key, fake_anthropic):
    control(fake_anthropic, "/push", {"message": tool_message(text="Let me check.")})
    stream = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    text, calls, finish = "", {}, None
    fragments = 0
    for chunk in stream:
        assert chunk.model == ANTHROPIC_ALIAS
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            # The OpenAI way: the first delta of a call has its index, id, type and name; later ones only
            # argument fragments under the same index.
            call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id:
                assert call["id"] is None, "id sent once"
                call["id"] = tc.id
                assert tc.type == "function"
            if tc.function and tc.function.name:
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
                fragments += 1
        finish = chunk.choices[0].finish_reason or finish
    assert text == "Let me check."
    assert list(calls) == [0]
    assert (calls[0]["id"], calls[0]["name"]) == ("toolu_01", "get_weather")
    assert fragments > 1, "arguments arrive in fragments"
    assert json.loads(calls[0]["arguments"]) == TOOL_INPUT
    assert finish == "tool_calls"


def test_tool_results_round_trip(anthropic_gateway, orchestrator_key, fake_anthropic):
    r = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_01",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps(TOOL_INPUT)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_01", "content": "18 C, sunny"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert r.choices[0].message.content == "Hello from the fake Anthropic server."
    body = upstream_requests(fake_anthropic)[-1]["body"]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    tool_use = body["messages"][1]["content"][-1]
    assert (tool_use["type"], tool_use["id"], tool_use["name"], tool_use["input"]) == (
        "tool_use",
        "toolu_01",
        "get_weather",
        TOOL_INPUT,
    )
    result = body["messages"][2]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_01")


def test_an_overloaded_upstream_is_retried(anthropic_gateway, orchestrator_key, fake_anthropic):
    before = len(upstream_requests(fake_anthropic))
    control(fake_anthropic, "/push", {"error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"}})
    r = client(anthropic_gateway, orchestrator_key).chat.completions.create(
        model=ANTHROPIC_ALIAS, messages=[{"role": "user", "content": "hi"}]
    )
    assert r.choices[0].message.content == "Hello from the fake Anthropic server."
    assert len(upstream_requests(fake_anthropic)) == before + 2, "the 529 was retried once"


def test_a_bad_request_is_the_sdks_typed_error(anthropic_gateway, orchestrator_key, fake_anthropic):
    control(fake_anthropic, "/push", {"error": {"status": 400, "type": "invalid_request_error", "message": "bad"}})
    try:
        client(anthropic_gateway, orchestrator_key).chat.completions.create(
            model=ANTHROPIC_ALIAS, messages=[{"role": "user", "content": "hi"}]
        )
        raise AssertionError("expected BadRequestError")
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert e.body["message"] == "bad"
