// One run: what it is and where it stands, its curves drawn live from the metrics stream
// (GET /v1/runs/{id}/metrics/stream, Server-Sent Events: the page never polls for points), its
// phases, snapshots and branch tree, its rollouts (reinforcement runs: the best and the worst of
// the latest batch, each reward split into its terms' shares) and its evaluations.
import { StepChart } from './charts.js';
import {
  TERMINAL, api, bytes, cost, datasetName, duration, failure, h, isReinforcement, method, number, percent,
  phaseBadge, progress, runLink, section, shortId, show, table, time, workloadLink,
} from './util.js';

const PANEL_REFRESH_MS = 5000; // the panels follow the stream's changes at most this often
const ROLLOUTS_SHOWN = 5; // best and worst each
const REWARD_COLOR = '#1f2328'; // the total, apart from its terms' colours
const TERM_COLORS = ['#dd8452', '#55a868', '#c44e52', '#8172b3', '#937860', '#4c72b0'];
const termColor = (i) => TERM_COLORS[i % TERM_COLORS.length]; // the chart's and the share bars' alike

export async function renderRun(view, ref) {
  let run = await api(`/v1/runs/${encodeURIComponent(ref)}`);
  document.title = `trainer · run ${shortId(run.runId)}`;
  const reinforcement = isReinforcement(run);
  const charts = [new StepChart('chart-loss', 'Loss', [
    { key: 'loss', label: 'loss', color: '#4c72b0' },
    { key: 'validationLoss', label: 'validation loss', color: '#dd8452', sparse: true },
  ])];
  if (reinforcement) {
    const terms = termNames(run).map((name, i) => ({
      key: `rewardTerms.${name}`, label: name, color: termColor(i),
    }));
    charts.push(new StepChart('chart-reward', 'Reward', [{ key: 'reward', label: 'reward', color: REWARD_COLOR }, ...terms]));
  }
  const panels = {
    header: h('div', { id: 'run-header' }),
    phases: h('div', { id: 'run-phases' }),
    snapshots: h('div', { id: 'run-snapshots' }),
    tree: h('div', { id: 'run-tree' }),
    rollouts: reinforcement ? h('div', { id: 'run-rollouts' }) : null,
    evaluations: h('div', { id: 'run-evaluations' }),
  };
  const streamState = h('span', { id: 'stream-state', class: 'muted' }, 'connecting…');
  show(view,
    panels.header,
    section('Curves', { id: 'curves' }, h('p', { class: 'muted' }, 'Live: ', streamState),
      h('div', { class: 'charts' }, charts.map((c) => c.element))),
    section('Phases', null, panels.phases),
    reinforcement ? section('Rollouts', null, panels.rollouts) : null,
    section('Snapshots', null, panels.snapshots),
    section('Branch tree', null, panels.tree),
    section('Evaluations', null, panels.evaluations));
  for (const chart of charts) chart.attach();

  const refresh = async () => {
    try {
      run = await api(`/v1/runs/${encodeURIComponent(run.runId)}`);
    } catch (error) {
      show(panels.header, failure(error));
      return;
    }
    drawHeader(panels.header, run);
    drawPhases(panels.phases, run);
    await Promise.all([
      fill(panels.snapshots, () => snapshotsPanel(run)),
      fill(panels.tree, () => treePanel(run)),
      reinforcement ? fill(panels.rollouts, () => rolloutsPanel(run)) : null,
      fill(panels.evaluations, () => evaluationsPanel(run)),
    ]);
  };
  await refresh();
  const refreshSoon = throttle(refresh, PANEL_REFRESH_MS);
  // The stream's summary of the run (phase, progress, latest figures, cost) shows at once; the
  // rest of the page follows at the panels' pace.
  const onRun = (summary) => {
    run = { ...run, ...summary };
    drawHeader(panels.header, run);
    refreshSoon();
  };
  follow(run, charts, streamState, onRun);
}

// The stream: points into the charts, the run's summary to `onRun` after each change; the last
// event closes it (else the browser would connect again).
function follow(run, charts, state, onRun) {
  const source = new EventSource(`/v1/runs/${encodeURIComponent(run.runId)}/metrics/stream`);
  source.addEventListener('open', () => { state.textContent = 'following'; });
  source.addEventListener('points', (e) => {
    const points = JSON.parse(e.data);
    for (const chart of charts) chart.update(points.steps, points.reset);
  });
  source.addEventListener('run', (e) => onRun(JSON.parse(e.data)));
  source.addEventListener('end', (e) => {
    source.close();
    state.textContent = `ended (${JSON.parse(e.data).phase})`;
  });
  source.addEventListener('problem', (e) => {
    source.close();
    state.textContent = `stopped: ${JSON.parse(e.data).message}`;
  });
  source.addEventListener('error', () => {
    if (source.readyState !== EventSource.CLOSED) state.textContent = 'reconnecting…';
  });
}

// `fn` at most once per `ms`, the last call of a burst always honoured.
function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  return () => {
    if (timer) return;
    const wait = Math.max(0, last + ms - Date.now());
    timer = setTimeout(async () => {
      timer = null;
      last = Date.now();
      await fn();
    }, wait);
  };
}

// Replaces `element`'s content with what `build` gives, or its error.
async function fill(element, build) {
  try {
    show(element, await build());
  } catch (error) {
    show(element, failure(error));
  }
}

function termNames(run) {
  const terms = (((run.plan || {}).config || {}).reward || {}).terms || [];
  return terms.map((t) => t.name || t.kind).filter(Boolean);
}

function drawHeader(element, run) {
  const latest = run.latest || {};
  const facts = [
    ['Workload', workloadLink(run.workload)],
    ['Method', method(run)],
    ['Base model', run.baseModel],
    ['Progress', progress(run)],
    ['Loss', number(latest.loss)],
    ['Validation loss', latest.validationLoss !== undefined ? number(latest.validationLoss) : null],
    ['Reward', latest.reward !== undefined ? number(latest.reward) : null],
    ['Tokens/s', latest.tokensPerSecond !== undefined ? number(latest.tokensPerSecond, 1) : null],
    ['Cost', cost(run)],
    ['Attempt', run.attempt],
    ['Claim', run.claim ? `${run.claim.pool}: ${run.claim.devices} device(s), ${run.claim.state}` : null],
    ['Parent', run.parentRunId ? [runLink(run.parentRunId), run.sourceStep ? ` from step ${run.sourceStep}` : ''] : null],
    ['Model', run.modelId ? h('span', { class: 'mono' }, shortId(run.modelId)) : null],
    ['Created', time(run.createdAt)],
    ['Ended', run.endedAt ? time(run.endedAt) : null],
  ].filter(([, value]) => value !== null && value !== undefined);
  show(element,
    h('h1', null, 'Run ', h('span', { class: 'mono', id: 'run-id' }, shortId(run.runId)), ' ', phaseBadge(run.phase),
      run.configName ? h('span', { class: 'muted' }, ` ${run.configName}`) : null),
    run.description ? h('p', null, run.description) : null,
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', null, v)])),
    run.failureReason ? h('pre', { class: 'error' }, run.failureReason) : null,
  );
}

function drawPhases(element, run) {
  const history = run.phaseHistory || [];
  const endOf = (i) => (i + 1 < history.length ? history[i + 1].enteredAt : (TERMINAL.includes(run.phase) ? null : new Date().toISOString()));
  show(element, table([
    { title: 'Phase', cell: (p) => phaseBadge(p.phase) },
    { title: 'Entered', cell: (p) => time(p.enteredAt) },
    { title: 'For', cell: (p) => (p.end ? duration((Date.parse(p.end) - Date.parse(p.enteredAt)) / 1000) : '–'), className: 'num' },
  ], history.map((p, i) => ({ ...p, end: endOf(i) })), { id: 'phases' }));
}

async function snapshotsPanel(run) {
  const list = await api(`/v1/runs/${encodeURIComponent(run.runId)}/snapshots?limit=50`);
  if (!list.snapshots.length) return h('p', { class: 'muted' }, 'No snapshots yet.');
  return table([
    { title: 'Snapshot', cell: (s) => h('span', { class: 'mono' }, shortId(s.snapshotId)) },
    { title: 'Step', cell: (s) => number(s.savedStep ?? s.step), className: 'num' },
    { title: 'Artifacts', cell: (s) => (s.artifacts || []).join(', ') },
    { title: 'Size', cell: (s) => bytes(s.sizeBytes), className: 'num' },
    { title: 'Status', cell: (s) => s.status },
    { title: 'Held by', cell: (s) => (s.heldBy || []).map((hold) => hold.holder).join(', ') || '–' },
    { title: 'Saved', cell: (s) => time(s.committedAt || s.createdAt) },
  ], list.snapshots, { id: 'snapshots' });
}

// The whole family from its root, each run under its parent, this run marked.
async function treePanel(run) {
  const root = run.rootRunId || run.runId;
  const tree = await api(`/v1/runs/${encodeURIComponent(root)}/tree`);
  return h('ul', { class: 'tree', id: 'tree' }, tree.runs.map((r) => h('li', {
    style: `padding-left: ${r.depth * 1.5}em`, class: r.runId === run.runId ? 'current' : null,
  }, runLink(r.runId), ' ', phaseBadge(r.phase), ' ', r.configName || r.method || '',
  r.sourceStep ? h('span', { class: 'muted' }, ` from step ${r.sourceStep}`) : null)));
}

async function rolloutsPanel(run) {
  const id = encodeURIComponent(run.runId);
  const [best, worst] = await Promise.all([
    api(`/v1/runs/${id}/rollouts?best=${ROLLOUTS_SHOWN}`), api(`/v1/runs/${id}/rollouts?worst=${ROLLOUTS_SHOWN}`),
  ]);
  if (best.step === null) return h('p', { class: 'muted' }, 'No generation batch yet.');
  return [
    h('p', { class: 'muted' }, `The batch of step ${best.step}: ${best.total} rollouts (batches at steps ${best.steps.join(', ')}).`),
    h('h3', null, 'Best'), rolloutsTable(best.rollouts, 'rollouts-best'),
    h('h3', null, 'Worst'), rolloutsTable(worst.rollouts, 'rollouts-worst'),
  ];
}

function rolloutsTable(rollouts, id) {
  return table([
    { title: 'Reward', cell: (r) => number(r.reward), className: 'num' },
    { title: 'Terms', cell: (r) => termShares(r.terms || []) },
    { title: 'Prompt', cell: (r) => h('pre', { class: 'text' }, tail(r.prompt, 300)) },
    { title: 'Completion', cell: (r) => h('pre', { class: 'text' }, r.completion) },
    { title: 'Tokens', cell: (r) => `${r.completionTokens}${r.terminated ? '' : ' (cut)'}`, className: 'num' },
  ], rollouts, { id, class: 'rollouts' });
}

// Each term's share of the reward (weight × raw score) as a bar segment, with its figures.
function termShares(terms) {
  const bar = h('span', { class: 'shares' }, terms.map((t, i) => h('span', {
    class: 'share', title: `${t.name}: ${number(t.share)} (raw ${number(t.raw)} × weight ${number(t.weight)})`,
    style: `width: ${Math.max(0, Math.min(1, t.share || 0)) * 100}%; background: ${termColor(i)}`,
  })));
  const words = terms.map((t) => `${t.name} ${number(t.share, 3)}${t.failed ? ' (failed)' : ''}`).join(' · ');
  return [bar, h('span', { class: 'muted small' }, words)];
}

function tail(text, n) {
  const s = String(text || '');
  return s.length > n ? `…${s.slice(s.length - n)}` : s;
}

async function evaluationsPanel(run) {
  const list = await api(`/v1/evaluations?model=${encodeURIComponent(run.runId)}&limit=50`);
  const evaluations = list.evaluations || [];
  if (!evaluations.length) return h('p', { class: 'muted' }, 'No evaluations of this run.');
  return evaluationsTable(evaluations, 'evaluations');
}

export function evaluationsTable(evaluations, id) {
  return table([
    { title: 'Evaluation', cell: (e) => h('span', { class: 'mono' }, shortId(e.evaluationId)) },
    { title: 'Phase', cell: (e) => phaseBadge(e.phase) },
    { title: 'Dataset', cell: (e) => datasetName(e.dataset) },
    { title: 'Grader', cell: (e) => (e.grader ? e.grader.kind || e.grader.name : '–') },
    { title: 'Mean score', cell: (e) => number((e.report || {}).meanScore), className: 'num' },
    { title: 'Exact match', cell: (e) => percent((e.report || {}).exactMatchRate), className: 'num' },
    { title: 'Rows', cell: (e) => `${(e.progress || {}).rowsDone ?? '–'} / ${(e.progress || {}).rowsTotal ?? '–'}`, className: 'num' },
    { title: 'Ended', cell: (e) => time(e.endedAt) },
  ], evaluations, { id });
}
