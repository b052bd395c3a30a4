// What every view uses: the JSON API, building elements, and formatting figures the same way.

// GET `path` of trainerd's API as JSON; throws an Error carrying the API's message.
// The page sends its API token as the trainer_token cookie (trainerd reads it on GET requests
// only; docs/security.md), so the metrics stream's EventSource carries it too. A 401 throws a
// LoginNeeded, which the router answers with the login form.
export class LoginNeeded extends Error {}

export async function api(path) {
  const response = await fetch(path, { headers: { Accept: 'application/json' }, credentials: 'same-origin' });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) throw new LoginNeeded(body.error ? body.error.message : 'an API token is needed');
  if (!response.ok) {
    const message = body.error ? body.error.message : `${response.status} ${response.statusText}`;
    throw new Error(`${path}: ${message}`);
  }
  return body;
}

// An element: h('a', {href: '/x', class: 'y'}, 'text', child, ...). Attributes that are null,
// undefined or false are left out; children that are null or false too.
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    element.setAttribute(name === 'className' ? 'class' : name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

// A table: `columns` [{title, cell: row => node or text, className?}], one row per item.
export function table(columns, rows, attrs) {
  const head = h('tr', null, columns.map((c) => h('th', { class: c.className }, c.title)));
  const body = rows.map((row) => h('tr', null, columns.map((c) => h('td', { class: c.className }, c.cell(row)))));
  return h('table', attrs, h('thead', null, head), h('tbody', null, body));
}

// A section with a heading; `body` is what it holds.
export function section(title, attrs, ...body) {
  return h('section', attrs, h('h2', null, title), ...body);
}

export function shortId(id) {
  return id ? String(id).slice(0, 12) : '';
}

export function runLink(id) {
  return h('a', { href: `/runs/${encodeURIComponent(id)}`, class: 'mono' }, shortId(id));
}

export function workloadLink(workload) {
  if (!workload) return '';
  const name = typeof workload === 'string' ? workload : workload.name || workload.id;
  return h('a', { href: `/workloads/${encodeURIComponent(name)}` }, name);
}

// A dataset reference ({hash, ref}) by the name it was given, else its short hash.
export function datasetName(dataset) {
  if (!dataset) return '–';
  return dataset.ref && !/^[0-9a-f]{64}$/.test(dataset.ref) ? dataset.ref : shortId(dataset.hash || dataset.ref);
}

export function phaseBadge(phase) {
  return h('span', { class: `phase phase-${String(phase || 'unknown').toLowerCase()}`, 'data-phase': phase }, phase);
}

export const TERMINAL = ['COMPLETED', 'FAILED', 'CANCELLED'];

export function number(value, digits = 4) {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  if (typeof value !== 'number') return String(value);
  if (Number.isInteger(value)) return value.toLocaleString('en-US');
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude < 1e-3 || magnitude >= 1e6)) return value.toExponential(2);
  return value.toFixed(digits);
}

export function percent(share) {
  return share === null || share === undefined ? '–' : `${(share * 100).toFixed(1)}%`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return '–';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

// An RFC 3339 time as "YYYY-MM-DD HH:MM:SS" (UTC, as the API gives it).
export function time(text) {
  if (!text) return '–';
  return String(text).replace('T', ' ').replace(/\.\d+/, '').replace(/Z$/, '');
}

export function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

// A run's cost: device time and kind, "(est.)" while its job runs.
export function cost(run) {
  const c = run.cost;
  if (!c) return '–';
  return `${duration(c.deviceSeconds)} ${c.deviceKind || ''}${c.estimated ? ' (est.)' : ''}`;
}

// A run's progress: a bar and "step / total".
export function progress(run) {
  const p = run.progress || {};
  const step = p.step || 0;
  const total = p.totalSteps || 0;
  const share = total > 0 ? Math.min(1, step / total) : 0;
  return h('span', { class: 'progress', 'data-step': step, 'data-total': total },
    h('span', { class: 'bar' }, h('span', { class: 'fill', style: `width: ${(share * 100).toFixed(1)}%` })),
    h('span', { class: 'figures' }, total > 0 ? `${step} / ${total}` : `${step}`));
}

export function method(run) {
  return run.method || (run.plan && run.plan.config && run.plan.config.method) || 'sft';
}

export function isReinforcement(run) {
  return ['grpo', 'gspo'].includes(method(run));
}

// Replaces the view's content with `nodes`.
export function show(view, ...nodes) {
  view.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
}

export function failure(error) {
  return h('p', { class: 'error' }, String(error && error.message ? error.message : error));
}

// The form that keeps a token for this page: a read token is enough (`trainer tokens create NAME
// --role read`). Kept as a cookie of this address for the browser's session.
export function loginForm(reason) {
  const input = h('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'trn_…', size: 40 });
  const form = h('form', { id: 'login' },
    h('p', {}, 'This dashboard reads trainerd\'s API, which needs a token: ', reason),
    h('p', { class: 'muted' }, 'Make a read token with `trainer tokens create NAME --role read`.'),
    h('label', { for: 'token' }, 'API token '), input, ' ', h('button', { type: 'submit' }, 'Use it'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    document.cookie = `trainer_token=${encodeURIComponent(input.value.trim())}; Path=/; SameSite=Strict`;
    location.reload();
  });
  return form;
}
