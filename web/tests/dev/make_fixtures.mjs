// Writes the fixture JSON under web/tests/fixtures/ (a development aid: the
// shapes follow proto/autotune.proto as protobuf JSON prints them, with
// int64 values as strings). Deterministic: the same file every run.
//
//   node web/tests/dev/make_fixtures.mjs
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const outDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');

// A small seeded generator (mulberry32) so that reruns write the same bytes.
function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const DEVICE = { name: 'NVIDIA H200', compute_capability: 90, sm_count: 132 };
const LIMITS = {
  copy_gbps: 4021.5, peak_bandwidth_gbps: 4800, default_sm_clock_mhz: 1980,
  min_sm_clock_mhz: 1755, max_sm_clock_mhz: 1980,
};

const FAMILIES = {
  rmsnorm: {
    hash: '5f0c2a9e41d7b3c8e2f6a1d09b7c4e3f8a2d6c1b0e9f7a5d3c2b1a0f9e8d7c6b',
    params: { VEC: [1, 2, 4, 8], ITEMS: [1, 2, 4, 8, 16, 32, 64], ROWS_PER_BLOCK: [1, 2, 4], CACHE_ROW: [0, 1] },
    defaults: { VEC: 2, ITEMS: 8, ROWS_PER_BLOCK: 1, CACHE_ROW: 0 },
    best: { VEC: 8, ITEMS: 4, ROWS_PER_BLOCK: 2, CACHE_ROW: 1 },
  },
  softmax: {
    hash: 'a41be09c7d2f5e8130c6b9d4e7f2a5c8b1d4e7f0a3c6b9d2e5f8a1c4b7d0e3f6',
    params: { VEC: [1, 2, 4, 8], ITEMS: [1, 2, 4, 8, 16, 32, 64], ROWS_PER_BLOCK: [1, 2, 4], CACHE_ROW: [0, 1] },
    defaults: { VEC: 2, ITEMS: 8, ROWS_PER_BLOCK: 1, CACHE_ROW: 0 },
    best: { VEC: 4, ITEMS: 8, ROWS_PER_BLOCK: 1, CACHE_ROW: 1 },
  },
  gla_decode: {
    hash: '0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e',
    params: { BLOCK_V: [8, 16, 32, 64], VEC: [1, 2, 4], THREADS: [64, 128, 256], UNROLL: [1, 2, 4] },
    defaults: { BLOCK_V: 32, VEC: 4, THREADS: 128, UNROLL: 1 },
    best: { BLOCK_V: 16, VEC: 4, THREADS: 128, UNROLL: 2 },
  },
};

function configs(params) {
  let all = [{}];
  for (const [name, values] of Object.entries(params)) {
    all = all.flatMap((c) => values.map((v) => ({ ...c, [name]: v })));
  }
  return all;
}

const key = (params) => Object.keys(params).sort().map((k) => `${k}=${params[k]}`).join(',');
const stringParams = (params) => Object.fromEntries(Object.keys(params).sort().map((k) => [k, String(params[k])]));
const stringDims = (dims) => Object.fromEntries(Object.keys(dims).sort().map((k) => [k, String(dims[k])]));
const round = (v, digits = 3) => Number(v.toFixed(digits));

function timing(median, spread, rand, extra = {}) {
  const q1 = median * (1 - spread * (0.6 + 0.4 * rand()));
  const q3 = median * (1 + spread * (0.6 + 0.4 * rand()));
  return {
    median_us: round(median), min_us: round(q1 * (1 - spread)), p90_us: round(q3 * (1 + spread)),
    cv: round(spread * 1.3, 4), samples: extra.samples ?? 40, achieved_gbps: extra.gbps ?? 0,
    achieved_tflops: extra.tflops ?? 0, q3_us: round(q3), q1_us: extra.noQ1 ? 0 : round(q1),
  };
}

function measurement(p, params, fields) {
  return {
    family: p.family, family_hash: FAMILIES[p.family].hash,
    problem: { dims: stringDims(p.dims), dtype: p.dtype }, device: DEVICE,
    config: { params: stringParams(params) }, status: 'OK', phase: 'SCREEN',
    ...fields,
    detail: fields.detail ?? '', max_error: fields.max_error ?? 0,
    binary_sha256: fields.binary_sha256 ?? '', driver_version: '13.0',
    measured_at: fields.measured_at ?? p.at, job_id: fields.job_id ?? p.jobId,
    cache_state: 'COLD', rounds: fields.rounds ?? 0, noise: fields.noise ?? 0,
    contended: fields.contended ?? false, contention: fields.contention ?? '', carried: fields.carried ?? false,
  };
}

// Every measurement of one problem: the screen of each config, then the
// serial rounds of the candidates. Returns the entry the job would keep.
function tune(p) {
  const family = FAMILIES[p.family];
  const rand = random(p.seed);
  const bytes = p.bytes;
  // µs at the device's copy rate, plus what a launch costs anyway.
  const floor = (bytes / (LIMITS.copy_gbps * 1e3)) * 1.08 + 2.4;
  const screened = [];
  const measurements = [];
  let hexCounter = p.seed * 7919;
  const sha = () => (hexCounter++).toString(16).padStart(8, '0').repeat(8);
  for (const params of configs(family.params)) {
    let factor = 1;
    for (const [name, value] of Object.entries(params)) {
      const values = family.params[name];
      const distance = Math.abs(values.indexOf(value) - values.indexOf(family.best[name]));
      factor *= 1 + distance * (0.05 + 0.11 * rand());
    }
    const median = floor * factor * (1 + 0.02 * rand());
    const failure = p.failure(params, rand);
    if (failure) {
      const fields = { status: failure.status, detail: failure.detail, binary_sha256: sha() };
      if (failure.status === 'WRONG_RESULT') fields.max_error = failure.max_error ?? 0.0625;
      // Some failed variants carry an empty timing message, some none.
      if (rand() < 0.5) fields.timing = timing(0, 0, rand);
      if (fields.timing) Object.assign(fields.timing, { median_us: 0, min_us: 0, p90_us: 0, q1_us: 0, q3_us: 0, cv: 0, samples: 0 });
      measurements.push(measurement(p, params, fields));
      continue;
    }
    const gbps = round(bytes / (median * 1e3), 1);
    const m = measurement(p, params, {
      timing: timing(median, 0.02, rand, { samples: 5, gbps, tflops: p.flops ? round(p.flops / (median * 1e6), 3) : 0 }),
      binary_sha256: sha(), carried: p.carried ? rand() < 0.4 : false,
      contended: Boolean(p.screenContention), contention: p.screenContention ?? '',
    });
    screened.push({ params, median, m });
    measurements.push(m);
  }
  screened.sort((a, b) => a.median - b.median);
  if (!screened.length) return { entry: null, measurements, defaultMedian: 0 };
  const candidates = screened.slice(0, p.candidates ?? 6);
  const defaultKey = key(family.defaults);
  const def = screened.find((s) => key(s.params) === defaultKey);
  if (def && !candidates.includes(def)) candidates.push(def);
  const serial = candidates.map((c, i) => {
    const median = c.median * (0.985 + 0.03 * rand()) * (p.tieWith && i < p.tieWith ? 0.98 : 1);
    return { ...c, serialMedian: median };
  });
  if (p.tieWith) {
    // A declared tie: the first few sit within the noise of each other.
    const base = Math.min(...serial.map((s) => s.serialMedian));
    serial.slice(0, p.tieWith).forEach((s, i) => { s.serialMedian = base * (1 + 0.0015 * i); });
  }
  serial.sort((a, b) => a.serialMedian - b.serialMedian);
  for (const [i, s] of serial.entries()) {
    const gbps = round(bytes / (s.serialMedian * 1e3), 1);
    const wrong = p.serialWrong && i === serial.length - 2;
    const fields = wrong
      ? { status: 'WRONG_RESULT', detail: 'max error 0.031 at index 4095 (seed 2): 1.0312 vs 1.0000', max_error: 0.031 }
      : { timing: timing(s.serialMedian, 0.003, rand, { samples: 400, gbps, tflops: p.flops ? round(p.flops / (s.serialMedian * 1e6), 3) : 0, noQ1: p.oldIntervals }) };
    measurements.push(measurement(p, s.params, {
      ...fields, phase: 'SERIAL_VALIDATION', binary_sha256: s.m.binary_sha256,
      rounds: wrong ? 0 : 24, noise: wrong ? 0 : round(0.002 + 0.002 * rand(), 4),
      contended: Boolean(p.contention), contention: p.contention ?? '',
    }));
  }
  const ok = measurements.filter((m) => m.phase === 'SERIAL_VALIDATION' && m.status === 'OK');
  const winnerIndex = p.tieWith ? ok.findIndex((m) => key(m.config.params) === defaultKey) : 0;
  const winner = ok[winnerIndex >= 0 && winnerIndex < (p.tieWith ?? 1) ? winnerIndex : 0];
  const runnerUp = ok.find((m) => m !== winner);
  const entry = {
    family: p.family, family_hash: family.hash,
    problem: { dims: stringDims(p.dims), dtype: p.dtype }, device: DEVICE,
    config: winner.config, launch: { grid: ['64', '1', '1'], block: ['256', '1', '1'], dynamic_shared_bytes: '0' },
    binary_sha256: winner.binary_sha256, nvrtc_version: '13.0', driver_version: '13.0', arch: 'sm_90',
    timing: winner.timing,
    margin: runnerUp ? round(runnerUp.timing.median_us / winner.timing.median_us - 1, 4) : 0,
    phase: 'SERIAL_VALIDATION', tuned_at: p.at, job_id: p.jobId,
    tie: Boolean(p.tieWith), tied: p.tieWith ?? 0, candidates: serial.length, rounds: 24,
    noise: winner.noise, throttled_rounds: p.throttled ?? 0,
    stop: p.stop ?? 'noise below 0.5%', contended: Boolean(p.contention), contention: p.contention ?? '',
    limits: LIMITS, function_name: p.family,
  };
  const defaultSerial = ok.find((m) => key(m.config.params) === defaultKey);
  return { entry, measurements, defaultMedian: defaultSerial ? defaultSerial.timing.median_us : 0 };
}

const noFailure = () => null;
const rmsnormFailures = (params, rand) => {
  if (params.ITEMS === 64 && params.CACHE_ROW === 1) {
    return { status: 'UNSUPPORTED', detail: 'shared memory 98304 bytes per block > 49152 allowed' };
  }
  if (params.VEC === 8 && params.ROWS_PER_BLOCK === 4 && params.ITEMS <= 2) {
    return { status: 'WRONG_RESULT', detail: 'max error 0.125 at index 17 (seed 1): 0.875 vs 1.000' };
  }
  if (params.ITEMS === 1 && params.VEC === 1 && params.ROWS_PER_BLOCK === 4 && params.CACHE_ROW === 0 && rand() < 2) {
    return { status: 'TIMEOUT', detail: 'launch ran past 10 s' };
  }
  return null;
};

const JOB_ID = 'j-20261202-0457-3f9a';
const OLD_JOB_ID = 'j-20261118-2210-81c4';
const AT = '2026-12-02T04:58:31Z';

const problems = [
  { family: 'rmsnorm', dims: { rows: 64, hidden: 4096 }, dtype: 'BFLOAT16', seed: 11, bytes: 64 * 4096 * 4 + 8192,
    failure: rmsnormFailures, previous: { ratio: 1.031, differs: 'NVRTC 12.8 -> 13.0' } },
  { family: 'rmsnorm', dims: { rows: 4096, hidden: 8192 }, dtype: 'BFLOAT16', seed: 12, bytes: 4096 * 8192 * 4,
    failure: rmsnormFailures, tieWith: 3, previous: { ratio: 0.953, differs: 'earlier run', regression: true } },
  { family: 'rmsnorm', dims: { rows: 64, hidden: 8192 }, dtype: 'FLOAT16', seed: 13, bytes: 64 * 8192 * 4,
    failure: noFailure, cached: true, oldIntervals: true },
  { family: 'gla_decode', dims: { batch: 8, heads: 32, dim: 128 }, dtype: 'BFLOAT16', seed: 14,
    bytes: 8 * 32 * 128 * 128 * 4, flops: 8 * 32 * 128 * 128 * 6, failure: (params) =>
      (params.BLOCK_V === 64 && params.THREADS === 64 ? { status: 'UNSUPPORTED', detail: 'needs 1024 threads per block after register use' } : null),
    contention: 'pid 4121 (2.0 GiB), utilization 97%', screenContention: 'pid 4121 (2.0 GiB), utilization 97%',
    serialWrong: true, previous: { ratio: 1.002, differs: 'family version' }, carried: true },
  { family: 'softmax', dims: { rows: 4096, hidden: 32768 }, dtype: 'FLOAT32', seed: 15, bytes: 4096 * 32768 * 8,
    failure: () => ({ status: 'WRONG_RESULT', detail: 'max error inf at index 0 (seed 1): inf vs 0.000031', max_error: 1e30 }),
    error: 'no valid config: every variant was rejected (168 WRONG_RESULT)' },
  { family: 'softmax', dims: { rows: 64, hidden: 1024 }, dtype: 'BFLOAT16', seed: 16, bytes: 64 * 1024 * 4,
    failure: noFailure, landscapeError: 'GetEntry: DEADLINE_EXCEEDED: the daemon did not answer in 10 s' },
];

const reports = [];
const landscapes = [];
const statusTotals = {};
for (const p of problems) {
  p.jobId = p.cached ? OLD_JOB_ID : JOB_ID;
  p.at = p.cached ? '2026-11-18T22:41:09Z' : AT;
  const { entry, measurements, defaultMedian } = tune(p);
  const counts = {};
  for (const m of measurements) if (m.phase === 'SCREEN') counts[m.status] = (counts[m.status] ?? 0) + 1;
  const report = {
    family: p.family, problem: { dims: stringDims(p.dims), dtype: p.dtype }, cached: Boolean(p.cached),
    error: p.error ?? '', previous_differs: '', previous_ratio: 0, regression: false,
    default_config: { params: stringParams(FAMILIES[p.family].defaults) },
    default_median_us: p.cached || p.error ? 0 : defaultMedian,
    speedup: p.cached || p.error || !defaultMedian ? 0 : round(defaultMedian / entry.timing.median_us, 4),
    status_counts: p.cached ? {} : Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, String(v)])),
    screened: p.cached ? 0 : measurements.filter((m) => m.phase === 'SCREEN').length,
    screen_contention: p.screenContention ?? '',
    screens_carried: p.carried ? measurements.filter((m) => m.carried).length : 0,
    screens_carried_from: p.carried ? '7c1d0e5f3a2b4c6d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d' : '',
  };
  if (!p.error) report.entry = entry;
  if (p.previous) {
    const old = structuredClone(entry);
    old.timing = { ...entry.timing, median_us: round(entry.timing.median_us * p.previous.ratio) };
    old.job_id = OLD_JOB_ID;
    old.tuned_at = '2026-11-18T22:41:09Z';
    old.nvrtc_version = p.previous.differs.startsWith('NVRTC') ? '12.8' : '13.0';
    report.previous = old;
    report.previous_differs = p.previous.differs;
    report.previous_ratio = p.previous.ratio;
    report.regression = Boolean(p.previous.regression);
  }
  for (const [k, v] of Object.entries(counts)) if (!p.cached) statusTotals[k] = (statusTotals[k] ?? 0) + v;
  reports.push(report);
  landscapes.push(p.landscapeError ? { measurements: [], error: p.landscapeError } : { measurements, error: '' });
  p.entry = entry;
  p.measurements = measurements;
}

const variants = reports.reduce((n, r) => n + r.screened, 0);
const job = {
  id: JOB_ID,
  spec: {
    manifest: { items: [
      { family: 'rmsnorm', dims: [{ name: 'rows', values: ['64', '4096'] }, { name: 'hidden', values: ['4096', '8192'] }], dtypes: ['BFLOAT16', 'FLOAT16'] },
    ], arch: 'sm_90' },
    options: { compile_only: false, shard_index: 0, shard_count: 0, variant_timeout_s: 0, compile_timeout_s: 0, retune: false,
      serial_candidates: 0, force: true, quiet_wait_s: 0, candidate_band: 0, serial_max_s: 0, serial_noise: 0 },
  },
  state: 'SUCCEEDED',
  counts: {
    problems: String(reports.length), variants: String(variants + 168), compiled: String(variants - 40),
    compile_cache_hits: String(208), compile_errors: '0', measured: String(variants - reports[3].screens_carried),
    ok: String(statusTotals.OK), wrong_result: String(statusTotals.WRONG_RESULT ?? 0), timeout: String(statusTotals.TIMEOUT ?? 0),
    fault: '0', unsupported: String(statusTotals.UNSUPPORTED ?? 0), cached_problems: '1', compiles: String(variants + 168),
    compile_timeouts: '0', carried: String(reports[3].screens_carried),
  },
  created_at: '2026-12-02T04:57:02Z', updated_at: '2026-12-02T04:59:58Z',
  error: 'softmax hidden=32768,rows=4096 fp32: no valid config: every variant was rejected (168 WRONG_RESULT)',
  results: reports.filter((r) => r.entry).map((r) => r.entry),
  reports,
  timing: { phase: 'done', done: String(reports.length), total: String(reports.length), elapsed_s: 176.4, eta_s: 0,
    compile_s: 41.2, screen_s: 63.8, serial_s: 48.9, waited_s: 22.5, eta_partial: false },
  submitted_by: 'token:ci',
};

// JSON indented down to `depth` levels, each deeper value on one line: the
// large arrays of measurements stay one line per element.
function stringify(value, depth, indent = '') {
  if (depth === 0 || value === null || typeof value !== 'object') return JSON.stringify(value);
  const inner = indent + ' ';
  const items = Array.isArray(value)
    ? value.map((v) => inner + stringify(v, depth - 1, inner))
    : Object.entries(value).map(([k, v]) => `${inner}${JSON.stringify(k)}: ${stringify(v, depth - 1, inner)}`);
  if (!items.length) return Array.isArray(value) ? '[]' : '{}';
  const [open, close] = Array.isArray(value) ? ['[', ']'] : ['{', '}'];
  return `${open}\n${items.join(',\n')}\n${indent}${close}`;
}

function write(name, value, depth = 4) {
  writeFileSync(join(outDir, name), stringify(value, depth) + '\n');
}

write('report-data.json', { generated_at: '2026-12-02T05:00:00Z', job, landscapes }, 4);

// The admin fixtures: the cache's entries (with what GetEntry answers for
// each), recent jobs, and the daemon's devices.
const extra = [];
let seed = 40;
for (const [family, dimsList] of Object.entries({
  rmsnorm: [{ rows: 4096, hidden: 4096 }],
  softmax: [{ rows: 64, hidden: 4096 }],
  gla_decode: [{ batch: 1, heads: 32, dim: 64 }, { batch: 16, heads: 32, dim: 128 }],
})) {
  for (const dims of dimsList) {
    const bytes = Object.values(dims).reduce((a, b) => a * b, 1) * (family === 'gla_decode' ? 512 : 4);
    const p = { family, dims, dtype: family === 'softmax' ? 'FLOAT32' : 'BFLOAT16', seed: seed++, bytes,
      failure: family === 'rmsnorm' ? rmsnormFailures : noFailure, jobId: OLD_JOB_ID, at: '2026-11-18T22:41:09Z' };
    const { entry, measurements } = tune(p);
    extra.push({ entry, measurements });
  }
}
// The fake server adds the entries of report-data.json to these.
write('admin-entries.json', extra, 3);

const running = structuredClone(job);
Object.assign(running, {
  id: 'j-20261202-0512-77e0', state: 'SCREENING', error: '', results: [], reports: [], created_at: '2026-12-02T05:12:40Z',
  updated_at: '2026-12-02T05:13:21Z', submitted_by: 'daemon',
  timing: { phase: 'screen', done: '212', total: '504', elapsed_s: 41.3, eta_s: 77, compile_s: 18.1, screen_s: 23.2,
    serial_s: 0, waited_s: 0, eta_partial: false },
});
running.spec.manifest.items = [{ family: 'gla_decode', dims: [{ name: 'batch', values: ['1', '8', '16'] }, { name: 'heads', values: ['32'] }, { name: 'dim', values: ['64', '128'] }], dtypes: ['BFLOAT16'] }];
running.counts = { ...running.counts, problems: '6', variants: '648', measured: '212', ok: '204', wrong_result: '0', timeout: '0', unsupported: '8', cached_problems: '0', carried: '0' };
const queued = structuredClone(running);
Object.assign(queued, { id: 'j-20261202-0513-0b42', state: 'QUEUED', submitted_by: 'token:nightly', created_at: '2026-12-02T05:13:02Z',
  timing: { phase: '', done: '0', total: '0', elapsed_s: 0, eta_s: 0, compile_s: 0, screen_s: 0, serial_s: 0, waited_s: 0, eta_partial: true } });
const failed = structuredClone(job);
Object.assign(failed, { id: 'j-20261201-2301-5d17', state: 'FAILED', error: 'store: database is locked (SQLITE_BUSY) after 30 s', reports: [], results: [],
  created_at: '2026-12-01T23:01:11Z', updated_at: '2026-12-01T23:04:40Z', submitted_by: 'uid:1000' });
const cancelled = structuredClone(job);
Object.assign(cancelled, { id: 'j-20261201-1850-a2c3', state: 'CANCELLED', error: 'cancelled by token:ci', reports: [], results: [],
  created_at: '2026-12-01T18:50:27Z', updated_at: '2026-12-01T18:51:02Z' });
write('jobs.json', { jobs: [queued, running, job, failed, cancelled] });

write('devices.json', {
  gpus: 'all', started: true, error: '',
  devices: [
    { ordinal: 0, name: 'NVIDIA H200', uuid: 'GPU-3b1f0c4e-9a2d-4f6b-8e7c-1d5a9b2c6e40', compute_capability: 90, sm_count: 132,
      driver_version: '13.0', busy: true, activity: 'screening gla_decode batch=8,dim=128,heads=32 bf16 (job j-20261202-0512-77e0)',
      lease_holder: 'pid 3120 (autotuned)', contention: 'none', contention_checked_at: '2026-12-02T05:13:20Z' },
    { ordinal: 1, name: 'NVIDIA H200', uuid: 'GPU-8c2e7a15-0f4b-4d9e-a361-7b0e5c9d2f18', compute_capability: 90, sm_count: 132,
      driver_version: '13.0', busy: false, activity: '', lease_holder: '', contention: 'pid 4121 (2.0 GiB), utilization 97%',
      contention_checked_at: '2026-12-02T05:12:58Z' },
  ],
});
console.log(`wrote fixtures to ${outDir}`);
