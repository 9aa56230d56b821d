"""The real Gemini CLI (installed from npm by scripts/test.sh into target/agents) through the real gateway, offline,
against the scripted fake LLM (tests/python/fake_llm.py), as shared/reference/gemini-cli.md records it runs: a plain
prompt and a tool round trip (`read_file` of a file the test made), once passed through to a Gemini-speaking
deployment (`gemini-*`, `gemini/` to the fake's Gemini API) and once translated for an OpenAI-compatible one
(`via-chat-*`); its spend recorded against the key with its client (`GeminiCLI-tui`) and a session; an exhausted
budget stops it at once with the gateway's message (a `RetryInfo` past 300 s makes it give up without retrying).

Every run is under `timeout`."""

import json
import os
import tempfile
import time

import pytest

from conftest import admin_get, new_key
from test_agent_clis import AGENTS, FILE_TEXT, records, require, run, workdir

GEMINI = os.path.join(AGENTS, "node_modules", ".bin", "gemini")
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def gemini(gateway, key, prompt, model, cwd, limit=90):
    home = tempfile.mkdtemp(prefix="svc-gemini-home-")
    os.makedirs(os.path.join(home, ".gemini"))
    os.makedirs(os.path.join(home, "tmp"))
    with open(os.path.join(home, ".gemini", "settings.json"), "w") as f:
        json.dump(SETTINGS, f)
    env = dict(os.environ, HOME=home, TMPDIR=os.path.join(home, "tmp"), GOOGLE_GEMINI_BASE_URL=gateway,
               GEMINI_API_KEY=key, GEMINI_CLI_TRUST_WORKSPACE="true")
    for name in ("GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_GENAI_USE_VERTEXAI"):
        env.pop(name, None)
    return run([require(GEMINI), "-p", prompt, "-m", model, "--output-format", "json"], env, cwd, limit=limit)


@pytest.mark.parametrize("model", ["gemini-3.5-pro", "via-chat-gemini"])
def test_gemini_cli_plain_and_tool_round_trip(agent_gateway, model):
    key = new_key(agent_gateway, {"team_id": "agents", "key_alias": f"gemini-cli-{model}"})
    cwd = workdir()
    code, out, err = gemini(agent_gateway, key, "say hi", model, cwd)
    assert code == 0, f"exit {code}\n{out}\n{err}"
    result = json.loads(out)
    assert "Hello from the fake upstream." in result["response"], out
    tokens = result["stats"]["models"][model]["tokens"]
    assert tokens["prompt"] > 0 and tokens["candidates"] > 0, tokens

    path = os.path.join(cwd, "hello.txt")
    code, out, err = gemini(agent_gateway, key, f"What does {path} say?", model, cwd)
    assert code == 0, f"exit {code}\n{out}\n{err}"
    result = json.loads(out)
    assert "The tool said:" in result["response"] and FILE_TEXT in result["response"], out

    deadline = time.time() + 10
    while True:
        rows = [r for r in records(agent_gateway, "GeminiCLI-tui", 3) if r["model"] == model]
        if len(rows) >= 3 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert len(rows) == 3, rows
    assert all(r["api"] == "gemini" and r["team_id"] == "agents" for r in rows), rows
    assert all(r["session_id"] and r["session_id"].startswith("gemini-") for r in rows), rows
    sessions = {r["session_id"] for r in rows}
    assert len(sessions) == 2, f"the tool run's two calls share a session, the plain run has its own: {rows}"
    assert all(float(r["spend"]) > 0 for r in rows), rows
    if model.startswith("gemini-"):
        # Passed through: the fake's own counts, its cached and thinking tokens included, are the bill.
        assert all(r["prompt_tokens"] == 100 and r["completion_tokens"] == 10 for r in rows), rows


def test_an_exhausted_budget_stops_gemini_cli_at_once(agent_gateway):
    poor = new_key(agent_gateway, {"team_id": "agents", "max_budget": 0.000001})
    cwd = workdir()
    before = admin_get(agent_gateway, "/gateway/stats")["requests"]
    started = time.time()
    code, out, err = gemini(agent_gateway, poor, "say hi", "gemini-3.5-pro", cwd)
    assert code not in (0, 124), f"Gemini CLI must stop by itself, not be killed by timeout: {code}\n{out}\n{err}"
    assert time.time() - started < 30, "no retries"
    assert admin_get(agent_gateway, "/gateway/stats")["requests"] - before == 1, "one request, no retry"
    assert "Budget exceeded" in out + err, f"{out}\n{err}"
