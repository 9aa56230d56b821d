"""Starts the real `svc` binary for the SDK tests: a temp directory, a config whose aliases are served by the
mock provider, an ephemeral port read from the startup line."""

import json
import os
import re
import sys
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

MASTER = "sk-master-python-sdk-test"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = """
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://{db}
model_list:
  - model_name: openai/gpt-4.1-mini
    params: {{model: mock/gpt-4.1-mini, input_cost_per_token: 0.0000004, output_cost_per_token: 0.0000016}}
  - model_name: anthropic/claude-opus-4-1
    params: {{model: mock/claude-opus-4-1, input_cost_per_token: 0.000015, output_cost_per_token: 0.000075}}
gateway_settings:
  teams:
    - team_id: executor
      budget_limit: 50
      models: [openai/gpt-4.1-mini]
"""


def svc_binary():
    path = os.environ.get("SVC_BIN", os.path.join(ROOT, "target", "debug", "svc"))
    if not os.path.exists(path):
        raise RuntimeError(f"svc binary not found at {path}: build it first (cargo build --bin svc)")
    return path


@pytest.fixture(scope="session")
def gateway():
    proc, url = serve(CONFIG, "svc-sdk-")
    yield url
    _stop(proc)


@pytest.fixture(scope="session")
def executor_key(gateway):
    return new_key(gateway, {"team_id": "executor", "key_alias": "sdk"})


# --- An `anthropic/…` alias backed by the fake Anthropic server (tests/python/test_anthropic_sdk.py) ---

ANTHROPIC_KEY = "sk-ant-fake-upstream-key"
ANTHROPIC_ALIAS = "anthropic/claude-sonnet-4-5"
ANTHROPIC_CONFIG = """
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://{db}
model_list:
  - model_name: {alias}
    model_info: {{id: claude-fake-1}}
    params:
      model: anthropic/claude-fake
      api_base: {api_base}
      api_key: {key}
      max_output_tokens: 1024
      input_cost_per_token: 0.000003
      output_cost_per_token: 0.000015
gateway_settings:
  teams:
    - team_id: orchestrator
      budget_limit: 50
      models: [{alias}]
"""


def _spawn(cmd, pattern, env=None, cwd=None):
    """Starts `cmd`, waits (30 s at most) for a stderr line matching `pattern`; returns (process, match, log)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
    found = {}
    log = []

    def read():
        for line in proc.stderr:
            log.append(line)
            m = re.search(pattern, line)
            if m and "m" not in found:
                found["m"] = m

    threading.Thread(target=read, daemon=True).start()
    deadline = time.time() + 30
    while "m" not in found and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if "m" not in found:
        proc.kill()
        raise RuntimeError(f"{cmd[0]} did not start:\n" + "".join(log))
    return proc, found["m"], log


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def serve(template, prefix, env_in=None, **fields):
    """Starts `svc serve` in a new temporary directory on `template` (its `{db}` filled with a database there, the
    rest with `fields`), with the variables `env_in(directory)` gives added; returns (process, base URL)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    config = os.path.join(tmp, "svc.yaml")
    with open(config, "w") as f:
        f.write(template.format(db=os.path.join(tmp, "svc.db"), **fields))
    env = dict(os.environ, SVC_MASTER_KEY=MASTER, RUST_LOG="info", **(env_in(tmp) if env_in else {}))
    env.pop("SVC_CONFIG", None)
    proc, m, _ = _spawn([svc_binary(), "serve", "--config", config], r"listening on (https?://\S+)", env=env, cwd=tmp)
    return proc, m.group(1)


def fake_anthropic_binary():
    path = os.environ.get(
        "SVC_FAKE_ANTHROPIC_BIN", os.path.join(os.path.dirname(svc_binary()), "svc-fake-anthropic")
    )
    if not os.path.exists(path):
        raise RuntimeError(f"svc-fake-anthropic not found at {path}: build it first (cargo build -p svc-testkit)")
    return path


@pytest.fixture(scope="session")
def fake_anthropic():
    """The fake Anthropic Messages API as a process: {"url": API base, "control": control base}."""
    proc, m, _ = _spawn(
        [fake_anthropic_binary(), "--api-key", ANTHROPIC_KEY],
        r"listening on (http://\S+) control (http://\S+)",
    )
    yield {"url": m.group(1), "control": m.group(2)}
    _stop(proc)


@pytest.fixture(scope="session")
def anthropic_gateway(fake_anthropic):
    """A gateway whose `anthropic/claude-sonnet-4-5` alias is served by the fake Anthropic server."""
    proc, url = serve(ANTHROPIC_CONFIG, "svc-sdk-anthropic-", alias=ANTHROPIC_ALIAS, api_base=fake_anthropic["url"],
                      key=ANTHROPIC_KEY)
    yield url
    _stop(proc)


@pytest.fixture(scope="session")
def orchestrator_key(anthropic_gateway):
    return new_key(anthropic_gateway, {"team_id": "orchestrator", "key_alias": "sdk-anthropic"})


# --- A gateway delivering events to webhooks received here (tests/python/test_webhooks.py) ---

import base64
import http.server

# One Standard Webhooks secret (`whsec_` + base64 of the key) and one plain secret (its raw bytes are the key).
WHSEC_SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
PLAIN_SECRET = "plain-s3cret"
WEBHOOK_CONFIG = """
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://{db}
model_list:
  - model_name: openai/gpt-4.1-mini
    params: {{model: mock/gpt-4.1-mini}}
notifications:
  webhooks:
    - {{url: '{receiver}/whsec', events: ['*'], secret: '{whsec}', timeout_seconds: 5, retry: 3}}
    - {{url: '{receiver}/plain', events: ['task.*'], secret: '{plain}', timeout_seconds: 5, retry: 3}}
"""


class _Receiver(http.server.ThreadingHTTPServer):
    """Records every POST: (path, headers as a dict, exact body bytes); answers 200."""

    daemon_threads = True

    def __init__(self):
        self.received = []
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler):
                body = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
                with self.lock:
                    self.received.append((handler.path, dict(handler.headers.items()), body))
                handler.send_response(200)
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def wait_for(self, n, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if len(self.received) >= n:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {n} webhook requests, have {len(self.received)}")


@pytest.fixture(scope="session")
def webhook_gateway():
    """A gateway with two webhooks pointing at a receiver in this process: {"url", "receiver"}."""
    receiver = _Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{receiver.server_address[1]}"
    proc, url = serve(WEBHOOK_CONFIG, "svc-webhooks-", receiver=base, whsec=WHSEC_SECRET, plain=PLAIN_SECRET,
                      env_in=lambda tmp: {"SVC_HOOKS_FILE": os.path.join(tmp, "hooks.json")})
    yield {"url": url, "receiver": receiver}
    _stop(proc)
    receiver.shutdown()


# --- The agent APIs against a scripted fake LLM (tests/python/test_agent_sdks.py, test_agent_clis.py) ---

AGENT_CONFIG = """
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://{db}
model_list:
  # Anthropic Messages, passed through.
  - model_name: 'claude-*'
    params: {{model: 'anthropic/*', api_base: '{fake}', api_key: fake-ant-key, max_output_tokens: 32000,
              input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}}
  # Any API translated to OpenAI chat completions.
  - model_name: 'via-chat-*'
    params: {{model: 'openai/*', api_base: '{fake}/v1', input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}}
  # OpenAI Responses, passed through.
  - model_name: 'gpt-*'
    params: {{model: 'openai/*', api_base: '{fake}/v1', input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}}
  # Any API translated to Anthropic Messages.
  - model_name: 'via-anthropic-*'
    params: {{model: 'anthropic/claude-fake', api_base: '{fake}', api_key: fake-ant-key, max_output_tokens: 4096}}
  # Google's Gemini API, passed through.
  - model_name: 'gemini-*'
    params: {{model: 'gemini/*', api_base: '{fake}', api_key: fake-gemini-key,
              input_cost_per_token: 0.00000125, output_cost_per_token: 0.00001, cache_read_input_token_cost: 0.0000003}}
  - model_name: text-embedding-3-small
    params: {{model: mock/text-embedding-3-small, input_cost_per_token: 0.00000002}}
gateway_settings:
  teams:
    - team_id: agents
      budget_limit: 50
      models: ['claude-*', 'via-chat-*', 'gpt-*', 'via-anthropic-*', 'gemini-*', text-embedding-3-small]
"""


@pytest.fixture(scope="session")
def fake_llm():
    """The scripted fake LLM (tests/python/fake_llm.py) as a process: its base URL."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_llm.py")
    proc, m, _ = _spawn([sys.executable, script], r"listening on (http://\S+)")
    yield m.group(1)
    _stop(proc)


@pytest.fixture(scope="session")
def agent_gateway(fake_llm):
    """A gateway whose aliases reach the fake LLM by pass-through and by translation."""
    proc, url = serve(AGENT_CONFIG, "svc-agents-", fake=fake_llm)
    yield url
    _stop(proc)


# --- The last part of a budget: agent-shaped calls against a fake LLM that bills as providers do ---

METERED_CONFIG = """
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://{db}
model_list:
  - model_name: 'claude-*'
    params: {{model: 'anthropic/*', api_base: '{fake}', api_key: fake-ant-key, max_output_tokens: 32000,
              max_input_tokens: 200000, input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}}
  - model_name: 'gpt-*'
    params: {{model: 'openai/*', api_base: '{fake}/v1', max_output_tokens: 128000, max_input_tokens: 272000,
              input_cost_per_token: 0.00000125, output_cost_per_token: 0.00001}}
gateway_settings:
  teams:
    - team_id: agents
      models: ['claude-*', 'gpt-*']
"""


@pytest.fixture(scope="session")
def metered_llm():
    """The scripted fake LLM billing as providers do (`--metered`): its base URL."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_llm.py")
    proc, m, _ = _spawn([sys.executable, script, "--metered"], r"listening on (http://\S+)")
    yield m.group(1)
    _stop(proc)


@pytest.fixture(scope="session")
def metered_gateway(metered_llm):
    """A gateway passing Messages and Responses through to the metered fake LLM, at real models' prices."""
    proc, url = serve(METERED_CONFIG, "svc-metered-", fake=metered_llm)
    yield url
    _stop(proc)


def new_key(gateway, body):
    """Creates a virtual key with the master key; returns the secret."""
    req = urllib.request.Request(
        gateway + "/key/generate",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["key"]


def admin_get(gateway, path):
    req = urllib.request.Request(gateway + path, headers={"Authorization": f"Bearer {MASTER}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def fake_requests(fake):
    with urllib.request.urlopen(fake + "/requests", timeout=10) as r:
        return json.load(r)
