// Starts the real `svc` binary for the dashboard tests and the page-weight measurement: a temp directory, a
// config (SQLite, `mock` aliases, teams with budgets, optionally a webhook), port 0, and the address read from
// the `listening on http://…` line on stderr. `stop()` ends the process (SIGTERM, then SIGKILL).

import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

export const MASTER = 'sk-master-dashboard-test';
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The configuration; `webhookPort` adds a webhook there with no retries (a failure is dead at once). */
export function config(db, webhookPort) {
  const hook = webhookPort == null ? '' : `
notifications:
  webhooks:
    - url: http://127.0.0.1:${webhookPort}/hook
      events: ["*"]
      secret: dashboard-test-secret
      timeout_seconds: 2
      retry: 0
`;
  return `
server:
  host: 127.0.0.1
  port: 0
  database_url: sqlite://${db}
model_list:
  - model_name: openai/gpt-4.1-mini
    params: {model: mock/gpt-4.1-mini, input_cost_per_token: 0.0004, output_cost_per_token: 0.0016}
  - model_name: anthropic/claude-sonnet-4-5
    params: {model: mock/claude-sonnet-4-5, input_cost_per_token: 0.003, output_cost_per_token: 0.015}
gateway_settings:
  teams:
    - team_id: executor
      budget_limit: 2000
      budget_duration: 1d
      models: [openai/gpt-4.1-mini, anthropic/claude-sonnet-4-5]
    - team_id: research
      budget_limit: 1000
      budget_duration: 30d
      models: [anthropic/claude-sonnet-4-5]
${hook}`;
}

/** A TCP port free right now. */
export function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

/** Starts the gateway; resolves to {url, stop, log}. */
export async function startGateway({ webhookPort, bin, env } = {}) {
  const svc = bin || process.env.SVC_BIN || join(ROOT, 'target', 'debug', 'svc');
  if (!existsSync(svc)) throw new Error(`svc binary not found at ${svc}: build it first (cargo build --bin svc) or set SVC_BIN`);
  const dir = mkdtempSync(join(tmpdir(), 'svc-ui-'));
  const file = join(dir, 'svc.yaml');
  writeFileSync(file, config(join(dir, 'svc.db'), webhookPort));
  const childEnv = { ...process.env, SVC_MASTER_KEY: MASTER, RUST_LOG: 'info', HOME: dir, XDG_CONFIG_HOME: join(dir, 'config'), XDG_DATA_HOME: join(dir, 'data'), ...env };
  delete childEnv.SVC_CONFIG;
  const proc = spawn(svc, ['serve', '--config', file], { cwd: dir, env: childEnv, stdio: ['ignore', 'ignore', 'pipe'] });
  const log = [];
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`svc did not start within 30 s:\n${log.join('')}`)), 30000);
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      log.push(chunk);
      const m = log.join('').match(/listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        res(m[1]);
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`svc exited with ${code}:\n${log.join('')}`));
    });
  });
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((res) => proc.once('exit', res));
    proc.kill('SIGTERM');
    const killer = setTimeout(() => proc.kill('SIGKILL'), 10000);
    await exited;
    clearTimeout(killer);
    rmSync(dir, { recursive: true, force: true });
  };
  return { url: url.replace(/\/$/, ''), stop, log, dir };
}

/** Calls the admin API with the master key. */
export async function admin(url, path, body) {
  const resp = await fetch(`${url}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { Authorization: `Bearer ${MASTER}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await resp.json();
  if (!resp.ok) throw new Error(`${path}: ${resp.status} ${JSON.stringify(data)}`);
  return { data, headers: resp.headers };
}

/** One chat completion with `key` (and extra request `headers`, e.g. `x-session-id`); resolves to the response. */
export function chat(url, key, model = 'openai/gpt-4.1-mini', content = 'Plan the next step of the release.', headers = {}) {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', 'User-Agent': 'dashboard-test/1.0', ...headers },
    body: JSON.stringify({ model, messages: [{ role: 'user', content }] }),
  });
}

/** Headless Chromium of the system (Debian's `chromium`). */
export async function launch() {
  const { chromium } = await import('playwright-core');
  const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
  if (!existsSync(executablePath)) throw new Error(`${executablePath} not found: install Debian's chromium (apt-get install chromium)`);
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}
