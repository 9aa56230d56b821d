// My team: the read-only view of a team for someone signed in with one of its virtual keys: its budget and
// when it resets, spend today per key, and its keys (never their secrets).

import { api } from '../api.js';
import { h, fill, card, table, pill, money, count, relative, budgetBar, startOfDay, time } from '../dom.js';

export default {
  id: 'team',
  title: 'My team',
  icon: 'M16 19v-1a4 4 0 0 0-4-4H6a4 4 0 0 0-4 4v1M9 10a3 3 0 1 0 0-6 3 3 0 0 0 0 6M22 19v-1a4 4 0 0 0-3-3.9M16 4.1a3 3 0 0 1 0 5.8',
  mount(root, ctx) {
    const team = ctx.session.team_id;
    const k = {
      spend: h('div', { class: 'value', id: 'team-spend-today' }, '—'),
      requests: h('div', { class: 'value' }, '—'),
      left: h('div', { class: 'value' }, '—'),
    };
    const leftSub = h('div', { class: 'sub' });
    const budget = h('div', { class: 'body' });
    const keysBox = h('div', { class: 'flush' });
    root.append(
      h('div', { class: 'grid kpis' },
        h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Spend today'), k.spend, h('div', { class: 'sub' }, `team ${team}`)),
        h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Requests today'), k.requests),
        h('div', { class: 'card kpi' }, h('div', { class: 'label' }, 'Budget left this period'), k.left, leftSub)),
      h('div', { class: 'stack' }, card('Team budget', 'read-only view', budget), card('Keys of the team', 'spend today', keysBox)));

    return {
      async refresh() {
        const [info, today] = await Promise.all([
          api('/team/info', { query: { team_id: team } }),
          api('/spend/logs', { query: { group_by: 'key', start: startOfDay() } }),
        ]);
        const byKey = new Map(today.data.map((g) => [g.group, g]));
        k.spend.textContent = money(today.data.reduce((s, g) => s + g.spend, 0));
        k.requests.textContent = count(today.data.reduce((s, g) => s + g.requests, 0));
        const b = info.budget;
        k.left.textContent = b ? money(Math.max(0, b.limit - b.spent - b.reserved)) : 'no limit';
        leftSub.textContent = b ? `resets ${relative(b.reset_at)}` : '';
        fill(budget, b
          ? h('div', { class: 'stack' }, budgetBar(b.spent + b.reserved, b.limit, `${info.team_info.budget_duration} period`),
            h('div', { class: 'muted' }, `Period from ${time(b.period_start)}; resets ${new Date(b.reset_at).toLocaleString()} (${relative(b.reset_at)}).`))
          : h('div', { class: 'empty' }, h('strong', null, 'No team budget'), h('span', null, 'This team has no budget limit in the configuration.')));
        fill(keysBox, table(
          [['Key'], ['Role'], ['Today', 'num'], ['Requests', 'num hide-sm'], ['Budget', 'num hide-sm'], ['Status']],
          info.keys.map((key) => {
            const g = byKey.get(key.key_id);
            return [
              h('td', null, h('strong', null, key.key_alias || '(no alias)'), h('span', { class: 'sub mono' }, key.key_hint)),
              key.agent_role || '—',
              money(g ? g.spend : 0),
              count(g ? g.requests : 0),
              key.max_budget == null ? '—' : money(key.max_budget),
              key.blocked ? pill('revoked', 'bad') : pill('active', 'ok'),
            ];
          }),
          'No keys in this team'));
      },
    };
  },
};
