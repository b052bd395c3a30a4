// The dashboard's router: every view has its own address (docs/dashboard.md), and trainerd answers
// this page for each, so the address is read here and its view drawn. Views are read-only.
import { renderCapacity } from './capacity.js';
import { renderRun } from './run.js';
import { renderRuns } from './runs.js';
import { failure, h, LoginNeeded, loginForm, show } from './util.js';
import { renderWorkload, renderWorkloads } from './workloads.js';

// [path pattern, the nav entry it belongs to, view(element, ...decoded captures)]
const ROUTES = [
  [/^\/(?:runs\/?)?$/, 'runs', renderRuns],
  [/^\/runs\/([^/]+)\/?$/, 'runs', renderRun],
  [/^\/workloads\/?$/, 'workloads', renderWorkloads],
  [/^\/workloads\/([^/]+)\/?$/, 'workloads', renderWorkload],
  [/^\/capacity\/?$/, 'capacity', renderCapacity],
];

async function route() {
  const view = document.getElementById('view');
  for (const [pattern, nav, render] of ROUTES) {
    const match = pattern.exec(location.pathname);
    if (!match) continue;
    for (const link of document.querySelectorAll('nav a')) {
      link.classList.toggle('current', link.dataset.nav === nav);
    }
    try {
      await render(view, ...match.slice(1).map(decodeURIComponent));
    } catch (error) {
      show(view, error instanceof LoginNeeded ? loginForm(error.message) : failure(error));
    }
    return;
  }
  show(view, h('p', { class: 'error' }, `No view at ${location.pathname}.`));
}

route();
