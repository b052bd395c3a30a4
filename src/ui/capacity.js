// Capacity: the pools (declared, granted, outside, free, queued), the claims that hold devices,
// the queue in admission order, the warnings (claims holding an ended window's devices), and
// each workload's quota.
import {
  api, h, number, runLink, section, show, table, time, workloadLink,
} from './util.js';

export async function renderCapacity(view) {
  document.title = 'trainer · capacity';
  const capacity = await api('/v1/capacity');
  const claims = capacity.claims || [];
  const granted = claims.filter((c) => c.state !== 'QUEUED');
  const queued = claims.filter((c) => c.state === 'QUEUED');
  show(view,
    h('h1', null, 'Capacity'),
    section('Pools', null, table([
      { title: 'Pool', cell: (p) => p.name },
      { title: 'Accelerator', cell: (p) => p.accelerator },
      { title: 'Serving', cell: (p) => (p.serving ? 'yes' : 'no') },
      { title: 'Declared', cell: (p) => number(p.declared), className: 'num' },
      { title: 'Observed', cell: (p) => number(p.observed), className: 'num' },
      { title: 'Granted', cell: (p) => number(p.granted), className: 'num' },
      { title: 'Outside', cell: (p) => number(p.outside), className: 'num' },
      { title: 'Free', cell: (p) => number(p.free), className: 'num' },
      { title: 'Queued', cell: (p) => number(p.queued), className: 'num' },
      { title: 'Max claim', cell: (p) => number(p.maxClaim), className: 'num' },
    ], capacity.pools || [], { id: 'pools' })),
    section('Warnings', null, warningsList(capacity.warnings || [])),
    section('Claims', null, claimsTable(granted, 'claims', 'No devices are claimed.')),
    section('Queue', null, claimsTable(queued, 'queue', 'Nothing waits for devices.')),
    section('Quotas', null, table([
      { title: 'Workload', cell: (q) => workloadLink(q.workload) },
      { title: 'Quota', cell: (q) => number(q.quota), className: 'num' },
      { title: 'Held', cell: (q) => number(q.held), className: 'num' },
      { title: 'Queued', cell: (q) => number(q.queued), className: 'num' },
    ], capacity.quotas || [], { id: 'quotas' })));
}

function claimsTable(claims, id, empty) {
  if (!claims.length) return h('p', { class: 'muted', id }, empty);
  return table([
    { title: 'Kind', cell: (c) => c.kind },
    { title: 'Owner', cell: (c) => (c.kind === 'run' ? runLink(c.owner) : h('span', { class: 'mono' }, c.owner)) },
    { title: 'Workload', cell: (c) => workloadLink(c.workload) },
    { title: 'Pool', cell: (c) => c.pool },
    { title: 'Devices', cell: (c) => `${c.devices}${c.deviceIds && c.deviceIds.length ? ` (${c.deviceIds.join(', ')})` : ''}` },
    { title: 'State', cell: (c) => c.state },
    { title: 'Since', cell: (c) => time(typeof c.since === 'number' ? new Date(c.since * 1000).toISOString() : c.since) },
  ], claims, { id });
}

function warningsList(warnings) {
  if (!warnings.length) return h('p', { class: 'muted', id: 'warnings' }, 'No claim holds devices of an ended window.');
  return table([
    { title: 'Warning', cell: (w) => w.message },
  ], warnings, { id: 'warnings' });
}
