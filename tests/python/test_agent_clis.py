"""The real Claude Code and Codex CLIs (installed from npm by scripts/test.sh into target/agents) through the real
gateway, offline, against the scripted fake LLM: a plain prompt and a tool round trip each, once passed through
to an upstream that speaks the CLI's API and once translated for one that does not; spend recorded against the
key's team with the client and session; an exhausted budget stops the agent at once (Claude Code shows the
gateway's `Budget exceeded`; Codex never shows a 429's body and says `Quota exceeded`).

Every run is under `timeout` (Codex retries forever when its server is down)."""

import json
import os
import subprocess
import tempfile
import time

import pytest

from conftest import ROOT, admin_get, new_key

AGENTS = os.environ.get("SVC_AGENTS_DIR", os.path.join(ROOT, "target", "agents"))
CLAUDE = os.path.join(AGENTS, "node_modules", ".bin", "claude")
CODEX = os.path.join(AGENTS, "node_modules", ".bin", "codex")
FILE_TEXT = "the secret word is pelican"


def require(path):
    if not os.path.exists(path):
        raise RuntimeError(f"{path} is missing: scripts/test.sh installs the agent CLIs (npm install into {AGENTS})")
    return path


def workdir():
    d = tempfile.mkdtemp(prefix="svc-agent-run-")
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write(FILE_TEXT + "\n")
    return d


def run(cmd, env, cwd, limit=120):
    p = subprocess.run(["timeout", str(limit)] + cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def claude(gateway, key, prompt, model, cwd, retries="0"):
    env = dict(
        os.environ, ANTHROPIC_BASE_URL=gateway, ANTHROPIC_AUTH_TOKEN=key, ANTHROPIC_MODEL=model,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
        HOME=tempfile.mkdtemp(prefix="svc-claude-home-"),
    )
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("CLAUDE_CODE_MAX_RETRIES", None)
    if retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = retries
    return run([require(CLAUDE), "-p", prompt, "--output-format", "json"], env, cwd)


def codex(gateway, key, prompt, model, cwd):
    home = tempfile.mkdtemp(prefix="svc-codex-home-")
    os.makedirs(os.path.join(home, ".codex"))
    with open(os.path.join(home, ".codex", "config.toml"), "w") as f:
        f.write(f"""model = "{model}"
model_provider = "svc"
[analytics]
enabled = false
[features]
plugins = false
[model_providers.svc]
name = "svc gateway"
base_url = "{gateway}/v1"
env_key = "SVC_KEY"
wire_api = "responses"
""")
    env = dict(os.environ, HOME=home, SVC_KEY=key)
    env.pop("OPENAI_API_KEY", None)
    return run([require(CODEX), "exec", "--skip-git-repo-check", prompt], env, cwd, limit=90)


def records(gateway, client, n):
    deadline = time.time() + 10
    while True:
        rows = [r for r in admin_get(gateway, "/spend/logs?limit=1000")["data"] if r["client"] == client]
        if len(rows) >= n or time.time() > deadline:
            return rows
        time.sleep(0.1)


@pytest.mark.parametrize("model", ["claude-opus-5-5", "via-chat-claude"])
def test_claude_code_plain_and_tool_round_trip(agent_gateway, model):
    key = new_key(agent_gateway, {"team_id": "agents", "key_alias": f"claude-code-{model}"})
    cwd = workdir()
    code, out, err = claude(agent_gateway, key, "say hi", model, cwd)
    assert code == 0, f"exit {code}\n{out}\n{err}"
    result = json.loads(out)
    assert result["is_error"] is False and "Hello from the fake upstream." in result["result"], out

    path = os.path.join(cwd, "hello.txt")
    code, out, err = claude(agent_gateway, key, f"What does {path} say?", model, cwd)
    assert code == 0, f"exit {code}\n{out}\n{err}"
    result = json.loads(out)
    assert result["num_turns"] >= 2, out
    assert "The tool said:" in result["result"] and FILE_TEXT in result["result"], out

    rows = records(agent_gateway, "claude-cli", 3)
    assert rows, "Claude Code's calls are recorded with its client"
    assert all(r["api"] == "messages" and r["session_id"] and r["team_id"] == "agents" for r in rows), rows
    assert len({r["session_id"] for r in rows}) >= 2, "each run has its own session"


@pytest.mark.parametrize("model", ["gpt-5-codex", "via-anthropic-codex"])
def test_codex_plain_and_tool_round_trip(agent_gateway, model):
    key = new_key(agent_gateway, {"team_id": "agents", "key_alias": f"codex-{model}"})
    cwd = workdir()
    code, out, err = codex(agent_gateway, key, "say hi", model, cwd)
    assert code == 0, f"exit {code}\n{out}\n{err}"
    assert "Hello from the fake upstream." in out, f"{out}\n{err}"

    code, out, err = codex(agent_gateway, key, "show me hello.txt", model, cwd)
    assert code == 0, f"exit {code}\n{out}\n{err}"
    assert "The tool said:" in out and FILE_TEXT in out, f"{out}\n{err}"

    rows = records(agent_gateway, "codex_exec", 3)
    assert rows and all(r["api"] == "responses" and r["session_id"] and r["team_id"] == "agents" for r in rows), rows


def test_an_exhausted_budget_stops_both_agents_with_the_gateways_message(agent_gateway):
    poor = new_key(agent_gateway, {"team_id": "agents", "max_budget": 0.000001})
    cwd = workdir()
    # With Claude Code's own retry settings: the refusal's `x-should-retry: false` stops it at once.
    started = time.time()
    code, out, err = claude(agent_gateway, poor, "say hi", "claude-opus-5-5", cwd, retries=None)
    assert code != 0 or json.loads(out).get("is_error"), out
    assert "Budget exceeded" in out + err, f"{out}\n{err}"
    assert time.time() - started < 30, "no retries"
    # Codex never shows the body of a 429; the refusal's code `insufficient_quota` makes it stop at once.
    started = time.time()
    code, out, err = codex(agent_gateway, poor, "say hi", "gpt-5-codex", cwd)
    assert code not in (0, 124), f"Codex must stop by itself, not be killed by timeout: {code}"
    assert time.time() - started < 30, "no retry storm"
    assert "Quota exceeded" in out + err, f"{out}\n{err}"
