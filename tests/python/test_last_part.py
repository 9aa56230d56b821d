"""Budgets usable to their last part, with the official SDKs: Claude-Code-shaped Messages calls (a ~60 KB system
prompt and tools, `max_tokens` 32,000, streamed) and Codex-shaped Responses calls (instructions and tools, no cap:
the model's 128,000) on key budgets of 20 calls, against a fake LLM that bills as providers do (input by size,
300 output tokens) and counts input as it bills it. The first refusal must come after at least 95 % of the
budget is spent, and the recorded spend never passes the limit."""

import time

import anthropic
import openai

from conftest import admin_get, new_key

FILLER = "You are an agent working in a repository; read files with the tools before you edit them. "


def text(kb):
    return FILLER * (kb * 11)


def spend_of(gateway, alias, n):
    deadline = time.time() + 10
    while True:
        rows = [r for r in admin_get(gateway, "/spend/logs?limit=1000")["data"] if r["key_alias"] == alias]
        if len(rows) >= n or time.time() > deadline:
            return sum(r["spend_nanos"] for r in rows), len(rows)
        time.sleep(0.1)


def spend_down(call, refused, most=40):
    """Calls until the first refusal; returns how many calls were admitted."""
    for n in range(most):
        try:
            call()
        except refused as e:
            assert "Budget exceeded" in str(e) or "insufficient_quota" in str(e), e
            return n
    raise AssertionError(f"no refusal in {most} calls")


def budget_of_twenty(gateway, name, call_with):
    """The cost of one call (made with an unbudgeted key), and a key whose budget pays for 20 of them."""
    call_with(new_key(gateway, {"team_id": "agents", "key_alias": f"{name}-probe"}))
    one, _ = spend_of(gateway, f"{name}-probe", 1)
    assert one > 0
    limit = 20 * one
    key = new_key(gateway, {"team_id": "agents", "key_alias": name, "max_budget": limit / 1e9})
    return key, limit


def check(gateway, name, admitted, limit):
    spent, rows = spend_of(gateway, name, admitted)
    assert rows == admitted, (rows, admitted)
    assert spent <= limit, f"never past the limit: {spent} of {limit}"
    assert spent >= 0.95 * limit, f"spent {spent / limit:.1%} of the budget in {admitted} calls before the first refusal"


def test_claude_code_shaped_calls_use_a_budget_of_twenty_to_its_last_part(metered_gateway):
    tools = [{"name": f"tool_{i}", "description": text(1),
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}} for i in range(20)]

    def call_with(key):
        c = anthropic.Anthropic(base_url=metered_gateway, api_key=key, max_retries=0, timeout=30)
        with c.messages.stream(model="claude-sonnet-5-5", max_tokens=32000, system=text(40), tools=tools,
                               messages=[{"role": "user", "content": "fix the failing test"}]) as s:
            assert s.get_final_message().usage.output_tokens > 0

    key, limit = budget_of_twenty(metered_gateway, "claude-shaped", call_with)
    admitted = spend_down(lambda: call_with(key), anthropic.RateLimitError)
    check(metered_gateway, "claude-shaped", admitted, limit)


def test_codex_shaped_calls_use_a_budget_of_twenty_to_its_last_part(metered_gateway):
    tools = [{"type": "function", "name": f"tool_{i}", "description": text(1),
              "parameters": {"type": "object", "properties": {}}} for i in range(20)] + [{"type": "web_search"}]

    def call_with(key):
        c = openai.OpenAI(base_url=metered_gateway + "/v1", api_key=key, max_retries=0, timeout=30)
        stream = c.responses.create(model="gpt-5-codex", instructions=text(20), tools=tools, store=False,
                                    stream=True, input=[{"role": "user", "content": "fix the failing test"}])
        done = [e for e in stream if e.type == "response.completed"]
        assert done and done[0].response.usage.output_tokens > 0

    key, limit = budget_of_twenty(metered_gateway, "codex-shaped", call_with)
    admitted = spend_down(lambda: call_with(key), openai.RateLimitError)
    check(metered_gateway, "codex-shaped", admitted, limit)
