// Models: every deployment with its health over the window, cooldown and last probe.

import { api } from '../api.js';
import { h, fill, card, table, pill, count, relative } from '../dom.js';
import { healthTone } from './overview.js';

export default {
  id: 'models',
  title: 'Models',
  icon: 'M12 2 3 7l9 5 9-5zM3 12l9 5 9-5M3 17l9 5 9-5',
  mount(root) {
    const box = h('div', { class: 'flush' });
    const note = h('span', { class: 'muted' });
    root.append(card('Deployments', note, box));
    return {
      async refresh() {
        const answer = await api('/health/models');
        note.textContent = `health over the last ${answer.window_seconds} s`;
        fill(box, table(
          [['Deployment'], ['State'], ['Calls', 'num'], ['Errors', 'num'], ['p95', 'num hide-sm'], ['In flight', 'num hide-sm'], ['Cooldown'], ['Last probe', 'hide-sm']],
          answer.data.map((m) => [
            h('td', null, h('strong', null, m.deployment), h('span', { class: 'sub' }, `${m.model} · ${m.provider}`), h('span', { class: 'sub mono' }, m.endpoint || '')),
            h('td', null, pill(m.state, healthTone(m.state)), m.reason ? h('span', { class: 'sub' }, m.reason) : null, m.since ? h('span', { class: 'sub' }, `since ${relative(m.since).replace('in a moment', 'just now')}`) : null),
            count(m.calls),
            h('td', { class: 'num' }, count(m.errors), h('span', { class: 'sub' }, `${(m.error_rate * 100).toFixed(1)} %`)),
            m.p95_latency_ms == null ? '—' : `${count(m.p95_latency_ms)} ms`,
            count(m.in_flight),
            m.cooling_down ? pill(`${Math.ceil(m.cooldown_remaining_ms / 1000)} s left`, 'warn') : h('span', { class: 'muted' }, 'none'),
            h('td', { class: 'hide-sm' }, m.last_probe ? [pill(m.last_probe.ok ? 'ok' : 'failed', m.last_probe.ok ? 'ok' : 'bad'), h('span', { class: 'sub' }, relative(m.last_probe.at)), m.last_probe.error ? h('span', { class: 'err-text' }, m.last_probe.error) : null] : h('span', { class: 'muted' }, 'not probed yet')),
          ]),
          'No deployments in the configuration'));
      },
    };
  },
};
