// The dashboard shell: sign-in, the sidebar, hash routes (#/overview, #/keys, …) and the live refresh. Each
// page module exports {id, title, icon, mount(root, ctx)}; mount builds the page and returns {refresh},
// which the shell calls at once and then every few seconds while the tab is visible, so numbers change
// without a reload. When a page has drawn its first data, <main data-ready="<page>"> is set and a
// performance mark `svc:ready:<page>` recorded (the first-render measurement reads them).

import { api, setCsrf, whenSignedOut, toast, ApiError } from './api.js';
import { h, svg, fill, setCurrency } from './dom.js';
import overview from './pages/overview.js';
import keys from './pages/keys.js';
import spend from './pages/spend.js';
import requests from './pages/requests.js';
import events from './pages/events.js';
import models from './pages/models.js';
import fleet from './pages/fleet.js';
import team from './pages/team.js';

/** The pages of the master key, and of a team's read-only view (signed in with one of its keys). */
const PAGES = [overview, keys, spend, requests, events, models, fleet];
const TEAM_PAGES = [team, spend, requests];
/** Remembered per tab, so a reload draws the right pages before the session has answered. */
const ROLE_HINT = 'svc-dashboard-role';
/** The currency label, remembered likewise, so a reload draws amounts with it at once. */
const CURRENCY_HINT = 'svc-dashboard-currency';
const POLL_MS = 3000;
const app = document.getElementById('app');

let session = null;
let pages = PAGES;
let current = null;
let timer = null;

function icon(d) {
  return svg('svg', { viewBox: '0 0 24 24', 'aria-hidden': 'true' }, svg('path', { d }));
}

function brand(sub) {
  return h('div', { class: 'brand' }, h('span', { class: 'logo' }, 's'), h('div', null, 'svc', h('small', null, sub)));
}

function showSignIn(message) {
  stop();
  session = null;
  const error = h('div', { class: 'error', role: 'alert' }, message || '');
  const input = h('input', { type: 'password', name: 'key', autocomplete: 'current-password', placeholder: 'sk-…', required: true, id: 'master-key' });
  const button = h('button', { class: 'primary', type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'stack', onsubmit: async (e) => {
    e.preventDefault();
    button.disabled = true;
    error.textContent = '';
    try {
      const answer = await api('/ui/login', { method: 'POST', body: { key: input.value } });
      setCsrf(answer.csrf_token);
      sessionStorage.setItem(ROLE_HINT, answer.role);
      input.value = '';
      await start();
    } catch (err) {
      error.textContent = err.message;
      button.disabled = false;
      input.focus();
    }
  } },
  h('label', { class: 'field', for: 'master-key' }, 'Key', input), button);
  fill(app, h('div', { class: 'signin' }, h('div', { class: 'card' },
    brand('LLM gateway dashboard'),
    h('p', { class: 'muted' }, 'Sign in with the master key of this gateway, or with a virtual key for a read-only view of its team. The session lasts 12 hours of use and ends when you sign out.'),
    form, error)));
  input.focus();
}

function shell() {
  const nav = h('nav', { class: 'nav', 'aria-label': 'Pages' }, pages.map((p) => h('a', { href: `#/${p.id}`, dataset: { page: p.id } }, icon(p.icon), p.title)));
  const signOut = h('button', { class: 'ghost small', onclick: signOutNow }, 'Sign out');
  const side = h('aside', { class: 'side' }, brand(`node ${session.node}`), nav,
    h('div', { class: 'side-foot' }, h('span', { id: 'who' }, who()), signOut));
  const title = h('h1', { id: 'page-title' });
  const live = h('span', { class: 'live', id: 'live' }, h('span', { class: 'dot' }), h('span', { id: 'live-text' }, 'Connecting…'));
  const content = h('div', { id: 'content' });
  const main = h('main', { class: 'main', id: 'main' }, h('div', { class: 'top' }, title, live), content);
  fill(app, h('div', { class: 'shell' }, side, main));
}

async function signOutNow() {
  try {
    await api('/ui/logout', { method: 'POST' });
  } catch (e) {
    // Signed out already or the gateway is gone: the sign-in screen is right either way.
  }
  setCsrf(null);
  sessionStorage.removeItem(ROLE_HINT);
  showSignIn('Signed out.');
}

function stop() {
  if (timer) clearTimeout(timer);
  timer = null;
  current = null;
}

function route() {
  const id = (window.location.hash.match(/^#\/([a-z]+)/) || [])[1];
  const page = pages.find((p) => p.id === id) || pages[0];
  stop();
  for (const a of document.querySelectorAll('.nav a')) a.classList.toggle('active', a.dataset.page === page.id);
  document.getElementById('page-title').textContent = page.title;
  document.title = `${page.title} · svc`;
  const main = document.getElementById('main');
  delete main.dataset.ready;
  const content = document.getElementById('content');
  fill(content);
  const run = { page, view: page.mount(content, { refreshNow: () => tick(run, true), session }), first: true };
  current = run;
  tick(run, false);
}

async function tick(run, manual) {
  if (current !== run) return;
  if (timer) clearTimeout(timer);
  const live = document.getElementById('live');
  const text = document.getElementById('live-text');
  if (!document.hidden || run.first || manual) {
    try {
      await run.view.refresh();
      if (current !== run) return;
      if (run.first) {
        run.first = false;
        document.getElementById('main').dataset.ready = run.page.id;
        performance.mark(`svc:ready:${run.page.id}`);
      }
      live.classList.remove('stale');
      text.textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (current !== run) return;
      live.classList.add('stale');
      text.textContent = 'Not updating';
      // Before the session has answered, a refusal only means the page was guessed wrong: start() redraws.
      if (session && session.csrf_token && !(e instanceof ApiError && e.status === 401)) toast(e.message || String(e));
    }
  }
  if (current === run) timer = setTimeout(() => tick(run, false), POLL_MS);
}

// The page's first data is asked for at once, beside the session (reads need no CSRF token): a signed-in
// browser saves a round trip, and one that is not is sent to sign in by the session's 401.
async function start() {
  const asked = api('/ui/session');
  const hint = sessionStorage.getItem(ROLE_HINT);
  const currencyHint = sessionStorage.getItem(CURRENCY_HINT) || '';
  setCurrency(currencyHint);
  if (hint !== 'team') {
    session = { node: '…', role: 'master' };
    pages = PAGES;
    shell();
    route();
  }
  session = await asked;
  setCsrf(session.csrf_token);
  sessionStorage.setItem(ROLE_HINT, session.role);
  setCurrency(session.currency);
  sessionStorage.setItem(CURRENCY_HINT, session.currency || '');
  const wanted = session.role === 'team' ? TEAM_PAGES : PAGES;
  if (wanted !== pages || !document.getElementById('main') || (session.currency || '') !== currencyHint) {
    pages = wanted;
    shell();
    route();
  }
  const node = document.querySelector('.side .brand small');
  if (node) node.textContent = `node ${session.node}`;
  const whoEl = document.getElementById('who');
  if (whoEl) whoEl.textContent = who();
}

function who() {
  return session.role === 'team' ? `Read-only view of team ${session.team_id}` : 'Signed in with the master key';
}

// Before the session is confirmed, a 401 of the first data only means "not signed in": start() shows sign-in.
whenSignedOut(() => session && session.csrf_token && showSignIn('Your session has ended. Sign in again.'));
window.addEventListener('hashchange', () => session && route());
document.addEventListener('visibilitychange', () => {
  if (!document.hidden && current) tick(current, true);
});

start().catch((e) => showSignIn(e instanceof ApiError && e.status === 401 ? '' : e.message));
