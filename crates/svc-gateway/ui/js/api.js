// Talking to the gateway: the same admin API scripts use, authenticated by the session cookie, with the
// CSRF token on every call that changes something. Errors come back in the OpenAI shape and are shown as
// toasts; a 401 sends the browser to the sign-in screen.

import { h } from './dom.js';

let csrf = null;
let onSignedOut = () => {};

/** An answer other than 2xx: its status and the gateway's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Remembers the session's CSRF token. */
export function setCsrf(token) {
  csrf = token;
}

/** What to do when the session has ended. */
export function whenSignedOut(fn) {
  onSignedOut = fn;
}

/** Calls `path` (a query object's empty values left out); resolves to the JSON answer or throws ApiError. */
export async function api(path, { method = 'GET', body, query } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== '' && v != null) url.searchParams.set(k, String(v));
  }
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['x-csrf-token'] = csrf;
  let resp;
  try {
    resp = await fetch(url, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, 'The gateway cannot be reached.');
  }
  if (resp.status === 204) return null;
  let data = null;
  try {
    data = await resp.json();
  } catch (e) {
    data = null;
  }
  if (!resp.ok) {
    const message = (data && data.error && data.error.message) || `The gateway answered ${resp.status}.`;
    if (resp.status === 401 && !path.startsWith('/ui/')) onSignedOut();
    throw new ApiError(resp.status, message);
  }
  return data;
}

/** Shows a message for a few seconds; `tone` 'ok' for good news, errors otherwise. */
export function toast(message, tone) {
  const box = document.getElementById('toasts');
  if (!box) return;
  const el = h('div', { class: tone === 'ok' ? 'toast ok' : 'toast', role: 'alert' }, message);
  box.append(el);
  setTimeout(() => el.remove(), tone === 'ok' ? 3500 : 7000);
}

/** Runs `fn`, showing its error as a toast instead of throwing. Resolves to its result or undefined. */
export async function guarded(fn) {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) toast(e.message || String(e));
    return undefined;
  }
}

/** The keys the session may see: every key for the master key, its team's for a team view. */
export async function visibleKeys(session) {
  if (session.role === 'team') return (await api('/team/info', { query: { team_id: session.team_id } })).keys;
  return (await api('/key/list')).keys;
}

/** The team ids the session may see. */
export async function visibleTeams(session) {
  if (session.role === 'team') return [session.team_id];
  return (await api('/team/list')).map((t) => t.team_id);
}
