// Teams and keys: the teams with their budgets, those of the config file (changed there, then `svc reload`)
// and those made at runtime (create, edit, delete with their keys: /team/new, /team/update, /team/delete), and
// the virtual keys: create (the secret shown once), rotate (a new secret, shown once), revoke and restore,
// change the budget, delete.

import { api, guarded, toast } from '../api.js';
import { h, fill, card, table, pill, money, count, time, relative, budgetBar } from '../dom.js';

/** A modal dialog holding `content`; resolves when closed, to the value passed to `close`. */
export function modal(build) {
  return new Promise((resolve) => {
    const dlg = h('dialog');
    let result = null;
    const close = (value) => {
      result = value;
      dlg.close();
    };
    dlg.addEventListener('close', () => {
      dlg.remove();
      resolve(result);
    });
    dlg.append(build(close));
    document.body.append(dlg);
    dlg.showModal();
  });
}

/** Asks before doing something that cannot be undone; resolves to true to go ahead. */
export function confirmAction(title, text, action) {
  return modal((close) => h('div', { class: 'dlg' },
    h('h2', null, title), h('p', { class: 'muted' }, text),
    h('div', { class: 'dlg-actions' },
      h('button', { type: 'button', onclick: () => close(false) }, 'Cancel'),
      h('button', { type: 'button', class: 'primary', onclick: () => close(true) }, action))));
}

function showSecret(title, info) {
  return modal((close) => {
    const code = h('code', { id: 'new-secret' }, info.key);
    const copy = h('button', { type: 'button', onclick: async () => {
      try {
        await navigator.clipboard.writeText(info.key);
        copy.textContent = 'Copied';
      } catch (e) {
        window.getSelection().selectAllChildren(code);
        copy.textContent = 'Press Ctrl+C';
      }
    } }, 'Copy');
    return h('div', { class: 'dlg', dataset: { testid: 'secret-dialog' } },
      h('h2', null, title),
      h('p', { class: 'muted' }, `Key ${info.key_alias || info.key_hint} of team ${info.team_id}.`),
      h('div', { class: 'secret' }, code, copy),
      h('div', { class: 'note' }, 'Copy this secret now: it is shown only this once. The gateway keeps only its hash.'),
      h('div', { class: 'dlg-actions' }, h('button', { type: 'button', class: 'primary', onclick: () => close(true) }, 'Done')));
  });
}

function numberOrNull(text) {
  const t = String(text).trim();
  return t === '' ? null : Number(t);
}

/** Sets on `body` each of `names` whose input holds a number. */
function numbersInto(body, f, names) {
  for (const name of names) {
    const n = numberOrNull(f[name].value);
    if (n != null) body[name] = n;
  }
}

const modelList = (text) => text.split(',').map((m) => m.trim()).filter(Boolean);
const keysText = (n) => (n === 1 ? '1 key' : `${n} keys`);
const FILE_TEAM = 'Defined in the config file: change it there, then run `svc reload`.';

/** The form of a new team (`team` null) or of a change to a runtime team; resolves to the request body. */
function teamForm(team) {
  return modal((close) => {
    const v = (x) => (x == null ? '' : String(x));
    const t = team || { models: [] };
    const f = {
      team_id: team ? null : h('input', { name: 'team_id', required: true, maxlength: '128', placeholder: 'e.g. research' }),
      team_alias: h('input', { name: 'team_alias', maxlength: '128', placeholder: 'e.g. Research agents', value: v(t.team_alias) }),
      models: h('input', { name: 'models', placeholder: 'all models', value: t.models.join(', ') }),
      max_budget: h('input', { name: 'max_budget', type: 'number', min: '0', step: 'any', placeholder: 'none', value: v(t.max_budget) }),
      budget_duration: h('input', { name: 'budget_duration', placeholder: 'e.g. 1d, 30d', value: v(t.budget_duration) }),
      rpm_limit: h('input', { name: 'rpm_limit', type: 'number', min: '1', step: '1', placeholder: 'none', value: v(t.rpm_limit) }),
      tpm_limit: h('input', { name: 'tpm_limit', type: 'number', min: '1', step: '1', placeholder: 'none', value: v(t.tpm_limit) }),
    };
    const field = (label, input) => h('label', { class: 'field' }, label, input);
    return h('form', { method: 'dialog', onsubmit: (e) => {
      e.preventDefault();
      // A change sends the alias and models as they are (empty: none, every model); a new team only what is set.
      const body = team ? { team_id: team.team_id, team_alias: f.team_alias.value.trim(), models: modelList(f.models.value) } : { team_id: f.team_id.value.trim() };
      if (!team && f.team_alias.value.trim()) body.team_alias = f.team_alias.value.trim();
      if (!team && modelList(f.models.value).length) body.models = modelList(f.models.value);
      if (f.budget_duration.value.trim()) body.budget_duration = f.budget_duration.value.trim();
      // A change sends the budget and limits as they are (empty: none); a new team only those set.
      if (team) for (const name of ['max_budget', 'rpm_limit', 'tpm_limit']) body[name] = numberOrNull(f[name].value);
      else numbersInto(body, f, ['max_budget', 'rpm_limit', 'tpm_limit']);
      close(body);
    } },
    h('h2', null, team ? `Edit team ${team.team_id}` : 'New team'),
    h('div', { class: 'form-grid' },
      f.team_id ? field('Team name', f.team_id) : null, field('Alias', f.team_alias), field('Models (comma-separated)', f.models),
      field('Budget', f.max_budget), field('Budget period', f.budget_duration), field('Requests / min', f.rpm_limit), field('Tokens / min', f.tpm_limit)),
    team ? h('div', { class: 'note' }, 'An empty budget or limit means none (unlimited); the budget period keeps its start.') : null,
    h('div', { class: 'dlg-actions' },
      h('button', { type: 'button', onclick: () => close(null) }, 'Cancel'),
      h('button', { type: 'submit', class: 'primary' }, team ? 'Save' : 'Create team')));
  });
}

function keyForm(teams) {
  return modal((close) => {
    const f = {
      team_id: h('select', { name: 'team_id', required: true }, teams.map((t) => h('option', { value: t.team_id }, t.team_id))),
      key_alias: h('input', { name: 'key_alias', placeholder: 'e.g. planner-1' }),
      agent_role: h('input', { name: 'agent_role', placeholder: 'e.g. coder' }),
      models: h('input', { name: 'models', placeholder: 'all of the team’s' }),
      max_budget: h('input', { name: 'max_budget', type: 'number', min: '0', step: 'any', placeholder: 'none' }),
      budget_duration: h('input', { name: 'budget_duration', placeholder: 'e.g. 1d, 30d' }),
      rpm_limit: h('input', { name: 'rpm_limit', type: 'number', min: '1', step: '1', placeholder: 'none' }),
      tpm_limit: h('input', { name: 'tpm_limit', type: 'number', min: '1', step: '1', placeholder: 'none' }),
    };
    const field = (label, input) => h('label', { class: 'field' }, label, input);
    return h('form', { method: 'dialog', onsubmit: (e) => {
      e.preventDefault();
      const body = { team_id: f.team_id.value };
      for (const name of ['key_alias', 'agent_role', 'budget_duration']) if (f[name].value.trim()) body[name] = f[name].value.trim();
      const models = modelList(f.models.value);
      if (models.length) body.models = models;
      numbersInto(body, f, ['max_budget', 'rpm_limit', 'tpm_limit']);
      close(body);
    } },
    h('h2', null, 'New virtual key'),
    h('div', { class: 'form-grid' },
      field('Team', f.team_id), field('Alias', f.key_alias), field('Agent role', f.agent_role), field('Models (comma-separated)', f.models),
      field('Budget', f.max_budget), field('Budget period', f.budget_duration), field('Requests / min', f.rpm_limit), field('Tokens / min', f.tpm_limit)),
    h('div', { class: 'dlg-actions' },
      h('button', { type: 'button', onclick: () => close(null) }, 'Cancel'),
      h('button', { type: 'submit', class: 'primary' }, 'Create key')));
  });
}

function budgetForm(key) {
  return modal((close) => {
    const limit = h('input', { type: 'number', min: '0', step: 'any', value: key.max_budget == null ? '' : String(key.max_budget), placeholder: 'none' });
    const period = h('input', { value: key.budget_duration || '', placeholder: 'e.g. 1d, 30d' });
    return h('form', { method: 'dialog', onsubmit: (e) => {
      e.preventDefault();
      const body = { key: key.key_id, max_budget: numberOrNull(limit.value) };
      if (period.value.trim()) body.budget_duration = period.value.trim();
      close(body);
    } },
    h('h2', null, `Budget of ${key.key_alias || key.key_hint}`),
    h('div', { class: 'form-grid' }, h('label', { class: 'field' }, 'Budget (empty: none)', limit), h('label', { class: 'field' }, 'Budget period', period)),
    h('div', { class: 'dlg-actions' }, h('button', { type: 'button', onclick: () => close(null) }, 'Cancel'), h('button', { type: 'submit', class: 'primary' }, 'Save')));
  });
}

function status(k) {
  if (k.blocked) return pill('revoked', 'bad');
  if (k.expires && new Date(k.expires).getTime() <= Date.now()) return pill('expired', 'warn');
  return pill('active', 'ok');
}

export default {
  id: 'keys',
  title: 'Teams & keys',
  icon: 'M15 7a4 4 0 1 1-3.9 4.9L3 20v-3h2v-2h2l2.1-2.1A4 4 0 0 1 15 7zM16 10h.01',
  mount(root, ctx) {
    const teamsBox = h('div', { class: 'flush' });
    const keysBox = h('div', { class: 'flush' });
    let teams = [];
    const act = async (fn, done) => {
      const ok = await guarded(fn);
      if (ok !== undefined) {
        if (done) toast(typeof done === 'function' ? done(ok) : done, 'ok');
        ctx.refreshNow();
      }
      return ok;
    };
    const create = async () => {
      const body = await keyForm(teams);
      if (!body) return;
      const info = await act(() => api('/key/generate', { method: 'POST', body }));
      if (info) await showSecret('Key created', info);
    };
    const newKey = h('button', { class: 'primary', id: 'new-key', onclick: create }, '+ New key');
    const newTeam = h('button', { class: 'primary', id: 'new-team', onclick: async () => {
      const body = await teamForm(null);
      if (body) await act(() => api('/team/new', { method: 'POST', body }), 'Team created');
    } }, '+ New team');
    const teamsAside = h('div', { class: 'actions', style: { alignItems: 'center' } }, h('span', { class: 'muted' }, 'config file and runtime'), newTeam);
    root.append(h('div', { class: 'stack' }, card('Teams', teamsAside, teamsBox), card('Virtual keys', newKey, keysBox)));

    const teamActions = (t) => (t.defined_in !== 'api' ? Object.assign(pill('config file'), { title: FILE_TEAM }) : h('div', { class: 'actions' },
      h('button', { class: 'small', onclick: async () => {
        const body = await teamForm(t);
        if (body) await act(() => api('/team/update', { method: 'POST', body }), 'Team saved');
      } }, 'Edit'),
      h('button', { class: 'small danger', onclick: async () => {
        const what = t.keys ? `${t.team_id} and its ${keysText(t.keys)} are deleted for good: requests with those keys are refused from now on.` : `${t.team_id} is deleted for good.`;
        if (await confirmAction('Delete this team?', `${what} Its spend records stay.`, 'Delete')) {
          await act(() => api('/team/delete', { method: 'POST', body: { team_ids: [t.team_id] } }),
            (r) => (r.deleted_keys.length ? `Team deleted with ${keysText(r.deleted_keys.length)}` : 'Team deleted'));
        }
      } }, 'Delete')));

    const actions = (k) => h('div', { class: 'actions' },
      h('button', { class: 'small', onclick: async () => {
        if (!(await confirmAction('Rotate this key?', `The current secret of ${k.key_alias || k.key_hint} stops working at once. Its id, budget and spend stay.`, 'Rotate'))) return;
        const info = await act(() => api('/key/regenerate', { method: 'POST', body: { key: k.key_id } }));
        if (info) await showSecret('Key rotated', info);
      } }, 'Rotate'),
      h('button', { class: 'small', onclick: async () => {
        const body = await budgetForm(k);
        if (body) await act(() => api('/key/update', { method: 'POST', body }), 'Budget saved');
      } }, 'Budget'),
      k.blocked
        ? h('button', { class: 'small', onclick: () => act(() => api('/key/unblock', { method: 'POST', body: { key: k.key_id } }), 'Key restored') }, 'Restore')
        : h('button', { class: 'small danger', onclick: async () => {
          if (await confirmAction('Revoke this key?', `Requests with ${k.key_alias || k.key_hint} are refused from now on. You can restore it later.`, 'Revoke')) {
            await act(() => api('/key/block', { method: 'POST', body: { key: k.key_id } }), 'Key revoked');
          }
        } }, 'Revoke'),
      h('button', { class: 'small danger', onclick: async () => {
        if (await confirmAction('Delete this key?', `${k.key_alias || k.key_hint} is deleted for good; its spend records stay.`, 'Delete')) {
          await act(() => api('/key/delete', { method: 'POST', body: { keys: [k.key_id] } }), 'Key deleted');
        }
      } }, 'Delete'));

    return {
      async refresh() {
        const [teamList, keyList, spend] = await Promise.all([api('/team/list'), api('/key/list'), api('/spend/logs', { query: { group_by: 'key' } })]);
        teams = teamList;
        const spent = new Map(spend.data.map((g) => [g.group, g.spend]));
        fill(teamsBox, table(
          [['Team'], ['From', 'hide-sm'], ['Models', 'hide-sm'], ['Limits', 'hide-sm'], ['Keys', 'num'], ['Budget'], ['Resets', 'hide-sm'], ['', 'num']],
          teamList.map((t) => [
            h('td', { dataset: { team: t.team_id } }, h('strong', null, t.team_id), t.team_alias ? h('span', { class: 'sub' }, t.team_alias) : null),
            h('td', { class: 'hide-sm', dataset: { origin: t.defined_in }, title: t.defined_in === 'api' ? 'Made at runtime (/team/new): change it here.' : FILE_TEAM }, t.defined_in),
            h('td', { class: 'hide-sm' }, t.models.length ? t.models.join(', ') : h('span', { class: 'muted' }, 'all')),
            h('td', { class: 'hide-sm' }, [t.rpm_limit ? `${count(t.rpm_limit)} rpm` : null, t.tpm_limit ? `${count(t.tpm_limit)} tpm` : null].filter(Boolean).join(' · ') || '—'),
            count(t.keys),
            t.budget ? budgetBar(t.budget.spent + t.budget.reserved, t.budget.limit, t.budget_duration) : h('span', { class: 'muted' }, 'no budget'),
            h('td', { class: 'hide-sm' }, t.budget ? relative(t.budget.reset_at) : '—'),
            h('td', { class: 'num' }, teamActions(t)),
          ]),
          'No teams yet'));
        const rows = [...keyList.keys].sort((a, b) => b.created_at.localeCompare(a.created_at));
        fill(keysBox, rows.length ? table(
          [['Key'], ['Team'], ['Budget', 'num hide-sm'], ['Spend', 'num'], ['Status'], ['Created', 'hide-sm'], ['', 'num']],
          rows.map((k) => {
            const tr = [
              h('td', { dataset: { key: k.key_alias || k.key_id } }, h('strong', null, k.key_alias || '(no alias)'), h('span', { class: 'sub mono' }, k.key_hint)),
              h('td', null, k.team_id, h('span', { class: 'sub' }, k.agent_role || '')),
              h('td', { class: 'num hide-sm' }, k.max_budget == null ? '—' : `${money(k.max_budget)} / ${k.budget_duration || 'team period'}`),
              money(spent.get(k.key_id) || 0),
              status(k),
              h('td', { class: 'hide-sm' }, time(k.created_at)),
              h('td', { class: 'num' }, actions(k)),
            ];
            return tr;
          })) : h('div', { class: 'empty' }, h('strong', null, 'No virtual keys yet'), h('span', null, 'Create one for each agent: its secret is shown once.')));
      },
    };
  },
};
