// What the browser tests share: flags, Debian's Chromium driven by
// playwright-core, and the guards every test runs under. A page error, a
// console error, or a request to any origin but the page's own fails the
// test.
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export class TestFailure extends Error {}

export function check(condition, message) {
  if (!condition) throw new TestFailure(message);
}

// --name VALUE flags; spec maps a name to 'string', 'number' or 'flag'.
export function parseArgs(spec, usage) {
  const args = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].startsWith('--') ? argv[i].slice(2) : '';
    const type = spec[name];
    if (!type) die(`unknown argument ${argv[i]}\nusage: ${usage}`, 2);
    if (type === 'flag') {
      args[name] = true;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) die(`--${name} needs a value\nusage: ${usage}`, 2);
    if (type === 'number') {
      if (!/^\d+$/.test(value)) die(`--${name} takes a whole number, not ${value}`, 2);
      args[name] = Number(value);
    } else {
      args[name] = value;
    }
  }
  return args;
}

export function die(message, code = 1) {
  console.error(message);
  process.exit(code);
}

// playwright-core from wherever `npm ci` put it: the usual resolution from
// web/, else --node-modules DIR or the directories of NODE_PATH.
async function loadPlaywright(nodeModules) {
  const places = [nodeModules, ...(process.env.NODE_PATH || '').split(':')].filter(Boolean);
  for (const dir of places) {
    try {
      return createRequire(join(resolve(dir), 'noop.js'))('playwright-core');
    } catch (error) {
      // not there; try the next
    }
  }
  try {
    return await import('playwright-core');
  } catch (error) {
    die(`cannot load playwright-core (run npm ci in web/, or pass --node-modules DIR or NODE_PATH): ${error.message}`);
  }
}

const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

// Starts Chromium and one page. `origin` is the only origin the page may
// request from (null: none, as for a file:// page, which may load only
// file: URLs). Failures seen by the guards are collected in `problems`;
// run() reports them. newPage() opens another page in a context of its own
// (its own sessionStorage), under the same guards.
export async function openPage({ name, origin, nodeModules }) {
  const { chromium } = await loadPlaywright(nodeModules);
  const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
  // chromium.launch makes its own new, empty profile directory; TMPDIR
  // points it (and Chromium's other temporary files) at one of ours.
  const temp = mkdtempSync(join(tmpdir(), `${name}-`));
  process.env.TMPDIR = temp;
  const browser = await chromium.launch({ executablePath, args: ARGS, headless: true, timeout: 60000 });
  const problems = [];
  const allowed = [];
  // Settles with the first problem, so that waits end at once on one.
  let reportProblem;
  const firstProblem = new Promise((resolveProblem) => { reportProblem = resolveProblem; });
  const addProblem = (text) => {
    problems.push(text);
    reportProblem(text);
  };

  async function newPage() {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    page.on('pageerror', (error) => addProblem(`page error: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() !== 'error') return;
      const text = message.text();
      if (allowed.some((pattern) => pattern.test(text))) return;
      addProblem(`console error: ${text}`);
    });
    await context.route('**/*', (route) => {
      const url = new URL(route.request().url());
      const ok = url.protocol === 'data:' || url.protocol === 'blob:' ||
        (origin === null ? url.protocol === 'file:' : url.origin === origin);
      if (ok) return route.continue();
      addProblem(`request to another origin: ${route.request().method()} ${url.href}`);
      return route.abort('blockedbyclient');
    });
    return page;
  }

  const session = {
    browser, problems, newPage, page: await newPage(), screenshotTaken: false,
    // A refusal the test provokes on purpose shows in the console as the
    // browser's "Failed to load resource" line for that status; these are
    // allowed while `during` runs, nothing else.
    async expectRefusal(status, during) {
      const pattern = new RegExp(`^Failed to load resource: the server responded with a status of ${status}\\b`);
      allowed.push(pattern);
      try {
        return await during();
      } finally {
        allowed.splice(allowed.indexOf(pattern), 1);
      }
    },
    // Waits for `selector` on `page`; a page error, console error or
    // foreign request fails the wait at once.
    async waitFor(page, selector, options = {}) {
      const failed = firstProblem.then((text) => { throw new TestFailure(`while waiting for ${selector}: ${text}`); });
      return Promise.race([page.waitForSelector(selector, { timeout: 30000, ...options }), failed]);
    },
    async screenshot(path) {
      await session.page.screenshot({ path, fullPage: true });
      session.screenshotTaken = true;
    },
    async close() {
      await browser.close().catch(() => {});
      rmSync(temp, { recursive: true, force: true });
    },
  };
  return session;
}

// Runs a test body with its session; prints the summary line or the
// failure, saves the screenshot either way, and exits.
export async function run(name, screenshot, body) {
  const started = Date.now();
  let session = null;
  let summary = '';
  let failure = null;
  try {
    summary = await body((s) => { session = s; });
  } catch (error) {
    failure = error instanceof TestFailure ? error.message : (error && error.stack) || String(error);
  }
  if (session) {
    // A test may have saved the view that shows most; a failure saves
    // where it stopped.
    if (screenshot && (failure || !session.screenshotTaken)) {
      try {
        await session.page.screenshot({ path: screenshot, fullPage: true });
      } catch (error) {
        failure = failure || `cannot save the screenshot ${screenshot}: ${error.message}`;
      }
    }
    const unsaid = session.problems.filter((text) => !(failure || '').includes(text));
    if (unsaid.length) failure = [failure, ...unsaid].filter(Boolean).join('\n');
    await session.close();
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (failure) {
    console.error(`${name}: FAIL after ${seconds} s\n${failure}`);
    process.exit(1);
  }
  console.log(`${name}: ok in ${seconds} s: ${summary}`);
  process.exit(0);
}
