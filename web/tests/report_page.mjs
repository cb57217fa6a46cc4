// Opens a written warmup report and checks what it draws against the data
// inside it.
//
//   node web/tests/report_page.mjs --report FILE.html --screenshot OUT.png
//       [--expect-problems N] [--expect-winners N] [--node-modules DIR]
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, die, openPage, parseArgs, run } from './browser.mjs';
import { checkLandscape, drawnLandscape, expectedLandscape, paramsKey } from './landscape_checks.mjs';

const USAGE = 'report_page.mjs --report FILE.html --screenshot OUT.png [--expect-problems N] [--expect-winners N]';
const args = parseArgs({
  report: 'string', screenshot: 'string', 'expect-problems': 'number', 'expect-winners': 'number', 'node-modules': 'string',
}, USAGE);
if (!args.report || !args.screenshot) die(`usage: ${USAGE}`, 2);
if (!existsSync(args.report)) die(`no such report: ${args.report}`, 2);

const median = (entry) => Number((entry && entry.timing && entry.timing.median_us) || 0);

run('report_page', args.screenshot, async (adopt) => {
  const session = await openPage({ name: 'report-page', origin: null, nodeModules: args['node-modules'] });
  adopt(session);
  const { page } = session;
  await page.goto(pathToFileURL(resolve(args.report)).href, { waitUntil: 'load' });
  await session.waitFor(page, 'body[data-ready="true"]');
  const data = await page.evaluate(() => JSON.parse(document.getElementById('autotune-report-data').textContent));
  const job = data.job || {};
  const reports = job.reports || [];
  const landscapes = data.landscapes || [];
  check(landscapes.length === reports.length, `the data has ${landscapes.length} landscapes for ${reports.length} reports`);
  if (args['expect-problems'] !== undefined) {
    check(reports.length === args['expect-problems'], `the report has ${reports.length} problems, expected ${args['expect-problems']}`);
  }
  const rows = await page.locator('#report-table tbody tr').count();
  check(rows === reports.length, `the table has ${rows} rows for ${reports.length} problems`);

  let withWinner = 0;
  let drawn = 0;
  const totals = { marks: 0, intervals: 0, params: 0 };
  for (const [i, report] of reports.entries()) {
    const name = `problem ${i} (${report.family} ${paramsKey(report.problem && report.problem.dims)})`;
    const landscape = landscapes[i] || {};
    const want = expectedLandscape(report.entry, landscape.measurements);
    const got = await page.evaluate(drawnLandscape, `#problem-${i}`);
    check(got, `${name}: no section #problem-${i}`);
    if (report.error) check(got.text.includes(report.error), `${name}: its error is not shown`);
    if (!want.measurements) {
      // An entry whose measurements could not be read says why.
      if (report.entry && landscape.error) check(got.text.includes(landscape.error), `${name}: why it has no measurements is not shown`);
      continue;
    }
    const counted = checkLandscape(name, want, got);
    drawn++;
    for (const key of Object.keys(totals)) totals[key] += counted[key];
    if (report.entry && (want.winnerScreened || want.winnerSerial)) withWinner++;
    if (landscape.measurements.some((m) => m.job_id && m.job_id !== job.id)) {
      check(got.cachedNote > 0, `${name}: measurements from another job are not said to be`);
    }
  }
  const winnersMarked = await page.evaluate(() =>
    [...document.querySelectorAll('section.problem')].filter((s) => s.querySelector('g.winner [aria-label^="winner "]')).length);
  check(winnersMarked === withWinner, `${winnersMarked} problems mark a winner, expected ${withWinner}`);
  if (args['expect-winners'] !== undefined) {
    check(winnersMarked === args['expect-winners'], `${winnersMarked} problems mark a winner, expected ${args['expect-winners']}`);
  }

  const changed = reports.filter((r) => r.previous && r.entry && median(r.previous) > 0 && median(r.entry) > 0);
  const chart = await page.evaluate(() => {
    const figure = document.querySelector('figure[data-plot="regression"]');
    if (!figure) return null;
    return {
      ratios: figure.querySelectorAll('g.ratio circle').length,
      regressions: figure.querySelectorAll('g.regression circle').length,
    };
  });
  const regressions = changed.filter((r) => r.regression).length;
  if (changed.length) {
    check(chart, 'some problems had an entry before, but there is no regression chart');
    check(chart.ratios === changed.length, `the regression chart has ${chart.ratios} problems, expected ${changed.length}`);
    check(chart.regressions === regressions, `the regression chart marks ${chart.regressions} regressions, expected ${regressions}`);
  } else {
    check(!chart, 'a regression chart without any previous entry');
  }
  return `${rows} problems in the table, ${drawn} landscapes (${totals.marks} screened variants, ${totals.intervals} candidate ` +
    `intervals, ${totals.params} parameter plots), ${winnersMarked} winners marked, ` +
    (changed.length ? `regression chart of ${changed.length} problems (${regressions} regressions)` : 'no previous entries');
});
