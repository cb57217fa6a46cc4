// A stand-in for the daemon's HTTP API, for working on the admin page
// without building or running autotuned. A development aid only: the real
// tests run against the daemon.
//
//   node web/tests/dev/fake_server.mjs [--port N] [--page web/dist/admin.html]
//       [--token-dir DIR] [--job-seconds S]
//
// Serves /admin and /api/* on 127.0.0.1 from the fixtures. Tokens: the
// admin token "dev-admin-token", the reader token "dev-reader-token"; with
// --token-dir both are written there (admin.token, reader.token). The
// running job advances with the clock and ends after --job-seconds
// (default 20).
import { createServer } from 'node:http';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const web = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const fixtures = join(web, 'tests', 'fixtures');
const options = { port: '0', page: join(web, 'dist', 'admin.html'), 'token-dir': '', 'job-seconds': '20' };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const name = argv[i].replace(/^--/, '');
  if (!(name in options) || argv[i + 1] === undefined) {
    console.error('usage: fake_server.mjs [--port N] [--page FILE] [--token-dir DIR] [--job-seconds S]');
    process.exit(2);
  }
  options[name] = argv[i + 1];
}

const TOKENS = {
  'dev-admin-token': { caller: 'token:dev-admin', role: 'admin' },
  'dev-reader-token': { caller: 'token:dev-reader', role: 'reader' },
};
const SHORT = { FLOAT32: 'fp32', FLOAT16: 'fp16', BFLOAT16: 'bf16', FLOAT64: 'fp64', INT8: 'int8', INT32: 'int32', INT64: 'int64', UINT8: 'uint8' };
const load = (name) => JSON.parse(readFileSync(join(fixtures, name), 'utf8'));

// The cache: the entries of the sample report (with their measurements)
// and a few more.
const report = load('report-data.json');
let cache = report.job.reports
  .map((r, i) => ({ entry: r.entry, measurements: report.landscapes[i].measurements }))
  .filter((item) => item.entry && item.measurements.length)
  .concat(load('admin-entries.json'));
const jobs = load('jobs.json').jobs;
const devices = load('devices.json');
const started = Date.now();
const jobSeconds = Number(options['job-seconds']);

const dims = (map) => Object.keys(map || {}).sort().map((k) => `${k}=${map[k]}`).join(',');
const dtypeMatches = (name, wanted) => !wanted || wanted === name || wanted.toLowerCase() === (SHORT[name] || '').toLowerCase() ||
  wanted.toLowerCase() === String(name).toLowerCase();

// The jobs as they stand now: the screening one advances, then finishes;
// the queued one runs after it.
function jobsNow() {
  const t = (Date.now() - started) / 1000;
  return jobs.map((original) => {
    const job = structuredClone(original);
    if (job.state === 'SCREENING') {
      const total = Number(job.timing.total);
      if (t < jobSeconds) {
        job.timing.done = String(Math.min(total - 1, Number(job.timing.done) + Math.floor((total - Number(job.timing.done)) * t / jobSeconds)));
        job.timing.elapsed_s = job.timing.elapsed_s + t;
        job.timing.eta_s = Math.max(1, jobSeconds - t);
      } else {
        Object.assign(job, { state: 'SUCCEEDED' });
        Object.assign(job.timing, { phase: 'done', done: job.timing.total, eta_s: 0, elapsed_s: job.timing.elapsed_s + jobSeconds });
      }
    } else if (job.state === 'QUEUED' && t >= jobSeconds) {
      Object.assign(job, { state: 'CANCELLED', error: 'cancelled by token:nightly' });
    }
    return job;
  });
}

function send(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

const error = (res, status, code, message) => send(res, status, { code, message });

function caller(req) {
  const header = req.headers.authorization || '';
  const match = header.match(/^Bearer\s+(\S+)$/i);
  if (!match) return { error: 'no credentials: send a bearer token' };
  return TOKENS[match[1]] || { error: 'unknown or expired token' };
}

function readBody(req) {
  return new Promise((resolveBody) => {
    const parts = [];
    req.on('data', (chunk) => parts.push(chunk));
    req.on('end', () => resolveBody(Buffer.concat(parts).toString('utf8')));
  });
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://127.0.0.1');
  const q = url.searchParams;
  if (req.method === 'GET' && url.pathname === '/admin') {
    const html = readFileSync(options.page);
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
    return res.end(html);
  }
  if (!url.pathname.startsWith('/api/')) return error(res, 404, 'NOT_FOUND', `no page ${url.pathname}`);
  const who = caller(req);
  if (who.error) return error(res, 401, 'UNAUTHENTICATED', who.error);
  if (req.method === 'GET' && url.pathname === '/api/whoami') return send(res, 200, who);
  if (req.method === 'GET' && url.pathname === '/api/entries') {
    if (Boolean(q.get('dims')) !== Boolean(q.get('dtype'))) return error(res, 400, 'INVALID_ARGUMENT', 'dims and dtype go together');
    const matching = cache.filter(({ entry }) =>
      (!q.get('family') || entry.family === q.get('family')) && (!q.get('device') || entry.device.name === q.get('device')) &&
      (!q.get('dims') || dims(entry.problem.dims) === q.get('dims')) && dtypeMatches(entry.problem.dtype, q.get('dtype')));
    const offset = Number(q.get('offset') || 0);
    const limit = Number(q.get('limit') || 1000);
    return send(res, 200, { entries: matching.slice(offset, offset + limit).map((item) => item.entry), total: String(matching.length) });
  }
  if (req.method === 'GET' && url.pathname === '/api/entry') {
    const item = cache.find(({ entry }) => entry.family === q.get('family') && (!q.get('hash') || entry.family_hash === q.get('hash')) &&
      (!q.get('device') || entry.device.name === q.get('device')) && dims(entry.problem.dims) === q.get('dims') &&
      dtypeMatches(entry.problem.dtype, q.get('dtype')));
    if (!item) return error(res, 404, 'NOT_FOUND', `no entry for ${q.get('family')} ${q.get('dims')} ${q.get('dtype')}`);
    return send(res, 200, item);
  }
  if (req.method === 'GET' && url.pathname === '/api/jobs') {
    return send(res, 200, { jobs: jobsNow().slice(0, Number(q.get('limit') || 50)) });
  }
  if (req.method === 'GET' && url.pathname.startsWith('/api/jobs/')) {
    const job = jobsNow().find((j) => j.id === decodeURIComponent(url.pathname.slice('/api/jobs/'.length)));
    return job ? send(res, 200, job) : error(res, 404, 'NOT_FOUND', 'no such job');
  }
  if (req.method === 'GET' && url.pathname === '/api/devices') {
    const now = structuredClone(devices);
    const running = jobsNow().some((j) => j.state === 'SCREENING');
    for (const d of now.devices) if (!running) Object.assign(d, { busy: false, activity: '', lease_holder: '' });
    return send(res, 200, now);
  }
  if (req.method === 'POST' && url.pathname === '/api/invalidate') {
    if (who.role !== 'admin') {
      return error(res, 403, 'PERMISSION_DENIED', `Invalidate needs the admin role; ${who.caller} has the role ${who.role}`);
    }
    if (!/^application\/json/.test(req.headers['content-type'] || '')) return error(res, 415, 'INVALID_ARGUMENT', 'send JSON');
    const filter = (JSON.parse((await readBody(req)) || '{}').filter) || {};
    const problem = filter.problem || {};
    const gone = cache.filter(({ entry }) => (!filter.family || entry.family === filter.family) &&
      (!filter.family_hash || entry.family_hash === filter.family_hash) && (!filter.device || entry.device.name === filter.device) &&
      (!problem.dims || dims(entry.problem.dims) === dims(problem.dims)) && dtypeMatches(entry.problem.dtype, problem.dtype));
    if (!filter.family && !filter.family_hash && !filter.device && !problem.dims) return error(res, 400, 'INVALID_ARGUMENT', 'an empty filter needs all');
    cache = cache.filter((item) => !gone.includes(item));
    return send(res, 200, {
      entries_removed: String(gone.length), measurements_removed: String(gone.reduce((n, item) => n + item.measurements.length, 0)),
      removed: gone.map((item) => item.entry),
    });
  }
  return error(res, 404, 'NOT_FOUND', `no API ${req.method} ${url.pathname}`);
}

const server = createServer((req, res) => {
  handle(req, res).catch((e) => error(res, 500, 'INTERNAL', e.message));
});
server.listen(Number(options.port), '127.0.0.1', () => {
  const { port } = server.address();
  if (options['token-dir']) {
    mkdirSync(options['token-dir'], { recursive: true });
    writeFileSync(join(options['token-dir'], 'admin.token'), 'dev-admin-token\n');
    writeFileSync(join(options['token-dir'], 'reader.token'), 'dev-reader-token\n');
  }
  console.log(`listening http://127.0.0.1:${port}/admin (${cache.length} entries)`);
});
