// Events: each destination's queue (pending, delivered, dead, oldest pending), and the newest events with
// the state of their delivery to every destination; a dead delivery can be sent again.

import { api, guarded, toast } from '../api.js';
import { h, fill, pill, table, count, time, age } from '../dom.js';

const STATES = [['', 'All'], ['pending', 'Pending'], ['delivered', 'Delivered'], ['dead', 'Dead']];

function tone(state) {
  return { delivered: 'ok', pending: 'info', dead: 'bad' }[state] || '';
}

function severityTone(severity) {
  return { urgent: 'bad', high: 'bad', warn: 'warn', info: 'info' }[severity] || '';
}

export default {
  id: 'events',
  title: 'Events',
  icon: 'M6 8a6 6 0 1 1 12 0c0 7 3 9 3 9H3s3-2 3-9M10.3 21a1.9 1.9 0 0 0 3.4 0',
  mount(root, ctx) {
    const filter = { state: '', kind: '' };
    const dests = h('div', { class: 'grid destinations' });
    const seg = h('div', { class: 'seg', role: 'group', 'aria-label': 'Delivery state' });
    const drawSeg = () => fill(seg, STATES.map(([id, label]) => h('button', { type: 'button', class: id === filter.state ? 'on' : '', onclick: () => { filter.state = id; drawSeg(); ctx.refreshNow(); } }, label)));
    drawSeg();
    const kind = h('input', { placeholder: 'e.g. budget.exceeded', onchange: (e) => { filter.kind = e.target.value.trim(); ctx.refreshNow(); } });
    const list = h('div', { class: 'flush' });
    root.append(dests, h('section', { class: 'card' },
      h('header', null, h('h2', null, 'Recent events'), h('span', { class: 'muted' }, 'newest first')),
      h('div', { class: 'toolbar' }, seg, h('label', { class: 'field' }, 'Kind', kind)),
      list));

    const redeliver = (id, destination) => guarded(async () => {
      await api('/events/redeliver', { method: 'POST', body: { id, destination } });
      toast(`Event ${id} queued again for ${destination}`, 'ok');
      ctx.refreshNow();
    });

    return {
      async refresh() {
        const [d, recent] = await Promise.all([api('/events/destinations'), api('/events/recent', { query: { limit: 100, state: filter.state, kind: filter.kind } })]);
        fill(dests, d.data.length ? d.data.map((x) => h('div', { class: 'card kpi dest' },
          h('div', { class: 'name', title: x.destination }, x.destination),
          h('div', { class: 'counts' },
            h('div', null, h('b', null, count(x.pending)), 'pending'),
            h('div', null, h('b', null, count(x.delivered)), 'delivered'),
            h('div', null, h('b', { class: x.dead ? 'bad-text' : '' }, count(x.dead)), 'dead')),
          h('div', { class: 'sub' }, x.pending ? `oldest pending ${age(x.oldest_pending_age_seconds)}` : 'queue empty')))
          : [h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'No destinations have events yet'), h('div', { class: 'sub' }, 'Push, webhooks and hooks appear once an event is stored for them.'))]);
        fill(list, table(
          [['Time'], ['Event'], ['From', 'hide-sm'], ['Deliveries']],
          recent.data.map((e) => [
            h('td', null, time(e.created), h('span', { class: 'sub' }, `#${e.id}`)),
            h('td', null, h('div', { class: 'pills' }, h('strong', null, e.kind), e.severity ? pill(e.severity, severityTone(e.severity)) : null),
              e.title || e.message ? h('span', { class: 'sub' }, [e.title, e.message].filter(Boolean).join(' — ')) : null),
            h('td', { class: 'hide-sm' }, e.origin || '—', h('span', { class: 'sub' }, e.agent || '')),
            h('td', { dataset: { event: String(e.id) } }, e.deliveries.map((x) => h('div', { class: 'delivery', dataset: { destination: x.destination, state: x.state } },
              h('div', { class: 'pills' },
                pill(x.state, tone(x.state)),
                h('span', { class: 'mono' }, x.destination),
                x.attempts ? h('span', { class: 'muted' }, `${x.attempts} failed attempt${x.attempts === 1 ? '' : 's'}`) : null,
                x.state === 'dead' ? h('button', { class: 'small', onclick: () => redeliver(e.id, x.destination) }, 'Deliver again') : null),
              x.last_error && x.state !== 'delivered' ? h('div', { class: 'err-text' }, x.last_error) : null))),
          ]),
          filter.state || filter.kind ? 'No events match' : 'No events yet'));
      },
    };
  },
};
