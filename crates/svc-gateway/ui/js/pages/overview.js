// Overview: requests and errors per second (from two readings of /gateway/stats), spend today per team with
// its budget bar and reset time, model health and undelivered events.

import { api } from '../api.js';
import { h, fill, card, table, pill, money, count, rate, relative, budgetBar, startOfDay, age } from '../dom.js';
import { sparkline } from '../chart.js';

/** The pill tone of a deployment's health state. */
export function healthTone(state) {
  return { healthy: 'ok', degraded: 'warn', unavailable: 'bad' }[state] || '';
}

function kpi(label, withSpark) {
  const value = h('div', { class: 'value' }, '—');
  const sub = h('div', { class: 'sub' });
  const spark = withSpark ? h('div', { class: 'spark-box' }) : null;
  const el = h('div', { class: 'card kpi', dataset: { kpi: label } }, h('div', { class: 'label' }, label), value, sub, spark);
  return { el, value, sub, spark };
}

export default {
  id: 'overview',
  title: 'Overview',
  icon: 'M3 13h8V3H3zM13 21h8V11h-8zM3 21h8v-6H3zM13 3v6h8V3z',
  mount(root) {
    const k = { req: kpi('Requests / s', true), err: kpi('Errors / s', true), flight: kpi('In flight'), spend: kpi('Spend today'), events: kpi('Undelivered events') };
    const teams = h('div', { class: 'flush' });
    const models = h('div', { class: 'flush' });
    const dests = h('div', { class: 'flush' });
    root.append(
      h('div', { class: 'grid kpis' }, Object.values(k).map((x) => x.el)),
      h('div', { class: 'stack' },
        card('Spend today by team', 'budget this period', teams),
        h('div', { class: 'grid cols-2' }, card('Model health', h('a', { href: '#/models' }, 'All models'), models), card('Event delivery', h('a', { href: '#/events' }, 'Events'), dests))));
    let last = null;
    const history = { req: [], err: [] };

    return {
      async refresh() {
        const [stats, teamList, today, health, outbox] = await Promise.all([
          api('/gateway/stats'),
          api('/team/list'),
          api('/spend/logs', { query: { group_by: 'team', start: startOfDay() } }),
          api('/health/models'),
          api('/events/destinations'),
        ]);
        const now = performance.now();
        if (last && now > last.at) {
          const secs = (now - last.at) / 1000;
          history.req = [...history.req, Math.max(0, stats.requests - last.requests) / secs].slice(-40);
          history.err = [...history.err, Math.max(0, stats.errors - last.errors) / secs].slice(-40);
        }
        last = { at: now, requests: stats.requests, errors: stats.errors };
        const lastOf = (xs) => (xs.length ? xs[xs.length - 1] : null);
        k.req.value.textContent = history.req.length ? rate(lastOf(history.req)) : '—';
        k.req.sub.textContent = history.req.length ? `${count(stats.requests)} since start` : `measuring… ${count(stats.requests)} since start`;
        fill(k.req.spark, sparkline(history.req));
        k.err.value.textContent = history.err.length ? rate(lastOf(history.err)) : '—';
        k.err.sub.textContent = `${count(stats.errors)} since start (5xx)`;
        fill(k.err.spark, sparkline(history.err));
        k.flight.value.textContent = count(stats.in_flight);
        k.flight.sub.textContent = `node ${stats.node}`;

        const todayBy = new Map(today.data.map((g) => [g.group, g]));
        const total = today.data.reduce((sum, g) => sum + g.spend, 0);
        k.spend.value.textContent = money(total);
        k.spend.sub.textContent = `${count(today.data.reduce((n, g) => n + g.requests, 0))} requests today`;
        const pending = outbox.data.reduce((n, d) => n + d.pending, 0);
        const dead = outbox.data.reduce((n, d) => n + d.dead, 0);
        k.events.value.textContent = count(pending + dead);
        k.events.sub.textContent = dead ? `${count(dead)} dead, ${count(pending)} pending` : `${count(pending)} pending`;
        k.events.value.classList.toggle('bad-text', dead > 0);

        fill(teams, table(
          [['Team'], ['Today', 'num'], ['Requests', 'num hide-sm'], ['Budget this period'], ['Resets']],
          teamList.map((t) => {
            const g = todayBy.get(t.team_id);
            const b = t.budget;
            const row = [
              h('td', null, h('strong', null, t.team_id), h('span', { class: 'sub' }, `${count(t.keys)} ${t.keys === 1 ? 'key' : 'keys'} · ${t.budget_duration} period`)),
              h('td', { class: 'num', dataset: { today: t.team_id } }, money(g ? g.spend : 0)),
              h('td', { class: 'num hide-sm' }, count(g ? g.requests : 0)),
              h('td', null, b ? budgetBar(b.spent + b.reserved, b.limit) : h('span', { class: 'muted' }, 'no budget')),
              h('td', null, b ? h('span', { title: new Date(b.reset_at).toLocaleString() }, relative(b.reset_at)) : '—'),
            ];
            return row;
          }),
          'No teams in the configuration'));

        fill(models, table(
          [['Deployment'], ['State'], ['Calls', 'num'], ['Error rate', 'num hide-sm'], ['p95', 'num hide-sm']],
          health.data.map((m) => [
            h('td', null, h('span', null, m.deployment), h('span', { class: 'sub' }, m.provider)),
            h('td', null, pill(m.cooling_down ? 'cooling down' : m.state, m.cooling_down ? 'warn' : healthTone(m.state))),
            count(m.calls),
            `${(m.error_rate * 100).toFixed(1)} %`,
            m.p95_latency_ms == null ? '—' : `${count(m.p95_latency_ms)} ms`,
          ]),
          'No deployments'));

        fill(dests, outbox.data.length
          ? table([['Destination'], ['Pending', 'num'], ['Dead', 'num'], ['Oldest', 'num hide-sm']],
            outbox.data.map((d) => [
              h('span', { class: 'mono' }, d.destination),
              count(d.pending),
              d.dead ? pill(count(d.dead), 'bad') : '0',
              age(d.oldest_pending_age_seconds),
            ]))
          : h('div', { class: 'empty' }, h('strong', null, 'No events yet'), h('span', null, 'Events the gateway emits or receives on POST /events show up here.')));
      },
    };
  },
};
