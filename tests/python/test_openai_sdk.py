"""The official `openai` Python SDK against the real gateway: plain and streamed completions, model listing,
and the SDK's typed exceptions for 401, 403 and 404."""

import openai
import pytest
from openai import OpenAI


def client(gateway, key):
    return OpenAI(base_url=gateway + "/v1", api_key=key, max_retries=0, timeout=20)


def test_chat_completion(gateway, executor_key):
    r = client(gateway, executor_key).chat.completions.create(
        model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "hello sdk"}], temperature=0.1
    )
    assert r.object == "chat.completion"
    assert r.model == "openai/gpt-4.1-mini"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "[mock gpt-4.1-mini] hello sdk"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens > 0


def test_raw_response_headers(gateway, executor_key):
    raw = client(gateway, executor_key).chat.completions.with_raw_response.create(
        model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-svc-model-id"] == "openai/gpt-4.1-mini"
    assert float(raw.headers["x-svc-overhead-duration-ms"]) >= 0
    assert raw.headers["x-request-id"]


def test_streaming(gateway, executor_key):
    stream = client(gateway, executor_key).chat.completions.create(
        model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "stream please"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "[mock gpt-4.1-mini] stream please"
    assert all(c.model == "openai/gpt-4.1-mini" for c in chunks)
    assert all(c.usage is None for c in chunks), "no usage chunk unless asked"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_streaming_with_usage(gateway, executor_key):
    stream = client(gateway, executor_key).chat.completions.create(
        model="openai/gpt-4.1-mini",
        messages=[{"role": "user", "content": "count me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens > 0


def test_models_list(gateway, executor_key):
    ids = [m.id for m in client(gateway, executor_key).models.list()]
    assert ids == ["openai/gpt-4.1-mini"]
    from conftest import MASTER

    all_ids = [m.id for m in client(gateway, MASTER).models.list()]
    assert all_ids == ["openai/gpt-4.1-mini", "anthropic/claude-opus-4-1"]
    m = client(gateway, MASTER).models.list().data[1]
    assert (m.object, m.owned_by) == ("model", "anthropic")


def test_authentication_error(gateway):
    with pytest.raises(openai.AuthenticationError) as e:
        client(gateway, "sk-svc-not-a-real-key-000000000000000000").chat.completions.create(
            model="openai/gpt-4.1-mini", messages=[{"role": "user", "content": "x"}]
        )
    assert e.value.status_code == 401


def test_permission_denied(gateway, executor_key):
    with pytest.raises(openai.PermissionDeniedError) as e:
        client(gateway, executor_key).chat.completions.create(
            model="anthropic/claude-opus-4-1", messages=[{"role": "user", "content": "x"}]
        )
    assert e.value.status_code == 403
    assert e.value.body["type"] == "team_model_access_denied"


def test_not_found(gateway, executor_key):
    with pytest.raises(openai.NotFoundError) as e:
        client(gateway, executor_key).chat.completions.create(
            model="openai/gpt-9", messages=[{"role": "user", "content": "x"}]
        )
    assert e.value.status_code == 404
    assert e.value.code == "model_not_found"


def test_bad_request(gateway, executor_key):
    with pytest.raises(openai.BadRequestError) as e:
        client(gateway, executor_key).chat.completions.create(model="openai/gpt-4.1-mini", messages=[])
    assert e.value.status_code == 400
    assert e.value.param == "messages"
