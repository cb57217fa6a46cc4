// Builds the two pages autotune serves and writes, each one self-contained
// HTML document (styles, d3, Observable Plot and our scripts inline), and
// web_assets.cc, which holds them for web/web_assets.h.
//
//   node web/build.mjs [--node-modules DIR] [--out DIR]
//
// DIR of node_modules is what `npm ci` of web/package.json installed
// (default web/node_modules); --out defaults to web/dist. The same inputs
// give the same bytes.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Script } from 'node:vm';

const WEB = dirname(fileURLToPath(import.meta.url));
const PLACEHOLDER = '@@AUTOTUNE_REPORT_DATA@@';
const DELIMITER = 'autotune_asset';
const CHUNK_BYTES = 60000;

function fail(message) {
  console.error(`build.mjs: ${message}`);
  process.exit(1);
}

function parseArgs(argv) {
  const args = { nodeModules: join(WEB, 'node_modules'), out: join(WEB, 'dist') };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (flag === '--node-modules' || flag === '--out') {
      if (!value) fail(`${flag} needs a directory`);
      args[flag === '--out' ? 'out' : 'nodeModules'] = resolve(value);
      i++;
    } else {
      fail(`unknown argument ${flag} (usage: node build.mjs [--node-modules DIR] [--out DIR])`);
    }
  }
  return args;
}

function read(path) {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    fail(`cannot read ${path}: ${error.message}`);
  }
}

// The vendored libraries, at exactly the versions package.json pins.
function vendor(nodeModules) {
  const pins = JSON.parse(read(join(WEB, 'package.json'))).dependencies;
  const libraries = [
    ['d3', 'dist/d3.min.js'],
    ['@observablehq/plot', 'dist/plot.umd.min.js'],
  ];
  return libraries.map(([name, file]) => {
    const installed = JSON.parse(read(join(nodeModules, name, 'package.json'))).version;
    if (installed !== pins[name]) fail(`${name} ${installed} in ${nodeModules}, but package.json pins ${pins[name]}`);
    return { name: `${name} ${installed}`, text: read(join(nodeModules, name, file)).trim() };
  });
}

// Our own scripts may reach the network only through admin.js's api(),
// which refuses any path outside /api/ on the page's own origin: no URL to
// another host, and no other way to make a request.
function checkOwnSources(files) {
  const forbidden = [
    [/https?:\/\//i, 'an http(s) URL'],
    [/['"`]\/\//, 'a protocol-relative URL'],
    [/\bXMLHttpRequest\b|\bWebSocket\b|\bEventSource\b|\bsendBeacon\b|\bimportScripts\b|\bimport\s*\(/, 'a request API other than fetch'],
    [/\burl\s*\(/i, 'a CSS url()'],
    [/@import\b/, 'a CSS @import'],
    [/\beval\s*\(|\bnew\s+Function\b/, 'code built from text'],
  ];
  for (const [name, text] of Object.entries(files)) {
    for (const [pattern, what] of forbidden) {
      const match = text.match(pattern);
      if (match) fail(`src/${name} has ${what}: "${match[0]}"`);
    }
    const fetches = text.match(/\bfetch\s*\(/g) || [];
    const allowed = name === 'admin.js' ? 1 : 0;
    if (fetches.length !== allowed) fail(`src/${name} calls fetch ${fetches.length} times; only admin.js's api() may, once`);
    if (allowed && !/\bfetch\(path, init\)/.test(text) ||
        allowed && !text.includes("if (!path.startsWith('/api/')) throw")) {
      fail(`src/${name}: the one fetch must be api()'s, behind its /api/ check`);
    }
  }
}

// Our scripts must at least parse: a syntax error would only show when a
// page opens.
function checkSyntax(name, text) {
  try {
    new Script(text, { filename: `src/${name}` });
  } catch (error) {
    fail(`src/${name} does not parse: ${error.message}\n${(error.stack || '').split('\n').slice(0, 4).join('\n')}`);
  }
}

function inlineScript(name, text) {
  // Inside <script>, "</script" would end the element and "<!--" would
  // change how the parser reads it: neither may appear.
  if (/<\/script|<!--/i.test(text)) fail(`${name} contains "</script" or "<!--" and cannot be inlined`);
  return text;
}

function sha256(text) {
  return createHash('sha256').update(text, 'utf8').digest('base64');
}

// Inline scripts are allowed by their hashes, nothing may be loaded from
// anywhere, and only the admin page may talk to its own origin.
function csp(scripts, connect) {
  return [
    "default-src 'none'",
    `script-src ${scripts.map((s) => `'sha256-${sha256(s)}'`).join(' ')}`,
    // Plot writes inline style attributes and a <style> into each SVG.
    "style-src 'unsafe-inline'",
    'img-src data:',
    `connect-src ${connect}`,
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
}

function page(template, style, scripts, connect) {
  const tags = scripts.map((s) => `<script>\n${s}\n</script>`).join('\n');
  const bodies = scripts.map((s) => `\n${s}\n`);
  if (/<\/style/i.test(style)) fail('style.css contains "</style"');
  const out = template
    .replace('{{csp}}', () => csp(bodies, connect))
    .replace('{{style}}', () => style.trim())
    .replace('{{scripts}}', () => tags);
  if (out.includes('{{')) fail('a template marker was left unreplaced');
  return out;
}

function checkDocument(name, html, placeholders) {
  const count = html.split(PLACEHOLDER).length - 1;
  if (count !== placeholders) fail(`${name} has the report data placeholder ${count} times, expected ${placeholders}`);
  if (/<script[^>]*\ssrc\s*=|<link\b|<iframe\b|<img\b|<object\b|<embed\b/i.test(html)) {
    fail(`${name} refers to an external resource`);
  }
  if (html.includes(DELIMITER)) fail(`${name} contains "${DELIMITER}", the raw string delimiter of web_assets.cc`);
  if (html.includes('\r')) fail(`${name} contains a carriage return`);
}

// Pieces of at most CHUNK_BYTES bytes of UTF-8, never splitting a
// character: each piece is a valid string literal on its own.
function chunks(text) {
  const pieces = [];
  let current = '';
  let bytes = 0;
  for (const ch of text) {
    const size = Buffer.byteLength(ch, 'utf8');
    if (bytes + size > CHUNK_BYTES) {
      pieces.push(current);
      current = '';
      bytes = 0;
    }
    current += ch;
    bytes += size;
  }
  if (current) pieces.push(current);
  return pieces;
}

function cppArray(name, text) {
  const literals = chunks(text).map((piece) => `    R"${DELIMITER}(${piece})${DELIMITER}"`).join('\n');
  return `// ${Buffer.byteLength(text, 'utf8')} bytes.\nconstexpr char ${name}[] =\n${literals};\n`;
}

function assetsCc(report, admin, versions) {
  return [
    '// Generated by web/build.mjs from web/src with ' + versions.join(' and ') + '; do not edit.',
    '#include "web/web_assets.h"',
    '',
    'namespace autotune::web {',
    'namespace {',
    '',
    cppArray('kReportPage', report),
    cppArray('kAdminPage', admin),
    '}  // namespace',
    '',
    'absl::string_view ReportPageTemplate() {',
    '  return absl::string_view(kReportPage, sizeof(kReportPage) - 1);',
    '}',
    '',
    'absl::string_view AdminPage() { return absl::string_view(kAdminPage, sizeof(kAdminPage) - 1); }',
    '',
    '}  // namespace autotune::web',
    '',
  ].join('\n');
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const src = (name) => read(join(WEB, 'src', name));
  const own = {};
  for (const name of ['format.js', 'landscape.js', 'report.js', 'admin.js', 'style.css']) own[name] = src(name);
  checkOwnSources(own);
  for (const name of ['format.js', 'landscape.js', 'report.js', 'admin.js']) checkSyntax(name, own[name]);
  const libraries = vendor(args.nodeModules);
  for (const library of libraries) inlineScript(library.name, library.text);
  const shared = [...libraries.map((l) => l.text), inlineScript('format.js', own['format.js'].trim()),
    inlineScript('landscape.js', own['landscape.js'].trim())];
  const report = page(src('report.html'), own['style.css'], [...shared, inlineScript('report.js', own['report.js'].trim())], "'none'");
  const admin = page(src('admin.html'), own['style.css'], [...shared, inlineScript('admin.js', own['admin.js'].trim())], "'self'");
  checkDocument('report.html', report, 1);
  checkDocument('admin.html', admin, 0);
  mkdirSync(args.out, { recursive: true });
  const outputs = {
    'report.html': report,
    'admin.html': admin,
    'web_assets.cc': assetsCc(report, admin, libraries.map((l) => l.name)),
  };
  for (const [name, text] of Object.entries(outputs)) {
    writeFileSync(join(args.out, name), text);
    console.log(`${join(args.out, name)}: ${Buffer.byteLength(text, 'utf8')} bytes`);
  }
}

main();
