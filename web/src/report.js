// The warmup report: reads the job and its problems' measurements from the
// JSON the writer put into #autotune-report-data and draws the page. It
// reads nothing else.
(function (autotune) {
  'use strict';

  const fmt = autotune.fmt;
  const el = fmt.el;
  const TIME_PARTS = [
    ['compile_s', 'compile', '#4c78a8'], ['screen_s', 'screen', '#72b7b2'],
    ['serial_s', 'serial', '#f58518'], ['waited_s', 'waiting for a quiet GPU', '#bab0ac'],
  ];

  function readData() {
    const node = document.getElementById('autotune-report-data');
    const text = node ? node.textContent.trim() : '';
    if (!text || text.startsWith('@@')) throw new Error('This report has no data: the page is the template, not a written report.');
    return JSON.parse(text);
  }

  function stateBadge(state) {
    const kind = { SUCCEEDED: 'good', FAILED: 'bad', CANCELLED: 'warn' }[state] || 'info';
    return fmt.badge(state || 'UNKNOWN', kind);
  }

  // The flags of the text report, as badges.
  function flags(report, job, withError = true) {
    const entry = report.entry;
    const out = [];
    if (entry && entry.tie) out.push(fmt.badge(`tie(${fmt.num(entry.tied)})`, 'info'));
    if (entry && entry.choice) {
      const bound = Number(entry.bound || 0);
      out.push(fmt.badge(bound < 0 ? 'bound(?)' : `bound(${(bound * 100).toFixed(2)}%)`, 'info'));
    }
    if (entry && entry.contended) out.push(fmt.badge('CONTENDED', 'warn'));
    if (entry && entry.throttled) out.push(fmt.badge('THROTTLED', 'warn'));
    if (report.cached) out.push(fmt.badge('cached', 'plain'));
    if (report.regression) out.push(fmt.badge('REGRESSION', 'bad'));
    if (report.screen_contention) out.push(fmt.badge('screen-contended', 'warn'));
    if (!entry) {
      if (report.error && withError) out.push(el('span', { class: 'flag-error', title: report.error }, `error: ${fmt.firstLine(report.error, 80)}`));
      else if (!(job.spec && job.spec.options && job.spec.options.compile_only)) out.push(fmt.badge('no entry', 'bad'));
    }
    return out;
  }

  function header(data) {
    const job = data.job || {};
    const meta = [
      ['job', el('code', null, job.id || '?')],
      ['submitted by', job.submitted_by],
      ['created', fmt.timestamp(job.created_at)],
      ['finished', fmt.timestamp(job.updated_at)],
      ['report written', fmt.timestamp(data.generated_at)],
    ].filter(([, value]) => value);
    const options = (job.spec && job.spec.options) || {};
    const optionText = ['compile_only', 'retune', 'force'].filter((name) => options[name]).map((name) => `--${name.replace('_', '-')}`);
    if (fmt.num(options.shard_count) > 0) optionText.push(`--shard ${fmt.num(options.shard_index)}/${fmt.num(options.shard_count)}`);
    return el('header', { class: 'page-header' },
      el('div', { class: 'title-row' }, el('h1', null, 'Warmup report'), stateBadge(job.state)),
      el('p', { class: 'meta' }, meta.map(([label, value], i) => [i ? ' · ' : '', `${label} `, value]),
        optionText.length ? [' · options ', el('code', { class: 'nowrap' }, optionText.join(' '))] : null),
      job.error ? el('div', { class: 'alert alert-error' }, el('strong', null, 'Error: '), job.error) : null);
  }

  function summary(job) {
    const counts = job.counts || {};
    const reports = job.reports || [];
    const byStatus = {};
    let screened = 0;
    let carried = 0;
    for (const report of reports) {
      for (const [status, n] of Object.entries(report.status_counts || {})) byStatus[status] = (byStatus[status] || 0) + fmt.num(n);
      screened += fmt.num(report.screened);
      carried += fmt.num(report.screens_carried);
    }
    const statuses = Object.keys(byStatus).sort((a, b) => fmt.statusRank(a) - fmt.statusRank(b) || (a < b ? -1 : 1));
    const chips = statuses.map((status) => el('span', { class: 'legend-item' },
      el('i', { class: 'swatch', style: `background:${fmt.statusColor(status)}` }), `${status} ${fmt.count(byStatus[status])}`));
    const tiles = [
      ['problems', fmt.count(counts.problems), fmt.num(counts.cached_problems) ? `${fmt.count(counts.cached_problems)} already tuned` : ''],
      ['variants', fmt.count(counts.variants), fmt.num(counts.compiles) ? `${fmt.count(counts.compiles)} distinct compiles` : ''],
      ['compiled', fmt.count(counts.compiled), `${fmt.count(counts.compile_cache_hits)} cache hits, ${fmt.count(counts.compile_errors)} errors`],
      ['measured', fmt.count(counts.measured), `${fmt.count(counts.ok)} OK` + (fmt.num(counts.carried) ? `, ${fmt.count(counts.carried)} carried` : '')],
      ['time', job.timing ? fmt.seconds(job.timing.elapsed_s) : '–', job.timing && job.timing.phase ? `phase: ${job.timing.phase}` : ''],
    ];
    return el('section', { class: 'summary' },
      el('div', { class: 'tiles' }, tiles.map(([label, value, sub]) =>
        el('div', { class: 'tile' }, el('div', { class: 'tile-label' }, label), el('div', { class: 'tile-value' }, value),
          el('div', { class: 'tile-sub' }, sub)))),
      el('p', { class: 'counts-text' }, fmt.jobCounts(counts)),
      chips.length ? el('div', { class: 'legend status-line' }, el('span', { class: 'legend-title' }, 'variants by status'), chips,
        screened ? el('span', { class: 'muted' }, `(${fmt.count(screened)} screened` +
          (carried ? `; ${fmt.count(carried)} screens carried from an older family version` : '') + ')') : null) : null,
      timeBar(job.timing));
  }

  // Where the time went, as one stacked bar.
  function timeBar(timing) {
    if (!timing) return null;
    const parts = TIME_PARTS.map(([field, label, color]) => ({ label, color, value: fmt.num(timing[field]) }));
    const total = parts.reduce((sum, p) => sum + p.value, 0);
    if (!(total > 0)) return null;
    return el('div', { class: 'time-bar-block' },
      el('div', { class: 'time-bar', role: 'img', 'aria-label': 'where the time went' }, parts.filter((p) => p.value > 0).map((p) =>
        el('div', { class: 'time-part', style: `flex-grow:${p.value};background:${p.color}`, title: `${p.label} ${fmt.seconds(p.value)}` }))),
      el('div', { class: 'legend' }, parts.map((p) => el('span', { class: 'legend-item' },
        el('i', { class: 'swatch', style: `background:${p.color}` }), `${p.label} ${fmt.seconds(p.value)}`)),
      el('span', { class: 'legend-item muted' }, `total ${fmt.seconds(timing.elapsed_s)}`)));
  }

  const COLUMNS = [
    ['family'], ['dims'], ['dtype'], ['config'], ['median µs', 'num'], ['GB/s', 'num'], ['% limit', 'num'],
    ['TFLOP/s', 'num'], ['speedup', 'num'], ['flags'],
  ];

  function table(job) {
    const rows = (job.reports || []).map((report, i) => {
      const entry = report.entry;
      const t = (entry && entry.timing) || {};
      const limit = entry ? fmt.limitFraction(entry) : 0;
      const cells = [
        el('a', { href: `#problem-${i}` }, report.family),
        fmt.dims(report.problem), fmt.dtype(report.problem && report.problem.dtype),
        entry ? el('code', null, fmt.breakable(fmt.config(entry.config))) : '',
        entry ? fmt.micros(t.median_us) : '', entry ? fmt.fixed(t.achieved_gbps, 1) : '',
        limit > 0 ? `${(limit * 100).toFixed(0)}%` : '', entry ? fmt.fixed(t.achieved_tflops, 2) : '',
        fmt.fixed(report.speedup, 2, '×'), el('span', { class: 'flags' }, flags(report, job)),
      ];
      const compileOnly = Boolean(job.spec && job.spec.options && job.spec.options.compile_only);
      const failed = !entry && (report.error || !compileOnly);
      return el('tr', { class: report.regression ? 'row-regression' : failed ? 'row-error' : null },
        cells.map((cell, c) => el('td', { class: COLUMNS[c][1] || null }, cell)));
    });
    return el('section', { class: 'card' }, el('h2', null, 'Problems'),
      el('div', { class: 'table-wrap' }, el('table', { id: 'report-table', class: 'data' },
        el('thead', null, el('tr', null, COLUMNS.map(([name, kind]) => el('th', { class: kind || null }, name)))),
        el('tbody', null, rows))),
      rows.length ? null : results(job));
  }

  // A daemon that sends no reports still names the chosen entries.
  function results(job) {
    const entries = job.results || [];
    if (!entries.length) return el('p', { class: 'empty' }, 'No per-problem reports.');
    const head = el('tr', null, ['family', 'dims', 'dtype', 'config', 'median µs'].map((h, i) =>
      el('th', { class: i === 4 ? 'num' : null }, h)));
    const rows = entries.map((entry) => el('tr', null,
      el('td', null, entry.family),
      el('td', null, fmt.dims(entry.problem)),
      el('td', null, fmt.dtype(entry.problem && entry.problem.dtype)),
      el('td', null, el('code', null, fmt.config(entry.config))),
      el('td', { class: 'num' }, fmt.micros(entry.timing && entry.timing.median_us))));
    return [el('p', { class: 'muted' }, 'No per-problem reports; the entries the job chose:'),
      el('table', { id: 'results-table', class: 'data compact' }, el('thead', null, head), el('tbody', null, rows))];
  }

  // Problems that had an entry before: new median over old, one bar each
  // from 1 (the same) to the ratio (> 1 is slower now).
  function changes(job) {
    const rows = (job.reports || []).map((report, index) => ({ report, index })).filter(({ report }) =>
      report.previous && report.entry && fmt.num(report.previous.timing && report.previous.timing.median_us) > 0 &&
      fmt.num(report.entry.timing && report.entry.timing.median_us) > 0);
    if (!rows.length) return null;
    const data = rows.map(({ report, index }) => ({
      index, label: fmt.problemLabel(report.family, report.problem),
      ratio: report.entry.timing.median_us / report.previous.timing.median_us, regression: Boolean(report.regression),
      differs: report.previous_differs, report,
    }));
    const spread = Math.max(0.05, ...data.map((d) => Math.abs(d.ratio - 1)));
    const longest = Math.max(...data.map((d) => d.label.length));
    const color = (d) => (d.regression ? '#d62728' : d.ratio <= 1 ? '#1a9850' : '#8c8c8c');
    const container = el('section', { class: 'card', id: 'changes' }, el('h2', null, 'Changes against the cache'),
      el('p', { class: 'muted' }, 'New median over the one the cache held before: left of 1 is faster now, right of 1 slower; red marks a regression beyond the noise.'));
    const figureNode = el('figure', { class: 'plot plot-regression', 'data-plot': 'regression' });
    container.append(figureNode);
    document.getElementById('app').append(container);
    const width = Math.max(480, figureNode.clientWidth || 900);
    const svg = Plot.plot({
      width, height: data.length * 30 + 50, marginLeft: Math.min(420, longest * 6.6 + 16), marginRight: 90,
      style: { fontSize: '11px', fontFamily: 'inherit', background: 'transparent', overflow: 'visible' },
      x: { domain: [1 - spread * 1.15, 1 + spread * 1.15], label: 'new median / old median', grid: true, labelArrow: 'none',
        tickFormat: (v) => `${v.toFixed(2)}×` },
      y: { domain: data.map((d) => d.label), label: null, tickSize: 0 },
      marks: [
        Plot.ruleX([1], { stroke: '#30343b', strokeWidth: 1.2 }),
        Plot.ruleY(data, { y: 'label', x1: () => 1, x2: 'ratio', stroke: color, strokeWidth: 8, strokeOpacity: 0.45, className: 'change' }),
        Plot.dot(data, {
          x: 'ratio', y: 'label', r: 5, fill: color,
          title: (d) => `${d.label}\n${fmt.micros(d.report.previous.timing.median_us)} → ${fmt.micros(d.report.entry.timing.median_us)} µs` +
            (d.differs ? `\n${d.differs}` : ''),
          className: 'ratio',
        }),
        Plot.dot(data.filter((d) => d.regression), { x: 'ratio', y: 'label', r: 9, stroke: '#d62728', strokeWidth: 2, fill: 'none', className: 'regression' }),
        // Each label on the far side of its dot from 1, clear of the bar.
        ...[[(d) => d.ratio >= 1, 'start', 12], [(d) => d.ratio < 1, 'end', -12]].map(([side, anchor, dx]) =>
          Plot.text(data.filter(side), {
            x: 'ratio', y: 'label', dx, textAnchor: anchor, fill: color, className: 'ratio-label',
            text: (d) => `${fmt.signedPercent(d.ratio - 1, 1) || '±0%'}${d.regression ? ' REGRESSION' : ''}`,
          })),
      ],
    });
    figureNode.append(svg);
    container.append(el('div', { class: 'table-wrap' }, el('table', { class: 'data compact' },
      el('thead', null, el('tr', null, ['problem', 'old µs', 'new µs', 'old/new', 'what differs', ''].map((h, i) =>
        el('th', { class: i > 0 && i < 4 ? 'num' : null }, h)))),
      el('tbody', null, data.map((d) => el('tr', { class: d.regression ? 'row-regression' : null },
        el('td', null, el('a', { href: `#problem-${d.index}` }, d.label)),
        el('td', { class: 'num' }, fmt.micros(d.report.previous.timing.median_us)),
        el('td', { class: 'num' }, fmt.micros(d.report.entry.timing.median_us)),
        el('td', { class: 'num' }, fmt.fixed(d.report.previous_ratio, 3, '×')),
        el('td', null, d.differs || ''),
        el('td', null, d.regression ? fmt.badge('REGRESSION', 'bad') : null)))))));
    return container;
  }

  // One problem: its facts, then its landscape.
  function problem(job, report, landscape, index) {
    const entry = report.entry;
    const section = el('section', { class: 'card problem', id: `problem-${index}`, 'data-index': index },
      el('h3', null, el('span', { class: 'family' }, report.family), ' ', el('span', { class: 'dims' }, fmt.dims(report.problem)),
        ' ', el('span', { class: 'dtype' }, fmt.dtype(report.problem && report.problem.dtype)), ' ', flags(report, job, false)));
    document.getElementById('app').append(section);
    if (report.error) section.append(el('div', { class: 'alert alert-error problem-error' }, report.error));
    const facts = entry ? fmt.entryFacts(entry).filter(([label]) => label !== 'family hash' && label !== 'device') : [];
    if (report.default_config && Object.keys(report.default_config.params || {}).length) {
      const defaultMedian = fmt.num(report.default_median_us);
      facts.push(['default config', fmt.config(report.default_config) + (defaultMedian ? `: ${fmt.micros(defaultMedian)} µs` : '') +
        (fmt.num(report.speedup) ? `, the winner is ${fmt.num(report.speedup).toFixed(2)}× faster` : '')]);
    }
    if (fmt.num(report.screened)) {
      let text = `${fmt.count(report.screened)} variants validated and timed`;
      if (fmt.num(report.screens_carried)) text += `, ${fmt.count(report.screens_carried)} of them carried from family version ${String(report.screens_carried_from).slice(0, 12)}`;
      facts.push(['screen', text]);
    }
    if (report.screen_contention) facts.push(['screen contention', report.screen_contention]);
    if (report.previous) {
      const old = report.previous.timing || {};
      facts.push(['before', `${fmt.config(report.previous.config)}: ${fmt.micros(old.median_us)} µs` +
        (report.previous_differs ? ` (${report.previous_differs})` : '') +
        (fmt.num(report.previous_ratio) ? `, old/new ${fmt.num(report.previous_ratio).toFixed(3)}×` : '') +
        (report.regression ? ' REGRESSION' : '')]);
    }
    if (report.cached) facts.push(['cached', 'already tuned: this job kept the entry the cache held']);
    if (facts.length) section.append(fmt.factList(facts));
    if (entry || (landscape && (landscape.measurements || []).length)) {
      autotune.landscape.render(section, {
        measurements: landscape ? landscape.measurements : [], entry, jobId: job.id,
        error: landscape && landscape.error,
      });
    } else if (job.spec && job.spec.options && job.spec.options.compile_only) {
      section.append(el('p', { class: 'note' }, 'Compile only: the variants were compiled and cached, not measured.'));
    } else if (landscape && landscape.error && landscape.error !== report.error) {
      section.append(el('p', { class: 'note note-error' }, `No measurements: ${landscape.error}`));
    }
    return section;
  }

  function main() {
    const app = document.getElementById('app');
    let data;
    try {
      data = readData();
    } catch (error) {
      app.append(el('div', { class: 'alert alert-error' }, `Cannot read the report's data: ${error.message}`));
      return;
    }
    const job = data.job || {};
    document.title = `Warmup report ${job.id || ''}`.trim();
    app.append(header(data), summary(job), table(job));
    changes(job);
    const reports = job.reports || [];
    const landscapes = data.landscapes || [];
    if (reports.length) app.append(el('h2', { class: 'section-title' }, 'Each problem'));
    reports.forEach((report, i) => problem(job, report, landscapes[i], i));
    app.append(el('footer', { class: 'page-footer' }, `autotune warmup report · job ${job.id || '?'} · ${fmt.timestamp(data.generated_at)}`));
    document.body.dataset.ready = 'true';
  }

  autotune.report = { main };
  document.addEventListener('DOMContentLoaded', main);
})(window.autotune = window.autotune || {});
