// Writes a sample report: the built template with report data in place of
// its placeholder, escaped as the C++ writer does (every '<' as \u003c).
//
//   node web/tests/dev/make_report.mjs [--template web/dist/report.html]
//       [--data web/tests/fixtures/report-data.json] [--out web/dist/sample-report.html]
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const web = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const args = {
  template: join(web, 'dist', 'report.html'),
  data: join(web, 'tests', 'fixtures', 'report-data.json'),
  out: join(web, 'dist', 'sample-report.html'),
};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const name = argv[i].replace(/^--/, '');
  if (!(name in args) || argv[i + 1] === undefined) {
    console.error(`usage: make_report.mjs [--template FILE] [--data FILE] [--out FILE]`);
    process.exit(2);
  }
  args[name] = argv[i + 1];
}

const placeholder = '@@AUTOTUNE_REPORT_DATA@@';
const template = readFileSync(args.template, 'utf8');
if (template.split(placeholder).length !== 2) throw new Error(`${args.template}: the placeholder is not there exactly once`);
const json = JSON.stringify(JSON.parse(readFileSync(args.data, 'utf8'))).replace(/</g, '\\u003c');
writeFileSync(args.out, template.replace(placeholder, () => json));
console.log(`wrote ${args.out}`);
