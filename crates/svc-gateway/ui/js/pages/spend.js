// Spend over a chosen time range, grouped by team, key, agent role, model, client, session or API: totals,
// a bar chart, the table, and the same rows as CSV (built here from the JSON the table shows).

import { api, visibleKeys } from '../api.js';
import { h, fill, card, table, money, count, startOfDay, select } from '../dom.js';
import { bars } from '../chart.js';

const GROUPS = [['team', 'Team'], ['key', 'Key'], ['role', 'Agent role'], ['model', 'Model'], ['client', 'Client'], ['session', 'Session'], ['api', 'API']];
const RANGES = [['today', 'Today'], ['7d', '7 days'], ['30d', '30 days'], ['custom', 'Custom']];

function localInput(unixSecs) {
  const d = new Date(unixSecs * 1000);
  d.setMinutes(d.getMinutes() - d.getTimezoneOffset());
  return d.toISOString().slice(0, 16);
}

/** A first character that makes a spreadsheet read a cell as a formula (OWASP's CSV injection list: `=`, `+`,
 * `-`, `@`, tab, CR; and LF and the full-width `＝＋－＠`, which some spreadsheets and locales treat alike). */
const FORMULA_START = /^[=+\-@\t\r\n\uFF1D\uFF0B\uFF0D\uFF20]/;

/** One CSV cell. A finite number (the counts and spend the dashboard writes) is written as it is: its text is a
 * number literal (`12`, `0.0042`, `1e-7`, and `-3` if one were ever negative), which a spreadsheet reads as a
 * number and never as a formula. Any other value is text, and may be a client's or a key holder's (a session id,
 * a client name, a key alias, a model): one starting with a character of FORMULA_START gets a single quote in
 * front, so it is shown as text and never run (`=HYPERLINK(…)` → `'=HYPERLINK(…)`). A cell with `"`, `,`, `;`,
 * tab, CR or LF is then quoted (RFC 4180, `"` doubled): `;` and tab too, so a spreadsheet that splits on them
 * (a locale's default) cannot start a new cell inside one either. */
export function csvCell(v) {
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  let s = v == null ? '' : String(v);
  if (FORMULA_START.test(s)) s = `'${s}`;
  return /[",;\t\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

/** The rows as CSV text: cells as `csvCell` writes them, lines ended by CRLF. */
export function csv(header, rows) {
  return [header, ...rows].map((r) => r.map(csvCell).join(',')).join('\r\n') + '\r\n';
}

export default {
  id: 'spend',
  title: 'Spend',
  icon: 'M4 19V5M4 19h16M8 16v-5M12 16V8M16 16v-3M20 16V6',
  mount(root, ctx) {
    const state = { range: 'today', group: 'team', from: localInput(startOfDay(7)), to: localInput(Math.floor(Date.now() / 1000) + 3600) };
    let shown = { rows: [], start: 0, end: null };
    const seg = h('div', { class: 'seg', role: 'group', 'aria-label': 'Time range' });
    const custom = h('div', { class: 'toolbar hidden' });
    const drawSeg = () => fill(seg, RANGES.map(([id, label]) => h('button', { type: 'button', class: id === state.range ? 'on' : '', dataset: { range: id }, onclick: () => {
      state.range = id;
      drawSeg();
      custom.classList.toggle('hidden', id !== 'custom');
      ctx.refreshNow();
    } }, label)));
    drawSeg();
    const from = h('input', { type: 'datetime-local', value: state.from, onchange: (e) => { state.from = e.target.value; ctx.refreshNow(); } });
    const to = h('input', { type: 'datetime-local', value: state.to, onchange: (e) => { state.to = e.target.value; ctx.refreshNow(); } });
    custom.append(h('label', { class: 'field' }, 'From', from), h('label', { class: 'field' }, 'To', to));
    const exportBtn = h('button', { type: 'button', id: 'export-csv', onclick: () => {
      const header = ['group', 'requests', 'prompt_tokens', 'completion_tokens', 'spend'];
      const text = csv(header, shown.rows.map((r) => [r.label, r.requests, r.prompt_tokens, r.completion_tokens, r.spend]));
      const a = h('a', { href: URL.createObjectURL(new Blob([text], { type: 'text/csv' })), download: `svc-spend-by-${state.group}.csv` });
      document.body.append(a);
      a.click();
      a.remove();
    } }, 'Export CSV');
    const groupSel = select(GROUPS, state.group, (v) => { state.group = v; ctx.refreshNow(); }, { id: 'group-by', 'aria-label': 'Group by' });
    const totals = { spend: h('div', { class: 'value', id: 'spend-total' }, '—'), requests: h('div', { class: 'value' }, '—'), tokens: h('div', { class: 'value' }, '—') };
    const chart = h('div', { class: 'body' });
    const rowsBox = h('div', { class: 'flush' });
    const caption = h('span', { class: 'muted' });
    root.append(
      h('section', { class: 'card section-gap' },
        h('div', { class: 'toolbar', style: { paddingTop: '14px' } }, seg, h('label', { class: 'field' }, 'Group by', groupSel), h('div', { class: 'grow' }), exportBtn),
        custom),
      h('div', { class: 'grid kpis section-gap' },
        h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Spend'), totals.spend, caption),
        h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Requests'), totals.requests),
        h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Tokens (prompt + completion)'), totals.tokens)),
      h('div', { class: 'stack' }, card('Spend by group', 'top 12', chart), card('Breakdown', null, rowsBox)));

    function range() {
      const now = Math.floor(Date.now() / 1000);
      switch (state.range) {
        case '7d': return { start: startOfDay(6), end: null };
        case '30d': return { start: startOfDay(29), end: null };
        case 'custom': return { start: Math.floor(new Date(state.from).getTime() / 1000) || startOfDay(7), end: Math.floor(new Date(state.to).getTime() / 1000) || now };
        default: return { start: startOfDay(), end: null };
      }
    }

    return {
      async refresh() {
        const { start, end } = range();
        const by = state.group === 'role' ? 'key' : state.group;
        const [spend, keyList] = await Promise.all([
          api('/spend/logs', { query: { group_by: by, start, end } }),
          state.group === 'role' || state.group === 'key' ? visibleKeys(ctx.session) : Promise.resolve([]),
        ]);
        const keys = new Map(keyList.map((k) => [k.key_id, k]));
        let rows = spend.data.map((g) => ({ ...g, label: g.group }));
        if (state.group === 'key') rows = rows.map((r) => ({ ...r, label: keys.has(r.group) ? keys.get(r.group).key_alias || keys.get(r.group).key_hint : r.group }));
        if (state.group === 'role') {
          const byRole = new Map();
          for (const r of rows) {
            const k = keys.get(r.group);
            const role = k ? k.agent_role || '(no role)' : r.group;
            const acc = byRole.get(role) || { label: role, requests: 0, prompt_tokens: 0, completion_tokens: 0, spend: 0 };
            acc.requests += r.requests;
            acc.prompt_tokens += r.prompt_tokens;
            acc.completion_tokens += r.completion_tokens;
            acc.spend += r.spend;
            byRole.set(role, acc);
          }
          rows = [...byRole.values()].sort((a, b) => b.spend - a.spend);
        }
        shown = { rows, start, end };
        const total = rows.reduce((s, r) => s + r.spend, 0);
        totals.spend.textContent = money(total);
        totals.requests.textContent = count(rows.reduce((s, r) => s + r.requests, 0));
        totals.tokens.textContent = count(rows.reduce((s, r) => s + r.prompt_tokens + r.completion_tokens, 0));
        caption.className = 'sub';
        caption.textContent = `${new Date(start * 1000).toLocaleString()} – ${end ? new Date(end * 1000).toLocaleString() : 'now'}`;
        fill(chart, rows.length ? bars(rows.slice(0, 12).map((r) => ({ label: r.label, value: r.spend })), money, Math.max(280, chart.clientWidth - 32)) : h('div', { class: 'empty' }, h('strong', null, 'No spend in this range'), h('span', null, 'Requests made with virtual keys appear here within a few seconds.')));
        const groupName = GROUPS.find(([id]) => id === state.group)[1];
        fill(rowsBox, table(
          [[groupName], ['Requests', 'num'], ['Prompt tokens', 'num hide-sm'], ['Completion tokens', 'num hide-sm'], ['Spend', 'num'], ['Share', 'num hide-sm']],
          rows.map((r) => [
            h('span', { class: state.group === 'session' ? 'mono' : '' }, r.label),
            count(r.requests), count(r.prompt_tokens), count(r.completion_tokens),
            h('td', { class: 'num', dataset: { spend: r.label } }, money(r.spend)),
            total > 0 ? `${((r.spend / total) * 100).toFixed(1)} %` : '—',
          ]),
          'No spend in this range'));
      },
    };
  },
};
