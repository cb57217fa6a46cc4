// What a problem's landscape must draw, worked out from its measurements
// alone, and what it does draw, counted in the SVG marks; both pages'
// tests compare the two.
import { check } from './browser.mjs';

export const paramsKey = (params) => Object.keys(params || {}).sort().map((k) => `${k}=${params[k]}`).join(',');
const median = (m) => Number((m.timing && m.timing.median_us) || 0);
const configKey = (m) => paramsKey(m.config && m.config.params);

export function expectedLandscape(entry, measurements) {
  const ms = measurements || [];
  const screen = ms.filter((m) => m.phase === 'SCREEN');
  const timed = screen.filter((m) => m.status === 'OK' && median(m) > 0);
  const serial = ms.filter((m) => m.phase === 'SERIAL_VALIDATION');
  const serialTimed = serial.filter((m) => m.status === 'OK' && median(m) > 0);
  const winner = entry ? paramsKey(entry.config && entry.config.params) : null;
  const params = [...new Set(ms.flatMap((m) => Object.keys((m.config && m.config.params) || {})))].sort();
  return {
    measurements: ms.length, screened: screen.length, timed: timed.length, failed: screen.length - timed.length,
    serial: serial.length, serialTimed: serialTimed.length, params: timed.length ? params : [],
    winnerScreened: winner !== null && timed.some((m) => configKey(m) === winner),
    winnerSerial: winner !== null && serialTimed.some((m) => configKey(m) === winner),
  };
}

// Runs in the page: counts the marks under `root` (a CSS selector).
export function drawnLandscape(root) {
  const scope = document.querySelector(root);
  if (!scope) return null;
  const count = (selector) => scope.querySelectorAll(selector).length;
  const marks = (plot, kind, shape) => count(`figure[data-plot="${plot}"] g.${kind} ${shape}`);
  const params = [...scope.querySelectorAll('figure[data-plot="param"]')];
  return {
    text: scope.textContent,
    landscape: count('.landscape'),
    timed: marks('screened', 'screened-variant', 'circle'),
    failed: marks('failed', 'failed-variant', 'rect'),
    screenedWinner: marks('screened', 'winner', '[aria-label^="winner "]'),
    serialWinner: marks('serial', 'winner', '[aria-label^="winner "]'),
    intervals: marks('serial', 'candidate-interval', 'line'),
    serialRows: marks('serial', 'candidate-median', 'line') + marks('serial', 'failed-candidate', 'text'),
    params: params.map((f) => f.dataset.param),
    paramsWithWinner: params.filter((f) => f.querySelector('g.winner [aria-label^="winner "]')).length,
    cachedNote: count('.note-cached'),
    winnerMarked: count('g.winner [aria-label^="winner "]') > 0,
  };
}

// Fails with `name` and the difference; returns what was counted.
export function checkLandscape(name, want, got) {
  check(got.landscape === 1, `${name}: no landscape`);
  check(got.timed === want.timed, `${name}: ${got.timed} timed variants drawn, expected ${want.timed}`);
  check(got.failed === want.failed, `${name}: ${got.failed} untimed variants drawn, expected ${want.failed}`);
  check(got.timed + got.failed === want.screened, `${name}: ${got.timed + got.failed} marks for ${want.screened} screened variants`);
  check(got.intervals === want.serialTimed, `${name}: ${got.intervals} candidate intervals, expected ${want.serialTimed}`);
  check(got.serialRows === want.serial, `${name}: ${got.serialRows} serial candidates drawn, expected ${want.serial}`);
  if (want.winnerScreened) check(got.screenedWinner > 0, `${name}: the winner is not marked among the screened variants`);
  if (want.winnerSerial) check(got.serialWinner > 0, `${name}: the winner is not marked among the serial candidates`);
  if (want.winnerScreened) check(got.paramsWithWinner === want.params.length, `${name}: the winner is not marked in every parameter plot`);
  check(JSON.stringify(got.params) === JSON.stringify(want.params),
    `${name}: parameter plots ${JSON.stringify(got.params)}, expected ${JSON.stringify(want.params)}`);
  return { marks: got.timed + got.failed, intervals: got.intervals, params: got.params.length, winner: got.winnerMarked };
}
