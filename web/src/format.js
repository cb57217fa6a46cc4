// Shared helpers of both pages: reading protobuf JSON, formatting numbers
// and names the way the command line prints them, and building DOM nodes.
// Every script of a page shares the one namespace object `autotune`.
(function (autotune) {
  'use strict';

  // Protobuf JSON prints int64 as strings and leaves unset messages out;
  // a value missing or not a number reads as 0, which the messages use for
  // "unknown".
  function num(value) {
    const n = typeof value === 'number' ? value : Number(value);
    return Number.isFinite(n) ? n : 0;
  }

  const DTYPES = {
    FLOAT32: 'fp32', FLOAT16: 'fp16', BFLOAT16: 'bf16', FLOAT64: 'fp64', INT8: 'int8',
    INT32: 'int32', INT64: 'int64', UINT8: 'uint8', FLOAT8_E4M3: 'fp8e4m3', FLOAT8_E5M2: 'fp8e5m2',
  };

  function dtype(name) {
    if (!name || name === 'DTYPE_UNSPECIFIED') return 'unspecified';
    return DTYPES[name] || String(name).toLowerCase();
  }

  // "batch=8,n=4096": the keys sorted, as proto/problem.h writes dims (and,
  // joined the same way, a config's params).
  function pairs(map) {
    const keys = Object.keys(map || {}).sort();
    return keys.map((key) => `${key}=${map[key]}`).join(',');
  }

  const dims = (problem) => pairs(problem && problem.dims);
  const config = (cfg) => pairs(cfg && cfg.params);

  // "rmsnorm hidden=4096,rows=64 bf16": how the daemon names a problem.
  function problemLabel(family, problem) {
    return `${family} ${dims(problem)} ${dtype(problem && problem.dtype)}`;
  }

  function sameParams(a, b) {
    return pairs(a) === pairs(b);
  }

  const grouping = new Intl.NumberFormat('en-US');

  function count(value) {
    return grouping.format(num(value));
  }

  // Microseconds for people: about four significant digits, blank for 0
  // (unknown).
  function micros(value) {
    const v = num(value);
    if (!(v > 0)) return '';
    if (v < 10) return v.toFixed(3);
    if (v < 100) return v.toFixed(2);
    if (v < 1000) return v.toFixed(1);
    return grouping.format(Math.round(v));
  }

  function fixed(value, digits, suffix = '') {
    const v = num(value);
    return v > 0 ? v.toFixed(digits) + suffix : '';
  }

  function percent(fraction, digits = 1) {
    return `${(fraction * 100).toFixed(digits)}%`;
  }

  // "+3.2%": a margin or a change; "" for 0.
  function signedPercent(fraction, digits = 1) {
    if (!fraction) return '';
    return `${fraction > 0 ? '+' : ''}${(fraction * 100).toFixed(digits)}%`;
  }

  // As FormatSeconds in the command line: "4.2 s", "41 s", "2 min 05 s".
  function seconds(value) {
    let s = num(value);
    if (!(s > 0)) s = 0;
    if (s < 9.95) return `${s.toFixed(1)} s`;
    const whole = Math.round(s);
    if (whole < 60) return `${whole} s`;
    const pad = (n) => String(n).padStart(2, '0');
    if (whole < 3600) return `${Math.floor(whole / 60)} min ${pad(whole % 60)} s`;
    return `${Math.floor(whole / 3600)} h ${pad(Math.floor((whole % 3600) / 60))} min`;
  }

  // RFC 3339 as "2026-12-02 05:00:00 UTC"; the text as given when it is
  // not one (the page never guesses a local time zone: reports are shared).
  function timestamp(text) {
    if (!text) return '';
    const date = new Date(text);
    if (Number.isNaN(date.getTime())) return String(text);
    return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
  }

  // "2026-12-02 05:00" (UTC), for table cells; the full time is its title.
  function shortTime(text) {
    const full = timestamp(text);
    return /^\d{4}-\d\d-\d\d \d\d:\d\d/.test(full) ? full.slice(0, 16) : full;
  }

  // The interval the tie rule compares: [q1, q3], or [min, q3] for older
  // measurements without q1. Null without a time.
  function interval(timing) {
    if (!timing || !(num(timing.median_us) > 0)) return null;
    const q1 = num(timing.q1_us);
    const low = q1 > 0 ? q1 : num(timing.min_us);
    const high = num(timing.q3_us);
    if (!(low > 0) || !(high > 0)) return null;
    return { low, high, kind: q1 > 0 ? 'q1, q3' : 'min, q3' };
  }

  function intervalText(timing) {
    const iv = interval(timing);
    return iv ? `[${micros(iv.low)}, ${micros(iv.high)}] µs (${iv.kind})` : '';
  }

  // The % of the device's measured copy rate; 0 when either is unknown.
  function limitFraction(entry) {
    const copy = num(entry && entry.limits && entry.limits.copy_gbps);
    const achieved = num(entry && entry.timing && entry.timing.achieved_gbps);
    return copy > 0 && achieved > 0 ? achieved / copy : 0;
  }

  // Variant statuses in the enum's order, each with its colour in plots.
  const STATUSES = ['OK', 'COMPILE_ERROR', 'COMPILE_TIMEOUT', 'WRONG_RESULT', 'TIMEOUT', 'FAULT', 'UNSUPPORTED'];
  const STATUS_COLORS = {
    OK: '#4c78a8', COMPILE_ERROR: '#8c564b', COMPILE_TIMEOUT: '#c49c94', WRONG_RESULT: '#d62728',
    TIMEOUT: '#ff7f0e', FAULT: '#9467bd', UNSUPPORTED: '#8c8c8c',
  };

  function statusRank(status) {
    const i = STATUSES.indexOf(status);
    return i < 0 ? STATUSES.length : i;
  }

  function statusColor(status) {
    return STATUS_COLORS[status] || '#bcbd22';
  }

  // "4 problems (1 cached), 900 variants (...)": as FormatJobCounts.
  function jobCounts(c) {
    c = c || {};
    let text = `${count(c.problems)} problems`;
    if (num(c.cached_problems) > 0) text += ` (${count(c.cached_problems)} cached)`;
    text += `, ${count(c.variants)} variants`;
    if (num(c.compiles) > 0) text += ` (${count(c.compiles)} distinct compiles)`;
    text += `: ${count(c.compiled)} compiled`;
    if (num(c.compile_cache_hits) > 0 || num(c.compile_errors) > 0) {
      text += ` (${count(c.compile_cache_hits)} cache hits, ${count(c.compile_errors)} errors`;
      if (num(c.compile_timeouts) > 0) text += `, ${count(c.compile_timeouts)} timeouts`;
      text += ')';
    }
    if (num(c.measured) > 0) text += `, ${count(c.measured)} measured: ${count(c.ok)} ok`;
    for (const [field, name] of [['wrong_result', 'wrong result'], ['timeout', 'timeout'],
      ['fault', 'fault'], ['unsupported', 'unsupported']]) {
      if (num(c[field]) > 0) text += `, ${count(c[field])} ${name}`;
    }
    return text;
  }

  // The evidence of an entry as [label, text] rows, as `autotune show`
  // lists it; rows without a value are left out.
  function entryFacts(entry) {
    const t = entry.timing || {};
    const facts = [];
    facts.push(['config', config(entry.config)]);
    let time = micros(t.median_us) ? `${micros(t.median_us)} µs median` : '';
    if (time && num(t.samples) > 0) time += ` (${count(t.samples)} samples, cv ${percent(num(t.cv), 2)})`;
    facts.push(['time', time]);
    facts.push(['interval', intervalText(t)]);
    const throughput = [];
    if (num(t.achieved_gbps) > 0) {
      let gbps = `${num(t.achieved_gbps).toFixed(1)} GB/s`;
      const limit = limitFraction(entry);
      if (limit > 0) gbps += ` (${percent(limit, 0)} of the ${num(entry.limits.copy_gbps).toFixed(1)} GB/s measured copy rate)`;
      throughput.push(gbps);
    }
    if (num(t.achieved_tflops) > 0) throughput.push(`${num(t.achieved_tflops).toFixed(2)} TFLOP/s`);
    facts.push(['throughput', throughput.join(', ')]);
    const margin = num(entry.margin);
    if (entry.tie) {
      facts.push(['margin', `tie among ${num(entry.tied)} configs within the noise, decided by the tie-break` +
        (margin ? ` (next best ${signedPercent(margin)})` : '')]);
    } else {
      facts.push(['margin', margin > 0 ? `${signedPercent(margin)} over the runner-up` : 'none (no runner-up)']);
    }
    const serial = [];
    if (num(entry.candidates) > 0) serial.push(`${num(entry.candidates)} candidates`);
    if (num(entry.rounds) > 0) serial.push(`${num(entry.rounds)} rounds`, `noise ${percent(num(entry.noise), 2)}`);
    if (num(entry.throttled_rounds) > 0) serial.push(`${num(entry.throttled_rounds)} rounds dropped for a throttled clock`);
    let serialText = serial.join(', ');
    if (entry.stop) serialText += `${serialText ? '; ' : ''}stop: ${entry.stop}`;
    facts.push(['serial', serialText]);
    if (entry.contended) {
      facts.push(['contended', 'CONTENDED: measured with another compute process on the GPU' +
        (entry.contention ? `: ${entry.contention}` : '')]);
    }
    const limits = entry.limits || {};
    const limitParts = [];
    if (num(limits.copy_gbps) > 0) limitParts.push(`copy ${num(limits.copy_gbps).toFixed(1)} GB/s`);
    if (num(limits.peak_bandwidth_gbps) > 0) limitParts.push(`peak ${num(limits.peak_bandwidth_gbps).toFixed(1)} GB/s`);
    if (num(limits.default_sm_clock_mhz) > 0) {
      let clock = `SM clock ${num(limits.default_sm_clock_mhz)} MHz default`;
      if (num(limits.max_sm_clock_mhz) > 0) {
        clock += `, ${num(limits.min_sm_clock_mhz)}–${num(limits.max_sm_clock_mhz)} MHz over the rounds`;
      }
      limitParts.push(clock);
    }
    facts.push(['limits', limitParts.join('; ')]);
    const device = entry.device || {};
    const deviceParts = [];
    if (num(device.compute_capability) > 0) deviceParts.push(`sm_${num(device.compute_capability)}`);
    if (num(device.sm_count) > 0) deviceParts.push(`${num(device.sm_count)} SMs`);
    facts.push(['device', (device.name || '') + (deviceParts.length ? ` (${deviceParts.join(', ')})` : '')]);
    const build = [];
    if (entry.nvrtc_version) build.push(`NVRTC ${entry.nvrtc_version}`);
    if (entry.driver_version) build.push(`driver ${entry.driver_version}`);
    if (entry.arch) build.push(entry.arch);
    facts.push(['built', build.join(', ')]);
    facts.push(['tuned', [timestamp(entry.tuned_at), entry.job_id ? `job ${entry.job_id}` : '',
      entry.phase && entry.phase !== 'PHASE_UNSPECIFIED' ? `(${entry.phase})` : ''].filter(Boolean).join(' ')]);
    facts.push(['family hash', entry.family_hash || '']);
    return facts.filter(([, text]) => text);
  }

  // el('td', {class: 'num', title: 'x'}, 'text', childNode): children may be
  // strings, nodes, arrays, or null (skipped). Text is never parsed as HTML.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'dataset') Object.assign(node.dataset, value);
      else if (name.startsWith('on') && typeof value === 'function') node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  // Text that may wrap after each comma (a long config in a table cell).
  function breakable(text) {
    const parts = String(text).split(',');
    return parts.flatMap((part, i) => (i < parts.length - 1 ? [`${part},`, document.createElement('wbr')] : [part]));
  }

  // The first line of a long message, cut to `max` characters.
  function firstLine(text, max = 120) {
    const line = String(text || '').split('\n')[0];
    return line.length > max ? `${line.slice(0, max - 1)}…` : line;
  }

  function badge(text, kind) {
    return el('span', { class: `badge badge-${kind || 'plain'}` }, text);
  }

  function factList(facts) {
    return el('dl', { class: 'facts' }, facts.map(([label, text]) => [el('dt', null, label), el('dd', null, text)]));
  }

  autotune.fmt = {
    num, dtype, dims, config, pairs, problemLabel, sameParams, count, micros, fixed, percent,
    signedPercent, seconds, timestamp, shortTime, interval, intervalText, limitFraction, STATUSES, statusRank,
    statusColor, jobCounts, entryFacts, el, append, breakable, firstLine, badge, factList,
  };
})(window.autotune = window.autotune || {});
