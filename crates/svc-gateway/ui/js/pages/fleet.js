// Fleet: the nodes sharing this gateway's store, their state and heartbeats. A single node says so.

import { api } from '../api.js';
import { h, fill, card, table, pill, money, count, relative, age } from '../dom.js';

function tone(state) {
  return { online: 'ok', offline: 'bad', stopped: '' }[state] || '';
}

export default {
  id: 'fleet',
  title: 'Fleet',
  icon: 'M4 5h16v5H4zM4 14h16v5H4zM8 7.5h.01M8 16.5h.01',
  mount(root) {
    const intro = h('div');
    const box = h('div', { class: 'flush' });
    const note = h('span', { class: 'muted' });
    root.append(intro, card('Nodes', note, box));
    return {
      async refresh() {
        const answer = await api('/fleet/nodes');
        note.textContent = `fleet ${answer.fleet}`;
        const online = answer.nodes.filter((n) => n.state === 'online').length;
        fill(intro, answer.nodes.length <= 1
          ? h('section', { class: 'card section-gap', style: { marginBottom: '16px' } }, h('div', { class: 'empty' },
            h('strong', null, 'A single node'),
            h('span', null, 'This gateway runs alone. Gateways that share one PostgreSQL store form a fleet (see Fleet mode in the README); each node then appears here with its heartbeat, load and spend.')))
          : h('div', { class: 'grid kpis' },
            h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Nodes online'), h('div', { class: 'value' }, `${online} / ${answer.nodes.length}`)),
            h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'In flight'), h('div', { class: 'value' }, count(answer.nodes.reduce((s, n) => s + n.in_flight, 0)))),
            h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Spend today'), h('div', { class: 'value' }, money(answer.nodes.reduce((s, n) => s + n.spend_today, 0))))));
        fill(box, table(
          [['Node'], ['State'], ['Heartbeat'], ['Served', 'num'], ['In flight', 'num hide-sm'], ['Spend today', 'num hide-sm'], ['Version', 'hide-sm'], ['Config', 'hide-sm']],
          answer.nodes.map((n) => [
            h('td', null, h('strong', null, n.node), h('span', { class: 'sub mono' }, n.address)),
            h('td', null, pill(n.state, tone(n.state)), h('span', { class: 'sub' }, `since ${relative(n.state_since)}`)),
            h('td', null, `${age(n.heartbeat_age_seconds)} ago`, h('span', { class: 'sub' }, `started ${relative(n.started_at)}`)),
            count(n.requests_served),
            count(n.in_flight),
            money(n.spend_today),
            h('span', { class: 'mono' }, n.version),
            h('td', { class: 'hide-sm' }, h('div', { class: 'pills' },
              h('span', { class: 'mono', title: n.config_digest || 'this node does not report its file' }, n.config_digest ? n.config_digest.slice(0, 12) : '—'),
              n.config_file_differs ? pill('another file', 'warn') : null,
              n.config_differs.length ? pill(`teams differ: ${n.config_differs.join(', ')}`, 'warn') : null)),
          ]),
          'No node has registered yet'));
      },
    };
  },
};
