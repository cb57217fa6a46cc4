// Drives the daemon's admin page as a person would and checks it against
// what the daemon's API answers.
//
//   node web/tests/admin_page.mjs --url http://127.0.0.1:PORT/admin --screenshot OUT.png
//       [--token-file FILE] [--reader-token-file FILE] [--expect-entries N] [--invalidate]
//       [--expect-running [--go-files FILE,...]] [--node-modules DIR]
//
// --expect-running: a job runs when the page opens; the page must show its
// progress moving and then its end, by itself (no reload).
// --go-files: the job is held (the profile worker's FAKE_WORKER_HOLD) until
// the page has seen it: the i-th file is made once the page has shown i
// different progress texts, which lets the job go on to its next hold.
//
// Token files hold the raw bearer token on their first line.
import { readFileSync, writeFileSync } from 'node:fs';
import { check, die, openPage, parseArgs, run } from './browser.mjs';
import { checkLandscape, drawnLandscape, expectedLandscape } from './landscape_checks.mjs';

const USAGE = 'admin_page.mjs --url URL --screenshot OUT.png [--token-file FILE] [--reader-token-file FILE] ' +
  '[--expect-entries N] [--invalidate] [--expect-running [--go-files FILE,...]]';
const args = parseArgs({
  url: 'string', screenshot: 'string', 'token-file': 'string', 'reader-token-file': 'string',
  'expect-entries': 'number', invalidate: 'flag', 'expect-running': 'flag', 'go-files': 'string',
  'node-modules': 'string',
}, USAGE);
if (!args.url || !args.screenshot) die(`usage: ${USAGE}`, 2);
if (args.invalidate && !args['token-file']) die('--invalidate needs --token-file (an admin token)', 2);
if (args['go-files'] && !args['expect-running']) die('--go-files needs --expect-running', 2);
const goFiles = args['go-files'] ? args['go-files'].split(',') : [];

function readToken(file) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    die(`cannot read ${file}: ${error.message}`, 2);
  }
  const token = text.split(/\r?\n/)[0].trim();
  if (!token) die(`${file} has no token on its first line`, 2);
  return token;
}

const PAGE_SIZE = 50;
const RUNNING = new Set(['QUEUED', 'COMPILING', 'SCREENING', 'VALIDATING']);
const TIMEOUT = 30000;
const origin = new URL(args.url).origin;
let session = null;

// The API's own answer, asked from inside the page (same origin) with the
// token the page uses. A 401 (no token) is an answer here, not a failure.
function apiGet(page, path) {
  return session.expectRefusal(401, () => page.evaluate(async (p) => {
    const token = sessionStorage.getItem('autotune.token');
    const response = await fetch(p, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
    return { status: response.status, body: await response.json().catch(() => null) };
  }, path));
}

// A running job's row, followed as the page polls: its progress text must
// change at least once and the row must end SUCCEEDED. With --go-files the
// job moves on only as the page shows it.
async function followRunningJob(page) {
  const row = page.locator('#jobs-table tbody tr[data-job]').filter({ has: page.locator('[role="progressbar"]') }).first();
  await row.waitFor({ timeout: TIMEOUT });
  const id = await row.getAttribute('data-job');
  const selector = `#jobs-table tbody tr[data-job="${id}"]`;
  const seen = new Set();
  let released = 0;
  const deadline = Date.now() + 120000;
  let jobState = '';
  while (Date.now() < deadline) {
    jobState = (await page.getAttribute(selector, 'data-state').catch(() => null)) || '';
    if (!RUNNING.has(jobState)) break;
    const text = await page.locator(`${selector} .progress-text`).textContent().catch(() => null);
    if (text) seen.add(text.trim());
    while (released < Math.min(seen.size, goFiles.length)) writeFileSync(goFiles[released++], '');
    await page.waitForTimeout(200);
  }
  check(jobState === 'SUCCEEDED', `job ${id} shows ${jobState || 'nothing'} on the page, not SUCCEEDED, after following it`);
  check(seen.size >= 2, `the progress of job ${id} never moved on the page: ${[...seen].join(' | ')}`);
  return `job ${id} followed live through ${seen.size} progress states to ${jobState}`;
}

// Opens the page; a daemon that wants a token answers 401 until one is
// given, which the page must ask for. Then the token goes in through the
// token field. Returns the caller's role.
async function signIn(page, token) {
  let unauthorized = false;
  page.on('response', (response) => { if (response.status() === 401) unauthorized = true; });
  await session.expectRefusal(401, async () => {
    await page.goto(args.url, { waitUntil: 'load' });
    await session.waitFor(page, 'body[data-ready="true"]');
  });
  if (unauthorized) {
    const asked = await page.locator('#messages').textContent();
    check(/bearer token/.test(asked), `the daemon answered 401 but the page did not ask for a token (it says: "${asked.trim()}")`);
  }
  if (!token) return page.getAttribute('#whoami', 'data-role');
  await page.fill('#token', token);
  await page.click('#token-use');
  await session.waitFor(page, 'body[data-ready="true"]');
  const role = await page.getAttribute('#whoami', 'data-role');
  check(role, `with the token, the page shows no role (it says: "${(await page.locator('#whoami').textContent()).trim()}")`);
  return role;
}

async function entryCount(page) {
  await session.waitFor(page, '#entries-panel[data-loading="false"]');
  const total = await page.getAttribute('#entries-count', 'data-total');
  return {
    total: total === null ? null : Number(total),
    rows: await page.locator('#entries-table tbody tr[data-index]').count(),
  };
}

async function entryKeys(page) {
  return page.evaluate(() => window.autotune.admin.state.entries.map((e) =>
    [e.family, e.family_hash, e.device && e.device.name, JSON.stringify(e.problem)].join('|')));
}

// Opens the first entry of the list and checks its evidence, landscape and
// measurements against GetEntry.
async function openFirstEntry(page) {
  const first = await page.evaluate(() => {
    const e = window.autotune.admin.state.entries[0];
    const dims = Object.keys(e.problem.dims || {}).sort().map((k) => `${k}=${e.problem.dims[k]}`).join(',');
    const q = new URLSearchParams({ family: e.family, hash: e.family_hash, device: e.device.name, dims, dtype: e.problem.dtype });
    return { key: [e.family, e.family_hash, e.device && e.device.name, JSON.stringify(e.problem)].join('|'), path: `/api/entry?${q}` };
  });
  await page.click('#entries-table tbody tr[data-index="0"] button.open-entry');
  await session.waitFor(page, '#entry-detail[data-entry] .landscape');
  const answer = await apiGet(page, first.path);
  check(answer.status === 200, `GET ${first.path} answered ${answer.status}`);
  const { entry, measurements = [] } = answer.body;
  const name = `entry ${entry.family} ${JSON.stringify(entry.problem)}`;
  const detail = await page.locator('#entry-detail').textContent();
  const config = Object.keys(entry.config.params || {}).sort().map((k) => `${k}=${entry.config.params[k]}`).join(',');
  check(detail.includes(config), `${name}: its config ${config} is not shown`);
  const want = expectedLandscape(entry, measurements);
  let counted = { marks: 0, intervals: 0, params: 0 };
  if (measurements.length) {
    counted = checkLandscape(name, want, await page.evaluate(drawnLandscape, '#entry-detail'));
    if (want.winnerScreened || want.winnerSerial) check(counted.winner, `${name}: the winner is not marked`);
  }
  const rows = await page.locator('#measurements-table tbody tr').count();
  check(rows === measurements.length, `${name}: ${rows} rows of measurements, GetEntry has ${measurements.length}`);
  return { key: first.key, name, measurements: measurements.length, ...counted };
}

// Confirms the in-page dialog and waits for the daemon's answer.
async function confirmInvalidate(page) {
  await page.click('#invalidate');
  await session.waitFor(page, '#confirm-dialog[open]');
  const [response] = await Promise.all([
    page.waitForResponse((r) => new URL(r.url()).pathname === '/api/invalidate', { timeout: TIMEOUT }),
    page.click('#confirm-ok'),
  ]);
  const body = await response.json().catch(() => ({}));
  return { status: response.status(), body };
}

run('admin_page', args.screenshot, async (adopt) => {
  session = await openPage({ name: 'admin-page', origin, nodeModules: args['node-modules'] });
  adopt(session);
  const { page } = session;
  const token = args['token-file'] ? readToken(args['token-file']) : '';
  const role = await signIn(page, token);
  const summary = [`role ${role || 'none'}`];

  const devices = await apiGet(page, '/api/devices');
  if (devices.status === 200) {
    const cards = await page.locator('#devices .device').count();
    const listed = (devices.body.devices || []).length;
    check(cards === listed, `the device panel shows ${cards} GPUs, the daemon lists ${listed}`);
    if (!devices.body.started && !listed) {
      check(await page.locator('#devices .alert').count() === 1, 'GPU workers not started, and the page does not say so');
    }
    summary.push(`${cards} devices`);
  }
  const jobs = await apiGet(page, '/api/jobs?limit=50');
  if (jobs.status === 200) {
    const rows = await page.locator('#jobs-table tbody tr[data-job]').count();
    const listed = (jobs.body.jobs || []).length;
    check(rows === listed, `the jobs list shows ${rows} jobs, the daemon lists ${listed}`);
    if (!listed) check(await page.locator('#jobs-table tbody td.empty').count() === 1, 'no jobs, and the page does not say so');
    summary.push(`${rows} jobs`);
  }
  if (args['expect-running']) summary.push(await followRunningJob(page));

  const before = await entryCount(page);
  if (args['expect-entries'] !== undefined) {
    check(before.total === args['expect-entries'], before.total === null
      ? `the page lists no entries (the role is ${role || 'none'}), expected ${args['expect-entries']}`
      : `the page lists ${before.total} entries, expected ${args['expect-entries']}`);
    check(before.rows === Math.min(args['expect-entries'], PAGE_SIZE), `${before.rows} rows of entries on the first page`);
  }
  summary.push(`${before.total ?? 0} entries`);
  if (!before.rows) {
    check(!args.invalidate && !args['reader-token-file'], 'no entry to open, invalidate or refuse to invalidate');
    await session.screenshot(args.screenshot);
    return summary.join(', ');
  }

  const opened = await openFirstEntry(page);
  summary.push(`opened ${opened.name}: ${opened.measurements} measurements, ${opened.marks} screened marks, ` +
    `${opened.intervals} candidate intervals, ${opened.params} parameter plots, winner marked`);
  const button = page.locator('#invalidate');
  check((await button.isVisible()) === (role === 'admin'), `the invalidate button is ${await button.isVisible() ? 'shown' : 'hidden'} for the role ${role}`);
  await session.screenshot(args.screenshot);

  if (args['reader-token-file']) {
    const readerPage = await session.newPage();
    const readerRole = await signIn(readerPage, readToken(args['reader-token-file']));
    check(readerRole !== 'admin', 'the reader token has the admin role');
    const readerOpened = await openFirstEntry(readerPage);
    check(!(await readerPage.locator('#invalidate').isVisible()), `the invalidate button is shown to the role ${readerRole}`);
    // The button is hidden for this role; show it, as a page whose role
    // changed meanwhile would, and the daemon must still refuse.
    await readerPage.evaluate(() => { document.getElementById('invalidate').hidden = false; });
    const refused = await session.expectRefusal(403, () => confirmInvalidate(readerPage));
    check(refused.status === 403, `invalidating as ${readerRole} answered ${refused.status}, expected 403`);
    const alert = readerPage.locator('#messages .alert[data-key="invalidate"]');
    await alert.waitFor({ timeout: TIMEOUT });
    const shown = await alert.textContent();
    check(refused.body.message && shown.includes(refused.body.message),
      `the refusal "${refused.body.message}" is not shown (the page says: "${shown.trim()}")`);
    await readerPage.click('#filters button[type="submit"]');
    const after = await entryCount(readerPage);
    check(after.total === before.total, `after a refused invalidate the reader sees ${after.total} entries, not ${before.total}`);
    check((await entryKeys(readerPage)).includes(readerOpened.key), 'after a refused invalidate the entry is gone from the list');
    check(await readerPage.locator('#entry-detail[data-entry]').count() === 1, 'after a refused invalidate the entry is no longer shown');
    summary.push(`reader (${readerRole}) refused: ${refused.body.code}`);
    await readerPage.context().close();
  }

  if (args.invalidate) {
    check(role === 'admin', `--invalidate needs an admin token; the page says the role is ${role}`);
    const done = await confirmInvalidate(page);
    check(done.status === 200, `invalidate answered ${done.status}: ${JSON.stringify(done.body)}`);
    check(Number(done.body.entries_removed) === 1, `invalidate removed ${done.body.entries_removed} entries, expected 1`);
    await session.waitFor(page, '#entry-detail[hidden]', { state: 'attached' });
    const after = await entryCount(page);
    check(after.total === before.total - 1, `after invalidating, the page lists ${after.total} entries, expected ${before.total - 1}`);
    check(!(await entryKeys(page)).includes(opened.key), 'the invalidated entry is still listed');
    const message = await page.locator('#messages .alert[data-key="invalidate"]').textContent();
    check(/Removed 1 entry/.test(message), `no word of the removal (the page says: "${message.trim()}")`);
    summary.push(`invalidated: ${before.total} -> ${after.total} entries`);
  }
  return summary.join(', ');
});
