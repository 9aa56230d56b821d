"""The README's agent commands, as written, against the demo of its Quick start (issue 30): `svc serve` with no
config file, then the README's block under "Pointing the agents at the gateway" run by bash with the real
Claude Code and Codex CLIs and `svc` on PATH, in a home of its own. Only the gateway's port differs from the
README (the test's gateway is on a free one). Each CLI must print the demo's mock answer for the model name it
sent by default, and the spend must be recorded against the teams the README names.

Runs under `timeout`; nothing leaves 127.0.0.1."""

import os
import re
import subprocess
import tempfile

from conftest import MASTER, ROOT, _spawn, _stop, admin_get, svc_binary
from test_agent_clis import AGENTS, CLAUDE, CODEX, require


def readme_block():
    """The shell block that follows "Pointing the agents at the gateway" in the README."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    at = text.index("Pointing the agents at the gateway")
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, at)
    assert m, "the README's agent block is missing"
    return m.group(1)


def test_the_readmes_agent_commands_run_as_written_on_the_demo():
    require(CLAUDE)
    require(CODEX)
    home = tempfile.mkdtemp(prefix="svc-readme-home-")
    data = os.path.join(home, ".local", "share")
    env = dict(os.environ, HOME=home, XDG_DATA_HOME=data, SVC_MASTER_KEY=MASTER, RUST_LOG="info")
    for k in ("SVC_CONFIG", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL",
              "OPENAI_API_KEY", "CLAUDE_CODE_MAX_RETRIES"):
        env.pop(k, None)
    # The demo, as the Quick start runs it (no config file anywhere), on a free port.
    proc, m, log = _spawn([svc_binary(), "serve", "--port", "0"], r"listening on (http://\S+)", env=env, cwd=home)
    try:
        url = m.group(1)
        port = url.rsplit(":", 1)[1]
        block = readme_block().replace("127.0.0.1:4000", f"127.0.0.1:{port}")
        path = os.pathsep.join([os.path.dirname(svc_binary()), os.path.join(AGENTS, "node_modules", ".bin"),
                                env.get("PATH", "")])
        run_env = dict(env, PATH=path, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                       DISABLE_AUTOUPDATER="1")
        p = subprocess.run(["timeout", "240", "bash", "-euo", "pipefail", "-c", block], env=run_env, cwd=home,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        out = p.stdout
        assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{out}\nstderr:\n{p.stderr}\ngateway:\n{''.join(log)}"
        # Claude Code's default model and Codex's each reached the demo's mock through its wildcard.
        assert re.search(r"\[mock claude-[^\]]+\]", out), out
        assert re.search(r"\[mock gpt-[^\]]+\]", out), out
        rows = admin_get(url, "/spend/logs?limit=1000")["data"]
        teams = {(r["client"], r["team_id"]) for r in rows if r["status"] == 200}
        assert ("claude-cli", "orchestrator") in teams, rows
        assert any(c.startswith("codex") and t == "executor" for c, t in teams), rows
    finally:
        _stop(proc)
