// The runs list: each run's phase, progress, latest figures and cost, newest first. It reads the
// list again every few seconds while a run on it is still open; a list of ended runs stays still.
import {
  TERMINAL, api, cost, failure, h, method, number, phaseBadge, progress, runLink, show, time, workloadLink,
} from './util.js';

const LIMIT = 100;
const REFRESH_MS = 5000; // while a listed run is open

export async function renderRuns(view) {
  document.title = 'trainer · runs';
  let timer = null;
  const draw = async () => {
    let list;
    try {
      list = await api(`/v1/runs?limit=${LIMIT}`);
    } catch (error) {
      show(view, failure(error));
      return;
    }
    if (!view.isConnected) return;
    show(view, h('h1', null, 'Runs'), runsTable(list));
    clearTimeout(timer);
    if (list.runs.some((r) => !TERMINAL.includes(r.phase))) timer = setTimeout(draw, REFRESH_MS);
  };
  await draw();
}

// The table of a run list answer ({runs, total}); also the workload page's.
export function runsTable(list) {
  if (!list.runs.length) return h('p', { class: 'muted', id: 'runs-empty' }, 'No runs yet.');
  const columns = [
    { title: 'Run', cell: (r) => runLink(r.runId), className: 'mono' },
    { title: 'Workload', cell: (r) => workloadLink(r.workload) },
    { title: 'Config', cell: (r) => r.configName || r.description || '' },
    { title: 'Method', cell: (r) => method(r) },
    { title: 'Phase', cell: (r) => phaseBadge(r.phase) },
    { title: 'Progress', cell: (r) => progress(r) },
    { title: 'Loss', cell: (r) => number((r.latest || {}).loss), className: 'num' },
    { title: 'Reward', cell: (r) => number((r.latest || {}).reward), className: 'num' },
    { title: 'Cost', cell: (r) => cost(r), className: 'num' },
    { title: 'Created', cell: (r) => time(r.createdAt) },
  ];
  const t = h('table', { id: 'runs', class: 'list' },
    h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.className }, c.title)))),
    h('tbody', null, list.runs.map((r) => h('tr', { 'data-run-id': r.runId, 'data-phase': r.phase },
      columns.map((c) => h('td', { class: c.className }, c.cell(r)))))));
  const more = list.total > list.runs.length ? h('p', { class: 'muted' }, `${list.runs.length} of ${list.total} runs shown.`) : null;
  return [t, more];
}
