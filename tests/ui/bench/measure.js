// The dashboard's page weight and first render (bench/ui.sh runs this): starts a gateway (SVC_BIN, the
// release build by default), seeds SPEND_RECORDS spend records (default 10,000) with real model requests of
// 20 keys in two teams (mock provider; varied models, clients and sessions) and some events, then opens each
// page in a fresh browser context (nothing cached) RUNS times and records
//   bytes: every response's encoded size on the wire (Chromium's Network.loadingFinished) until the page has
//          drawn its data, the page's own API calls included;
//   ready: ms from the start of navigation to the page's `svc:ready:<page>` mark (its first data drawn).
// Prints a Markdown table and writes target/ui-bench.json.

import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { MASTER, ROOT, startGateway, admin, launch } from '../lib/gateway.js';

const RECORDS = Number(process.env.SPEND_RECORDS || 10000);
const RUNS = Number(process.env.RUNS || 5);
const CONCURRENCY = 32;
const PAGES = ['overview', 'keys', 'spend', 'requests', 'events', 'models', 'fleet'];
const CLIENTS = ['claude-cli/2.1.330 (external, cli)', 'codex_exec/0.169.0', 'OpenAI/Python 1.99.0'];

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function seed(url) {
  const keys = [];
  const roles = [['executor', 'planner'], ['executor', 'coder'], ['executor', 'reviewer'], ['research', 'analyst']];
  for (let i = 0; i < 20; i++) {
    const [team, role] = roles[i % roles.length];
    const { data } = await admin(url, '/key/generate', { team_id: team, key_alias: `${role}-${i}`, agent_role: role });
    keys.push({ key: data.key, team });
  }
  let sent = 0;
  let failed = 0;
  const started = Date.now();
  const worker = async () => {
    while (sent < RECORDS) {
      const i = sent++;
      const k = keys[i % keys.length];
      const model = k.team === 'research' || i % 3 === 0 ? 'anthropic/claude-sonnet-4-5' : 'openai/gpt-4.1-mini';
      const resp = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${k.key}`, 'Content-Type': 'application/json', 'User-Agent': CLIENTS[i % CLIENTS.length], 'x-session-id': `session-${i % 97}` },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: `Step ${i}: summarise the build log.` }] }),
      });
      await resp.arrayBuffer();
      if (!resp.ok) failed++;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  if (failed) throw new Error(`${failed} of ${RECORDS} seeding requests failed`);
  for (let i = 0; i < 40; i++) {
    const data = i % 2
      ? { task_id: i, task_title: `Release step ${i}`, epic_id: 7, duration_seconds: 30 + i }
      : { task: `task-${i}`, message: `step ${i} waits for a review` };
    await admin(url, '/events', { event: i % 2 ? 'task.done' : 'task.blocked', data });
  }
  // Spend records are written by a group-commit writer: wait until all are in the store.
  for (let tries = 0; ; tries++) {
    const { data } = await admin(url, '/spend/logs?group_by=team');
    const stored = data.data.reduce((n, g) => n + g.requests, 0);
    if (stored >= RECORDS) return { seconds: (Date.now() - started) / 1000, stored };
    if (tries > 600) throw new Error(`only ${stored} of ${RECORDS} spend records stored`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Signs in once (sign-in attempts are rate-limited); every measured context starts from its cookie. */
async function signIn(browser, url) {
  const context = await browser.newContext();
  const login = await context.request.post(`${url}/ui/login`, { data: { key: MASTER } });
  if (!login.ok()) throw new Error(`sign-in failed: ${login.status()}`);
  const state = await context.storageState();
  await context.close();
  return state;
}

async function measure(browser, url, page, storageState) {
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 }, storageState });
  const tab = await context.newPage();
  const cdp = await context.newCDPSession(tab);
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  let bytes = 0;
  let requests = 0;
  let counting = true;
  cdp.on('Network.loadingFinished', (e) => {
    if (counting) {
      bytes += e.encodedDataLength;
      requests++;
    }
  });
  await tab.goto(`${url}/ui#/${page}`);
  await tab.waitForSelector(`main[data-ready="${page}"]`, { timeout: 30000 });
  const ready = await tab.evaluate((id) => performance.getEntriesByName(`svc:ready:${id}`)[0].startTime, page);
  // The same moment counted from the first byte of the page's HTML (leaves out the browser's own start of a
  // navigation in a fresh context, which no page can change).
  const fromHtml = ready - (await tab.evaluate(() => performance.getEntriesByType('navigation')[0].responseStart));
  if (process.env.DETAIL) {
    // Where the time went: the document, then each file and API call (start and end, ms since navigation).
    const timeline = await tab.evaluate(() => [
      ['domContentLoaded', 0, performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd],
      ...performance.getEntriesByType('resource').map((r) => [r.name.replace(window.location.origin, ''), r.startTime, r.responseEnd]),
    ]);
    process.stderr.write(`${page}: ready ${ready.toFixed(0)} ms\n${timeline.map(([n, a, b]) => `  ${a.toFixed(0).padStart(4)} → ${b.toFixed(0).padStart(4)}  ${n}`).join('\n')}\n`);
  }
  // Responses that finished before the mark may report a moment later.
  await new Promise((r) => setTimeout(r, 150));
  counting = false;
  await context.close();
  return { bytes, requests, ready, fromHtml };
}

const svcBin = process.env.SVC_BIN || join(ROOT, 'target', 'release', 'svc');
const gw = await startGateway({ bin: svcBin });
let browser;
try {
  const seeded = await seed(gw.url);
  process.stderr.write(`seeded ${seeded.stored} spend records in ${seeded.seconds.toFixed(1)} s\n`);
  browser = await launch();
  const signedIn = await signIn(browser, gw.url);
  const results = [];
  for (const page of PAGES) {
    const runs = [];
    for (let i = 0; i < RUNS; i++) runs.push(await measure(browser, gw.url, page, signedIn));
    results.push({ page, bytes: median(runs.map((r) => r.bytes)), requests: median(runs.map((r) => r.requests)), ready_ms: median(runs.map((r) => r.ready)), ready_max_ms: Math.max(...runs.map((r) => r.ready)), from_html_ms: median(runs.map((r) => r.fromHtml)) });
  }
  mkdirSync(join(ROOT, 'target'), { recursive: true });
  writeFileSync(join(ROOT, 'target', 'ui-bench.json'), JSON.stringify({ records: seeded.stored, runs: RUNS, binary: svcBin, results }, null, 2));
  const lines = ['| Page | Transferred (KB) | Requests | First render, median (ms) | Slowest of runs (ms) | From the HTML\'s first byte, median (ms) |', '|---|---:|---:|---:|---:|---:|'];
  for (const r of results) lines.push(`| ${r.page} | ${(r.bytes / 1024).toFixed(1)} | ${r.requests} | ${r.ready_ms.toFixed(0)} | ${r.ready_max_ms.toFixed(0)} | ${r.from_html_ms.toFixed(0)} |`);
  const load = (await import('node:os')).loadavg()[0].toFixed(2);
  process.stdout.write(`${seeded.stored} spend records, ${RUNS} cold loads per page (median); load average ${load} on ${(await import('node:os')).cpus().length} cores\n\n${lines.join('\n')}\n`);
  const over = results.filter((r) => r.bytes > 150 * 1024 || r.ready_ms > 300);
  if (over.length) process.stderr.write(`over target (150 KB, 300 ms): ${over.map((r) => r.page).join(', ')}\n`);
} finally {
  if (browser) await browser.close();
  await gw.stop();
}
