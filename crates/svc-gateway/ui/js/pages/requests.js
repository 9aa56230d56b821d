// Requests: the newest spend records (one per model request), filtered by team, key, model, client and
// session, a page at a time. The first page follows new requests live.

import { api, visibleKeys, visibleTeams } from '../api.js';
import { h, fill, card, table, pill, money, count, time, select } from '../dom.js';

const PAGE = 50;
// A record's priced parts (`spend_parts_nanos`), as the Spend cell names them.
const PARTS = [['input', 'in'], ['output', 'out'], ['cache_read', 'cache read'], ['cache_write', 'cache write'], ['tools', 'tools']];

/** Where a request's money went: its non-zero parts, and its basis when the bill was not simply believed. */
function spendCell(r) {
  const p = r.spend_parts_nanos || {};
  const parts = PARTS.filter(([k]) => p[k] > 0).map(([k, label]) => `${label} ${money(p[k] / 1e9)}`).join(' · ');
  const flagged = r.basis && r.basis !== 'billed' ? pill(r.basis.replace('_', ' '), 'warn') : null;
  return h('td', { class: 'num', 'data-parts': '' }, money(r.spend), flagged, h('span', { class: 'sub' }, parts));
}

export default {
  id: 'requests',
  title: 'Requests',
  icon: 'M4 6h16M4 12h16M4 18h10',
  mount(root, ctx) {
    const f = { team_id: '', key: '', model: '', client: '', session_id: '' };
    let page = 1;
    let options = null;
    const filters = h('div', { class: 'toolbar', style: { paddingTop: '14px' } });
    const rowsBox = h('div', { class: 'flush' });
    const where = h('span');
    const prev = h('button', { class: 'small', onclick: () => { page = Math.max(1, page - 1); ctx.refreshNow(); } }, '← Newer');
    const next = h('button', { class: 'small', onclick: () => { page += 1; ctx.refreshNow(); } }, 'Older →');
    root.append(h('section', { class: 'card' }, filters, rowsBox, h('div', { class: 'pager' }, where, h('div', { class: 'actions' }, prev, next))));

    const set = (name) => (value) => { f[name] = value; page = 1; ctx.refreshNow(); };
    const text = (name, label, placeholder) => h('label', { class: 'field' }, label,
      h('input', { value: f[name], placeholder, onchange: (e) => set(name)(e.target.value.trim()) }));

    async function drawFilters() {
      const [teams, keys, models] = await Promise.all([visibleTeams(ctx.session), visibleKeys(ctx.session), api('/models')]);
      options = {
        team_id: [['', teams.length > 1 ? 'All teams' : teams[0] || 'All teams'], ...(teams.length > 1 ? teams.map((t) => [t, t]) : [])],
        key: [['', 'All keys'], ...keys.map((k) => [k.key_id, k.key_alias || k.key_hint])],
        model: [['', 'All models'], ...models.data.map((m) => [m.id, m.id])],
        names: new Map(keys.map((k) => [k.key_id, k.key_alias || k.key_hint])),
      };
      fill(filters,
        h('label', { class: 'field' }, 'Team', select(options.team_id, f.team_id, set('team_id'), { 'aria-label': 'Team' })),
        h('label', { class: 'field' }, 'Key', select(options.key, f.key, set('key'), { 'aria-label': 'Key' })),
        h('label', { class: 'field' }, 'Model', select(options.model, f.model, set('model'), { 'aria-label': 'Model' })),
        text('client', 'Client', 'e.g. claude-cli'),
        text('session_id', 'Session', 'session id'));
    }

    return {
      async refresh() {
        const [answer] = await Promise.all([api('/spend/logs', { query: { ...f, limit: PAGE, page } }), options ? null : drawFilters()]);
        const rows = answer.data;
        where.textContent = rows.length
          ? `Page ${page} · ${count((page - 1) * PAGE + 1)}–${count((page - 1) * PAGE + rows.length)} · ${money(answer.total_spend)} in all matching`
          : `Page ${page}`;
        prev.disabled = page === 1;
        next.disabled = rows.length < PAGE;
        fill(rowsBox, table(
          [['Time'], ['Key'], ['Model'], ['Tokens', 'num hide-sm'], ['Spend', 'num'], ['Status'], ['Latency', 'num hide-sm'], ['Client', 'hide-sm']],
          rows.map((r) => [
            h('span', { title: r.time }, time(r.time)),
            h('td', null, r.key_alias || (r.key_id ? options.names.get(r.key_id) || r.key_id : '(master key)'), h('span', { class: 'sub' }, [r.team_id, r.agent_role].filter(Boolean).join(' · '))),
            h('td', null, r.model, h('span', { class: 'sub' }, r.deployment || '')),
            `${count(r.prompt_tokens)} → ${count(r.completion_tokens)}`,
            spendCell(r),
            pill(String(r.status), r.status >= 500 ? 'bad' : r.status >= 400 ? 'warn' : 'ok'),
            `${count(r.latency_ms)} ms`,
            h('td', { class: 'hide-sm' }, r.client || '—', h('span', { class: 'sub' }, [r.api, r.session_id].filter(Boolean).join(' · '))),
          ]),
          page === 1 ? 'No requests match' : 'No older requests'));
      },
    };
  },
};
