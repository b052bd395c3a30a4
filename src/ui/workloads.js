// The workloads, and one workload: its evaluation setting and refs, its score table (the baseline
// beside one column per training configuration, best first: docs/evaluations.md), its runs and
// its evaluations.
import { evaluationsTable } from './run.js';
import { runsTable } from './runs.js';
import {
  api, h, number, percent, runLink, section, shortId, show, table, time, workloadLink,
} from './util.js';

export async function renderWorkloads(view) {
  document.title = 'trainer · workloads';
  const list = await api('/v1/workloads');
  show(view, h('h1', null, 'Workloads'), list.workloads.length ? table([
    { title: 'Workload', cell: (w) => workloadLink(w) },
    { title: 'Description', cell: (w) => w.description || '' },
    { title: 'Evaluation dataset', cell: (w) => shortId((w.evaluation || {}).dataset) || '–', className: 'mono' },
    { title: 'Grader', cell: (w) => (w.evaluation || {}).grader || '–' },
    { title: 'GPU quota', cell: (w) => number(w.gpuQuota), className: 'num' },
    { title: 'Created', cell: (w) => time(w.createdAt) },
  ], list.workloads, { id: 'workloads' }) : h('p', { class: 'muted' }, 'No workloads yet.'));
}

export async function renderWorkload(view, ref) {
  const name = encodeURIComponent(ref);
  const workload = await api(`/v1/workloads/${name}`);
  document.title = `trainer · ${workload.name}`;
  const evaluation = workload.evaluation || {};
  const [scores, runs, evaluations] = await Promise.all([
    evaluation.dataset ? api(`/v1/workloads/${name}/scores`) : null,
    api(`/v1/runs?workload=${name}&limit=50`),
    api(`/v1/evaluations?workload=${name}&limit=50`),
  ]);
  show(view,
    h('h1', null, 'Workload ', h('span', { id: 'workload-name' }, workload.name)),
    workload.description ? h('p', null, workload.description) : null,
    h('dl', { class: 'facts' },
      h('dt', null, 'Evaluation'), h('dd', null, evaluation.dataset
        ? `dataset ${shortId(evaluation.dataset)}, grader ${evaluation.grader || 'default'}` : 'no evaluation dataset set'),
      h('dt', null, 'GPU quota'), h('dd', null, number(workload.gpuQuota)),
      ['base', 'candidate', 'champion'].map((which) => [h('dt', null, which), h('dd', null, refTarget((workload.refs || {})[which]))])),
    section('Scores', { id: 'scores' }, scores ? scoreTables(scores)
      : h('p', { class: 'muted' }, 'Set an evaluation dataset (trainer workloads set-evaluation) to score this workload.')),
    section('Runs', null, runsTable(runs)),
    section('Evaluations', null, evaluations.evaluations.length ? evaluationsTable(evaluations.evaluations, 'evaluations')
      : h('p', { class: 'muted' }, 'No evaluations yet.')));
}

function refTarget(target) {
  if (!target) return '–';
  const parts = [target.name || target.baseModel || '', target.modelId ? ` model ${shortId(target.modelId)}` : ''];
  return [parts.join(''), target.runId ? [' from run ', runLink(target.runId)] : null];
}

// One table per base-model revision: the baseline first, then the configurations, best first.
function scoreTables(scores) {
  if (!scores.tables.length) return h('p', { class: 'muted' }, 'No completed evaluations under this setting yet.');
  return scores.tables.map((t) => {
    const rows = [...(t.baseline ? [{ ...t.baseline, config: 'baseline', baselineRow: true }] : []), ...t.columns];
    return h('div', { class: 'score-table' },
      h('h3', null, `Base model ${t.baseModel}`, t.revision ? h('span', { class: 'muted mono' }, ` (revision ${shortId(t.revision)})`) : null),
      table([
        { title: 'Config', cell: (c) => c.config },
        { title: 'Score', cell: (c) => number(c.meanScore), className: 'num' },
        { title: 'Exact', cell: (c) => percent(c.exactMatchRate), className: 'num' },
        { title: 'vs baseline', cell: (c) => (c.delta === null || c.delta === undefined ? '–' : signed(c.delta)), className: 'num' },
        { title: '95% interval', cell: (c) => interval(c.versusBaseline) },
        { title: 'Evals', cell: (c) => number(c.evaluations), className: 'num' },
        { title: 'Newest of', cell: (c) => (c.runId ? runLink(c.runId) : c.modelId ? `model ${shortId(c.modelId)}` : '–') },
        { title: 'Evaluation', cell: (c) => h('span', { class: 'mono' }, shortId(c.evaluationId)) },
      ], rows, { class: 'scores', 'data-base-model': t.baseModel }));
  });
}

function signed(x) {
  return `${x >= 0 ? '+' : ''}${number(x)}`;
}

function interval(v) {
  if (!v) return '–';
  return h('span', { class: `verdict verdict-${String(v.verdict).replace(/\s+/g, '-')}` },
    `[${signed(v.low)}, ${signed(v.high)}] ${v.verdict}`);
}
