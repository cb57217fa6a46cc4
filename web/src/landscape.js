// The "landscape" of one problem: every variant the screen timed (sorted,
// fastest first), those it could not time (by status), the serial
// candidates with their intervals, and the screened time against each
// tunable parameter, with the winner marked in each. Both pages draw it.
//
// Each mark's <g> has a class naming what it draws ("screened-variant",
// "failed-variant", "candidate-interval", "winner", ...), and the winner's
// symbols an aria-label "winner CONFIG", so that tests and screen readers
// find them in the SVG.
(function (autotune) {
  'use strict';

  const fmt = autotune.fmt;
  const el = fmt.el;
  const WINNER = '#1a9850';
  const CANDIDATE = '#f28e2b';
  const INK = '#30343b';

  // Sorts and labels one problem's measurements for the plots.
  function analyse(measurements, entry) {
    const winnerKey = entry ? fmt.config(entry.config) : null;
    const params = new Set();
    const screenedOk = [];
    const failed = [];
    const serial = [];
    const otherPhases = {};
    for (const m of measurements || []) {
      for (const name of Object.keys((m.config && m.config.params) || {})) params.add(name);
      const key = fmt.config(m.config);
      const median = fmt.num(m.timing && m.timing.median_us);
      const row = { m, key, median, params: (m.config && m.config.params) || {}, winner: key === winnerKey };
      if (m.phase === 'SCREEN') {
        if (m.status === 'OK' && median > 0) screenedOk.push(row);
        else failed.push(row);
      } else if (m.phase === 'SERIAL_VALIDATION') {
        serial.push(row);
      } else {
        const phase = m.phase || 'PHASE_UNSPECIFIED';
        otherPhases[phase] = otherPhases[phase] || {};
        otherPhases[phase][m.status] = (otherPhases[phase][m.status] || 0) + 1;
      }
    }
    const byKey = (a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
    const byTime = (a, b) => a.median - b.median || byKey(a, b);
    screenedOk.sort(byTime);
    screenedOk.forEach((row, i) => { row.rank = i + 1; });
    failed.sort((a, b) => fmt.statusRank(a.m.status) - fmt.statusRank(b.m.status) || byKey(a, b));
    const candidateKeys = new Set(serial.map((row) => row.key));
    for (const row of screenedOk) row.candidate = candidateKeys.has(row.key);
    const timedSerial = serial.filter((row) => row.m.status === 'OK' && row.median > 0).sort(byTime);
    const failedSerial = serial.filter((row) => !timedSerial.includes(row));
    for (const row of timedSerial) {
      const iv = fmt.interval(row.m.timing);
      row.low = iv ? iv.low : row.median;
      row.high = iv ? iv.high : row.median;
      row.intervalKind = iv ? iv.kind : '';
    }
    // One band per serial measurement, even when a config was validated in
    // more than one job.
    const seen = {};
    for (const row of [...timedSerial, ...failedSerial]) {
      seen[row.key] = (seen[row.key] || 0) + 1;
      row.band = seen[row.key] > 1 ? `${row.key} (${seen[row.key]})` : row.key;
    }
    return {
      winnerKey, screenedOk, failed, timedSerial, failedSerial, otherPhases,
      params: [...params].sort(),
      jobs: [...new Set((measurements || []).map((m) => m.job_id).filter(Boolean))].sort(),
    };
  }

  // A log scale when the times span more than a factor of 5, so that the
  // fast end (what matters) is not squeezed into a corner.
  function timeScale(rows, label) {
    const values = rows.map((row) => row.median);
    const low = Math.min(...values);
    const high = Math.max(...values);
    const log = low > 0 && high / low > 5;
    return { type: log ? 'log' : 'linear', label, grid: true, nice: !log };
  }

  function title(row, extra) {
    const lines = [row.key || '(no params)', `${row.m.status} · ${row.m.phase}`];
    if (row.median > 0) lines.push(`median ${fmt.micros(row.median)} µs`);
    if (row.rank) lines.push(`rank ${row.rank}`);
    if (row.m.detail) lines.push(row.m.detail);
    if (row.m.carried) lines.push('carried from an older family version');
    if (row.m.contended) lines.push(`contended: ${row.m.contention}`);
    if (extra) lines.push(extra);
    return lines.join('\n');
  }

  function figure(kind, caption, body, attrs) {
    return el('figure', Object.assign({ class: `plot plot-${kind}`, 'data-plot': kind }, attrs || {}),
      el('figcaption', null, caption), body);
  }

  const baseStyle = { fontSize: '11px', fontFamily: 'inherit', background: 'transparent', overflow: 'visible' };

  function screenedPlot(a, width) {
    const winners = a.screenedOk.filter((row) => row.winner);
    const candidates = a.screenedOk.filter((row) => row.candidate);
    const svg = Plot.plot({
      width, height: 280, marginLeft: 58, marginRight: 70, marginBottom: 38, style: baseStyle,
      x: { label: 'variant rank (fastest first)', domain: [0, a.screenedOk.length + 1], labelArrow: 'none' },
      y: timeScale(a.screenedOk, 'screened median (µs)'),
      marks: [
        Plot.dot(a.screenedOk, {
          x: 'rank', y: 'median', r: 2.6, fill: fmt.statusColor('OK'), fillOpacity: 0.7,
          title: (row) => title(row), className: 'screened-variant',
        }),
        Plot.dot(candidates, {
          x: 'rank', y: 'median', r: 5.5, stroke: CANDIDATE, strokeWidth: 1.6, fill: 'none', className: 'candidate',
        }),
        Plot.dot(winners, {
          x: 'rank', y: 'median', r: 8, symbol: 'star', fill: WINNER, stroke: 'white', strokeWidth: 1,
          title: (row) => title(row, 'the winner'), className: 'winner', ariaLabel: (d) => `winner ${(d.row || d).key}`,
        }),
        Plot.text(winners, {
          x: 'rank', y: 'median', text: () => 'winner', dx: 12, textAnchor: 'start', fill: WINNER,
          fontWeight: 600, className: 'winner-label',
        }),
      ],
    });
    const caption = `Screen: ${fmt.count(a.screenedOk.length)} timed variants by median, fastest first` +
      (candidates.length ? `; ${candidates.length} went on to serial validation (circled)` : '');
    return figure('screened', caption, svg);
  }

  // The variants the screen could not time, one square each, grouped by
  // status: how much of the space failed, and how.
  function failedPlot(a, width) {
    const rows = a.failed;
    const cell = 13;
    const cols = Math.max(1, Math.min(rows.length, Math.floor(width / cell)));
    const lines = Math.ceil(rows.length / cols);
    rows.forEach((row, i) => { row.col = i % cols; row.line = Math.floor(i / cols); });
    const statuses = [...new Set(rows.map((row) => row.m.status))];
    const svg = Plot.plot({
      width: cols * cell, height: lines * cell, margin: 0, style: baseStyle,
      x: { type: 'band', domain: d3.range(cols), axis: null, padding: 0 },
      y: { type: 'band', domain: d3.range(lines), axis: null, padding: 0 },
      color: { domain: statuses, range: statuses.map(fmt.statusColor) },
      marks: [Plot.cell(rows, {
        x: 'col', y: 'line', fill: (row) => row.m.status, inset: 1.5, rx: 2,
        title: (row) => title(row), className: 'failed-variant',
      })],
    });
    const counts = statuses.map((status) => [status, rows.filter((row) => row.m.status === status).length]);
    const legend = el('div', { class: 'legend' }, counts.map(([status, n]) =>
      el('span', { class: 'legend-item' }, el('i', { class: 'swatch', style: `background:${fmt.statusColor(status)}` }),
        `${status} ${fmt.count(n)}`)));
    return figure('failed', `Screen: ${fmt.count(rows.length)} variants not timed`, [legend, svg]);
  }

  // The x scale of the serial plot, in % against the reference median. A
  // tie lives within a fraction of a percent while the family's default
  // may be tens of percent slower: past ±5 % the scale is symlog (linear
  // within ±0.5 %, logarithmic beyond), so both stay readable.
  function relativeScale(rows) {
    const low = Math.min(0, ...rows.map((row) => row.relLow));
    const high = Math.max(0, ...rows.map((row) => row.relHigh));
    const format = (v) => `${v > 0 ? '+' : ''}${Number(v.toFixed(2))}%`;
    const label = 'against the winner (%): median and interval';
    if (Math.max(-low, high) <= 5) {
      const pad = (high - low) * 0.08 || 0.1;
      return { domain: [low - pad, high + pad], label, grid: true, labelArrow: 'none', tickFormat: format };
    }
    const ticks = [-100, -50, -20, -10, -5, -2, -1, -0.5, 0, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
      .filter((v) => v >= low * 1.1 && v <= high * 1.1);
    return {
      type: 'symlog', constant: 0.5, domain: [Math.min(low * 1.1, -0.3), high * 1.1], ticks, tickFormat: format,
      label: `${label} (logarithmic beyond ±0.5%)`, grid: true, labelArrow: 'none',
    };
  }

  function serialPlot(a, width, entry) {
    const timed = a.timedSerial;
    const all = [...timed, ...a.failedSerial];
    const winner = timed.find((row) => row.winner);
    const reference = winner || timed[0];
    const relative = (v) => (v / reference.median - 1) * 100;
    for (const row of timed) {
      row.rel = relative(row.median);
      row.relLow = relative(row.low);
      row.relHigh = relative(row.high);
      row.versus = row.winner ? (entry && entry.tie ? `winner (tie of ${fmt.num(entry.tied)})` : 'winner')
        : `${fmt.signedPercent(row.rel / 100, 2) || '±0%'}`;
    }
    const longest = Math.max(...all.map((row) => row.band.length));
    const marginLeft = Math.min(360, Math.max(90, longest * 7 + 20));
    const interval = (row) => `[${fmt.micros(row.low)}, ${fmt.micros(row.high)}] µs (${row.intervalKind}), ` +
      `${fmt.num(row.m.rounds)} rounds, noise ${fmt.percent(fmt.num(row.m.noise), 2)}`;
    const marks = [
      Plot.ruleX([0], { stroke: winner ? WINNER : INK, strokeDasharray: '3,3', strokeOpacity: 0.7 }),
      Plot.ruleY(timed, {
        y: 'band', x1: 'relLow', x2: 'relHigh', stroke: (row) => (row.winner ? WINNER : CANDIDATE),
        strokeWidth: 9, strokeOpacity: 0.4, title: (row) => title(row, interval(row)), className: 'candidate-interval',
      }),
      Plot.tickX(timed, {
        x: 'rel', y: 'band', stroke: (row) => (row.winner ? WINNER : INK), strokeWidth: 2,
        title: (row) => title(row, interval(row)), className: 'candidate-median',
      }),
      Plot.text(timed, {
        x: 'relHigh', y: 'band', text: 'versus', dx: 14, textAnchor: 'start',
        fill: (row) => (row.winner ? WINNER : INK), fontWeight: (row) => (row.winner ? 600 : 400), className: 'versus-winner',
      }),
    ];
    if (winner) {
      marks.push(Plot.dot([winner], {
        x: 'rel', y: 'band', symbol: 'star', r: 8, fill: WINNER, stroke: 'white', strokeWidth: 1,
        title: (row) => title(row, `the winner\n${interval(row)}`), className: 'winner', ariaLabel: (d) => `winner ${d.key}`,
      }));
    }
    if (a.failedSerial.length) {
      marks.push(Plot.text(a.failedSerial, {
        y: 'band', frameAnchor: 'left', dx: 4, textAnchor: 'start', fill: fmt.statusColor('WRONG_RESULT'),
        text: (row) => `${row.m.status}${row.m.detail ? `: ${row.m.detail}` : ''}`.slice(0, 90),
        title: (row) => title(row), className: 'failed-candidate',
      }));
    }
    const svg = Plot.plot({
      width, height: all.length * 26 + 48, marginLeft, marginRight: 130, marginBottom: 38, style: baseStyle,
      x: timed.length ? relativeScale(timed) : { axis: null, domain: [0, 1] },
      y: { domain: all.map((row) => row.band), label: null, tickSize: 0 },
      marks,
    });
    const kinds = [...new Set(timed.map((row) => row.intervalKind))].join(' or ');
    const base = reference ? `; ${winner ? 'the winner' : 'the fastest'} at ${fmt.micros(reference.median)} µs` : '';
    return figure('serial', `Serial validation: ${all.length} candidates, median and [${kinds || 'q1, q3'}] interval${base}`, svg);
  }

  function paramPlot(a, name, width, yScale) {
    const values = [...new Set(a.screenedOk.map((row) => fmt.num(row.params[name])))].sort((x, y) => x - y);
    const index = new Map(values.map((v, i) => [v, i]));
    // A fixed jitter per config (a hash of its text), so the dots of one
    // value spread out the same way on every render.
    const jitter = (key) => {
      let h = 2166136261;
      for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 16777619);
      return ((h >>> 0) / 4294967296 - 0.5) * 0.36;
    };
    const points = a.screenedOk.map((row) => ({ row, x: index.get(fmt.num(row.params[name])) + jitter(row.key), y: row.median }));
    const best = values.map((v, i) => {
      const times = a.screenedOk.filter((row) => fmt.num(row.params[name]) === v).map((row) => row.median);
      return { x: i, y: Math.min(...times), value: v };
    });
    const winners = points.filter((p) => p.row.winner);
    const svg = Plot.plot({
      width, height: 210, marginLeft: 56, marginRight: 12, marginBottom: 36, style: baseStyle,
      x: { domain: [-0.5, values.length - 0.5], ticks: d3.range(values.length), tickFormat: (i) => String(values[i]), label: name, labelArrow: 'none' },
      y: yScale,
      marks: [
        Plot.dot(points, {
          x: 'x', y: 'y', r: 2.2, fill: fmt.statusColor('OK'), fillOpacity: 0.45, title: (p) => title(p.row),
          className: 'screened-variant',
        }),
        Plot.line(best, { x: 'x', y: 'y', stroke: INK, strokeWidth: 1.2, className: 'best-per-value' }),
        Plot.dot(best, { x: 'x', y: 'y', r: 2.4, fill: INK, title: (p) => `${name}=${p.value}: best ${fmt.micros(p.y)} µs` }),
        Plot.dot(winners, {
          x: 'x', y: 'y', r: 7, symbol: 'star', fill: WINNER, stroke: 'white', strokeWidth: 1,
          title: (p) => title(p.row, 'the winner'), className: 'winner', ariaLabel: (d) => `winner ${(d.row || d).key}`,
        }),
      ],
    });
    return figure('param', name, svg, { 'data-param': name });
  }

  function note(text, kind) {
    return el('p', { class: `note note-${kind || 'info'}` }, text);
  }

  function legend() {
    const item = (mark, text) => el('span', { class: 'legend-item' }, mark, text);
    return el('div', { class: 'legend legend-key' },
      item(el('i', { class: 'key-star' }, '★'), 'winner'),
      item(el('i', { class: 'key-ring' }), 'serial candidate'),
      item(el('i', { class: 'key-dot' }), 'screened variant (OK)'),
      item(el('i', { class: 'key-line' }), 'best per parameter value'));
  }

  // Draws one problem's landscape into `container`, which must be in the
  // document (its width sizes the plots). options: measurements, entry
  // (the chosen one, or none), jobId (this report's job: measurements from
  // other jobs are named), error (why there are no measurements).
  function render(container, options) {
    const measurements = options.measurements || [];
    const root = el('div', { class: 'landscape' });
    container.append(root);
    if (!measurements.length) {
      root.append(note(options.error ? `No measurements: ${options.error}` : 'No measurements recorded for this problem.',
        options.error ? 'error' : 'info'));
      return root;
    }
    const a = analyse(measurements, options.entry);
    const width = Math.max(320, Math.floor(root.clientWidth || container.clientWidth || 960));
    const foreign = options.jobId ? a.jobs.filter((id) => id !== options.jobId) : [];
    if (foreign.length) {
      const jobs = `${foreign.length > 1 ? 'earlier jobs' : 'an earlier job'} (${foreign.join(', ')})`;
      const older = measurements.filter((m) => m.job_id && m.job_id !== options.jobId).length;
      root.append(note(older === measurements.length
        ? `Measured in ${jobs}, not in this one: the problem was already tuned.`
        : `${fmt.count(older)} of these ${fmt.count(measurements.length)} measurements come from ${jobs}.`, 'cached'));
    }
    if (options.error) root.append(note(options.error, 'error'));
    if (a.screenedOk.length || a.timedSerial.length) root.append(legend());
    if (a.screenedOk.length) root.append(screenedPlot(a, width));
    if (a.timedSerial.length || a.failedSerial.length) root.append(serialPlot(a, width, options.entry));
    if (a.failed.length) root.append(failedPlot(a, width));
    const others = Object.entries(a.otherPhases).map(([phase, statuses]) =>
      `${phase}: ${Object.entries(statuses).map(([status, n]) => `${status} ${fmt.count(n)}`).join(', ')}`);
    if (others.length) root.append(note(`Other measurements: ${others.join('; ')}`));
    if (a.screenedOk.length && a.params.length) {
      const gap = 24;
      const perRow = Math.max(1, Math.min(a.params.length, Math.floor((width + gap) / (260 + gap))));
      const each = Math.floor((width - gap * (perRow - 1)) / perRow);
      const yScale = timeScale(a.screenedOk, 'screened median (µs)');
      const grid = el('div', { class: 'param-grid', style: `grid-template-columns: repeat(${perRow}, ${each}px)` });
      for (const name of a.params) grid.append(paramPlot(a, name, each, yScale));
      root.append(el('h4', { class: 'plot-group' }, 'Screened median against each tunable parameter'), grid);
    }
    root.dataset.winner = a.winnerKey || '';
    return root;
  }

  autotune.landscape = { analyse, render };
})(window.autotune = window.autotune || {});
