// Building the page: elements from plain data (text always as text nodes, never parsed as HTML), and the
// formats every page shares (money, counts, times in the browser's zone, "in 3 h").

/** An element: `h('td', {class: 'num'}, 'text', child)`. Props starting with `on` are listeners. */
export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  setProps(el, props);
  append(el, kids);
  return el;
}

/** An SVG element with attributes. */
export function svg(tag, attrs, ...kids) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v != null) el.setAttribute(k, String(v));
  }
  append(el, kids);
  return el;
}

function setProps(el, props) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = String(v);
    else if (k === 'style') Object.assign(el.style, v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'selected') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, kids) {
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...kids) {
  el.replaceChildren();
  append(el, kids);
  return el;
}

/** A status pill; `tone` is ok, warn, bad, info or nothing. */
export function pill(text, tone) {
  return h('span', { class: tone ? `pill ${tone}` : 'pill' }, text);
}

/** A table: `columns` are [label, className?]; `rows` arrays of cells (nodes or text). */
export function table(columns, rows, empty) {
  if (!rows.length) return emptyState(empty || 'Nothing yet');
  return h('div', { class: 'table-wrap' },
    h('table', null,
      h('thead', null, h('tr', null, columns.map(([label, cls]) => h('th', { class: cls }, label)))),
      h('tbody', null, rows.map((cells) => {
        const tr = h('tr');
        cells.forEach((cell, i) => tr.append(cell instanceof HTMLTableCellElement ? cell : h('td', { class: columns[i] && columns[i][1] }, cell)));
        return tr;
      }))));
}

/** An empty state: a title and a line of explanation. */
export function emptyState(title, line) {
  return h('div', { class: 'empty' }, h('strong', null, title), line ? h('span', null, line) : null);
}

/** A card with a title, an optional note or control, and a body. */
export function card(title, aside, ...body) {
  return h('section', { class: 'card' },
    h('header', null, h('h2', null, title), aside == null ? null : typeof aside === 'string' ? h('span', { class: 'muted' }, aside) : aside),
    ...body);
}

// Formatters are made once: `toLocaleString` with options builds a new one on every call, which a table of a
// few hundred cells turns into tens of milliseconds.
const FORMATS = {
  // The store counts nano-units: nine decimals at most, two at least, none rounded away.
  money: new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 9 }),
  count: new Intl.NumberFormat(undefined),
  rate2: new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 }),
  rate0: new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 }),
  clock: new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' }),
  day: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' }),
};

// The gateway's currency label (`gateway_settings.currency`), shown after every amount; none by default.
let currency = null;

/** Sets the currency label amounts are shown with (from the session; empty: none). */
export function setCurrency(label) {
  currency = label || null;
}

/** Money in the budget unit, with the precision it has (0.0049 stays 0.0049; at least two decimals), and the
 * currency label when the gateway names one. */
export function money(v) {
  if (v == null || Number.isNaN(v)) return '—';
  const amount = FORMATS.money.format(v);
  return currency ? `${amount} ${currency}` : amount;
}

/** A count with the locale's grouping. */
export function count(v) {
  return v == null ? '—' : FORMATS.count.format(Number(v));
}

/** A rate (per second). */
export function rate(v) {
  if (v == null || Number.isNaN(v)) return '—';
  return (v < 10 ? FORMATS.rate2 : FORMATS.rate0).format(v);
}

/** A time in the browser's zone: time of day when today, else date and time. */
export function time(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '—';
  const now = new Date();
  const today = now.getFullYear() === d.getFullYear() && now.getMonth() === d.getMonth() && now.getDate() === d.getDate();
  return (today ? FORMATS.clock : FORMATS.day).format(d);
}

/** "in 3 h", "12 min ago", "just now". */
export function relative(iso) {
  if (!iso) return '—';
  const ms = new Date(iso).getTime() - Date.now();
  if (Number.isNaN(ms)) return '—';
  return span(ms);
}

/** A signed duration in ms as "in 3 h" or "3 h ago". */
export function span(ms) {
  const abs = Math.abs(ms);
  if (abs < 45000) return ms >= 0 ? 'in a moment' : 'just now';
  const units = [[86400000, 'd'], [3600000, 'h'], [60000, 'min']];
  const [size, name] = units.find(([s]) => abs >= s) || units[2];
  const n = Math.round(abs / size);
  return ms >= 0 ? `in ${n} ${name}` : `${n} ${name} ago`;
}

/** Seconds as "4 min", "2 h". */
export function age(seconds) {
  if (seconds == null) return '—';
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

/** A budget bar: green, amber from 75 %, red from 90 %. */
export function budgetBar(spent, limit, caption) {
  if (limit == null) return h('span', { class: 'muted' }, 'no budget');
  const frac = limit > 0 ? spent / limit : 1;
  const tone = frac >= 0.9 ? 'bad' : frac >= 0.75 ? 'warn' : '';
  const pct = Math.min(100, Math.max(0, frac * 100));
  return h('div', { class: `budget ${tone}`, title: `${money(spent)} of ${money(limit)}` },
    h('div', { class: 'track' }, h('div', { class: 'fill', style: { width: `${pct.toFixed(1)}%` } })),
    h('div', { class: 'caption' }, h('span', null, `${money(spent)} / ${money(limit)}`), h('span', null, caption || `${pct.toFixed(0)} %`)));
}

/** A `<select>` of `[value, label]` options with `current` selected. */
export function select(options, current, onchange, props) {
  return h('select', { ...props, onchange: (e) => onchange(e.target.value) },
    options.map(([value, label]) => h('option', { value, selected: value === current }, label)));
}

/** Unix seconds of the start of today in the browser's zone, `days` days back. */
export function startOfDay(daysBack = 0) {
  const d = new Date();
  d.setHours(0, 0, 0, 0);
  d.setDate(d.getDate() - daysBack);
  return Math.floor(d.getTime() / 1000);
}
