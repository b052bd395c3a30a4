// A line chart of a run's step metrics that grows as points arrive, drawn by uPlot (the pinned
// npm package, served as /ui/uPlot.iife.min.js). Its element carries data-points: how many steps
// it holds, so a test (or a person) can see it grow.
import { h } from './util.js';

const HEIGHT = 220;
const MIN_WIDTH = 320;
// Steps are whole: the step axis ticks at these spacings only.
const STEP_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

export class StepChart {
  // `series`: [{key, label, color, sparse?}] read from each step (sparse: drawn as points, e.g. the
  // validation loss, which only some steps carry).
  constructor(id, title, series) {
    this.series = series;
    this.rows = new Map(); // step -> the step's metrics
    this.element = h('figure', { class: 'chart', id, 'data-points': 0 }, h('figcaption', null, title));
    this.plot = null;
  }

  // Draws it once it is in the document (uPlot measures its container).
  attach() {
    const width = Math.max(MIN_WIDTH, this.element.clientWidth - 16);
    const options = {
      width,
      height: HEIGHT,
      scales: { x: { time: false } },
      legend: { live: true },
      axes: [{ label: 'step', incrs: STEP_TICKS }, {}],
      series: [
        { label: 'step' },
        ...this.series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 1.5,
          spanGaps: true,
          points: { show: Boolean(s.sparse), size: 5, fill: s.color },
        })),
      ],
    };
    this.plot = new uPlot(options, this.data(), this.element);
    window.addEventListener('resize', () => this.resize());
  }

  resize() {
    if (this.plot) this.plot.setSize({ width: Math.max(MIN_WIDTH, this.element.clientWidth - 16), height: HEIGHT });
  }

  // Adds `steps` (a step sent again replaces its earlier values); `reset` drops what it held.
  update(steps, reset) {
    if (reset) this.rows.clear();
    for (const s of steps) this.rows.set(s.step, { ...(this.rows.get(s.step) || {}), ...s });
    const data = this.data();
    if (this.plot) this.plot.setData(data);
    this.element.setAttribute('data-points', String(data[1].filter((v) => v !== null).length));
  }

  // uPlot's columns: the steps ascending, then one column per series (null where a step lacks it).
  data() {
    const steps = [...this.rows.keys()].sort((a, b) => a - b);
    const columns = this.series.map((s) => steps.map((step) => {
      const value = pick(this.rows.get(step), s.key);
      return typeof value === 'number' && Number.isFinite(value) ? value : null;
    }));
    return [steps, ...columns];
  }
}

// `row[key]`, where a key may name a nested figure with dots ("rewardTerms.label").
function pick(row, key) {
  return key.split('.').reduce((value, part) => (value && typeof value === 'object' ? value[part] : undefined), row);
}
