// The daemon's admin page: who the caller is, the GPUs, recent jobs (with
// live progress while one runs), the cache's entries and, for one entry,
// its evidence, landscape and measurements, and invalidation. Everything
// comes from the daemon's JSON API under /api/ on the page's own origin.
(function (autotune) {
  'use strict';

  const fmt = autotune.fmt;
  const el = fmt.el;
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'autotune.token';
  const RUNNING = new Set(['QUEUED', 'COMPILING', 'SCREENING', 'VALIDATING']);
  const POLL_MS = 2000;
  const PAGE_SIZE = 50;

  const state = {
    token: '',
    role: '',
    filters: {},
    offset: 0,
    total: 0,
    entries: [],
    jobs: [],
    openJob: '',
    detail: null,  // the entry shown below the list
    pollTimer: 0,
  };

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // Every request of the page goes through here: same origin, under /api/,
  // with the pasted bearer token if there is one, else the session cookie of
  // a login link (HttpOnly: the browser sends it, no script here sees it).
  // X-Autotune-Request tells the daemon the request is this page's: another
  // site's page cannot send that header here, so it cannot use the cookie.
  async function api(path, options = {}) {
    if (!path.startsWith('/api/')) throw new Error(`not an API path: ${path}`);
    const headers = { Accept: 'application/json', 'X-Autotune-Request': 'admin-page' };
    if (state.token) headers.Authorization = `Bearer ${state.token}`;
    const init = { method: options.method || 'GET', headers, cache: 'no-store', credentials: 'same-origin' };
    if (options.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(options.body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiError(0, 'UNAVAILABLE', `the daemon did not answer (${error.message})`);
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = null;
    }
    if (!response.ok) {
      const code = (data && data.code) || `HTTP ${response.status}`;
      const message = (data && data.message) || text.trim() || response.statusText;
      throw new ApiError(response.status, code, message);
    }
    return data || {};
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) {
      if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
    }
    const text = search.toString();
    return text ? `?${text}` : '';
  }

  // Messages: one per key (a newer one replaces it), dismissible.
  function showMessage(key, kind, text) {
    clearMessage(key);
    const close = el('button', { type: 'button', 'aria-label': 'dismiss', onclick: () => clearMessage(key) }, '×');
    $('messages').append(el('div', { class: `alert alert-${kind}`, role: kind === 'error' ? 'alert' : 'status', 'data-key': key },
      el('span', null, text), close));
  }

  function clearMessage(key) {
    for (const node of $('messages').querySelectorAll('.alert')) if (node.dataset.key === key) node.remove();
  }

  // What a failed call means to the person: a missing token is asked for,
  // anything else is shown as the daemon said it.
  function report(key, what, error) {
    if (error.status === 401) {
      showMessage('auth', 'error', state.token
        ? `The daemon refused the token (${error.code}: ${error.message}). Paste another one above and press "Use token".`
        : `The daemon needs a bearer token or a new link from \`autotune admin-url\` (${error.code}: ${error.message}). Paste a token above and press "Use token".`);
      $('token').focus();
      return;
    }
    showMessage(key, 'error', `${what}: ${error.code}: ${error.message}`);
  }

  // The caller and its role. False when there is no point asking for more
  // (no token, a refused one, or no role).
  async function loadWhoami() {
    try {
      const who = await api('/api/whoami');
      state.role = who.role || 'none';
      $('whoami').textContent = `${who.caller || 'anonymous'} · ${state.role}`;
      $('whoami').dataset.role = state.role;
      clearMessage('auth');
      if (state.role === 'none') {
        showMessage('auth', 'info', 'You have no role on this daemon: paste a bearer token above to see its cache.');
        return false;
      }
      return true;
    } catch (error) {
      state.role = '';
      $('whoami').textContent = 'not signed in';
      $('whoami').dataset.role = '';
      report('whoami', 'Who am I', error);
      return error.status !== 401;
    }
  }

  const isAdmin = () => state.role === 'admin';

  // The GPUs and what else runs on them.

  async function loadDevices() {
    const panel = $('devices');
    let data;
    try {
      data = await api('/api/devices');
    } catch (error) {
      panel.replaceChildren(el('p', { class: 'empty' }, 'Not available.'));
      report('devices', 'Devices', error);
      return;
    }
    clearMessage('devices');
    $('devices-state').textContent = data.gpus ? `GPUs: ${data.gpus}` : '';
    const nodes = [];
    // Why the workers are not up, or what went wrong with them.
    const why = data.error || data.reason || '';
    if (!data.started) {
      nodes.push(el('div', { class: 'alert alert-info' }, why ||
        'The GPU workers have not started yet: they start with the first job that measures.'));
    } else if (why) {
      nodes.push(el('div', { class: 'alert alert-error' }, why));
    }
    for (const d of data.devices || []) {
      const specs = [fmt.num(d.compute_capability) ? `sm_${fmt.num(d.compute_capability)}` : '',
        fmt.num(d.sm_count) ? `${fmt.num(d.sm_count)} SMs` : '', d.driver_version ? `driver ${d.driver_version}` : '']
        .filter(Boolean).join(', ');
      // "none" (or nothing) when no other compute process was seen.
      const contention = d.contention && d.contention !== 'none' ? d.contention : '';
      nodes.push(el('div', { class: 'device', 'data-ordinal': fmt.num(d.ordinal) },
        el('div', { class: 'device-head' },
          el('span', { class: 'device-name' }, `GPU ${fmt.num(d.ordinal)} · ${d.name || 'unknown'}`),
          specs ? el('span', { class: 'muted' }, specs) : null,
          d.busy ? fmt.badge('busy', 'info') : fmt.badge('idle', 'plain'),
          contention ? fmt.badge('contended', 'warn') : null),
        d.uuid ? el('div', { class: 'uuid' }, d.uuid) : null,
        d.activity ? el('div', { class: 'line' }, d.activity) : null,
        d.lease_holder ? el('div', { class: 'line muted' }, `lease held by ${d.lease_holder}`) : null,
        contention ? el('div', { class: 'line contention' }, `other compute processes: ${contention}`) :
          d.contention_checked_at ? el('div', { class: 'line muted' }, 'no other compute process seen') : null,
        d.contention_checked_at ? el('div', { class: 'line muted' }, `checked ${fmt.timestamp(d.contention_checked_at)}`) : null));
    }
    if (!nodes.length) nodes.push(el('p', { class: 'empty' }, 'No GPUs.'));
    panel.replaceChildren(...nodes);
  }

  // Recent jobs, and live progress.

  function progressText(job) {
    const t = job.timing || {};
    const parts = [];
    if (t.phase) parts.push(t.phase);
    if (fmt.num(t.total) > 0) parts.push(`${fmt.count(t.done)}/${fmt.count(t.total)}`);
    if (fmt.num(t.elapsed_s) > 0) parts.push(`${fmt.seconds(t.elapsed_s)} elapsed`);
    if (fmt.num(t.eta_s) > 0) parts.push(`ETA ${t.eta_partial ? '>' : ''}${fmt.seconds(t.eta_s)}`);
    return parts.join(' · ');
  }

  function progressCell(job) {
    const t = job.timing || {};
    if (RUNNING.has(job.state)) {
      const total = fmt.num(t.total);
      const fraction = total > 0 ? Math.min(1, fmt.num(t.done) / total) : 0;
      return el('div', { class: 'progress', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': total, 'aria-valuenow': fmt.num(t.done) },
        el('div', { class: 'progress-track' }, el('div', { class: 'progress-fill', style: `width:${(fraction * 100).toFixed(1)}%` })),
        el('span', { class: 'progress-text' }, progressText(job) || 'waiting'));
    }
    const parts = [];
    if (fmt.num(t.elapsed_s) > 0) parts.push(`took ${fmt.seconds(t.elapsed_s)}`);
    if (job.error) parts.push(fmt.firstLine(job.error, 70));
    return el('span', { class: job.state === 'FAILED' ? 'flag-error' : 'muted', title: job.error || null }, parts.join(' · '));
  }

  function stateBadge(jobState) {
    const kind = { SUCCEEDED: 'good', FAILED: 'bad', CANCELLED: 'warn' }[jobState] || 'info';
    return fmt.badge(jobState || '?', kind);
  }

  function jobDetail(job) {
    const t = job.timing || {};
    const options = (job.spec && job.spec.options) || {};
    const items = ((job.spec && job.spec.manifest && job.spec.manifest.items) || []).map((item) =>
      `${item.family} ${(item.dims || []).map((d) => `${d.name}=${(d.values || []).join('|')}`).join(',')} ${(item.dtypes || []).map(fmt.dtype).join('|')}`);
    const flags = Object.entries(options).filter(([, v]) => v === true).map(([name]) => name);
    const facts = [
      ['counts', fmt.jobCounts(job.counts)],
      ['time', ['compile', 'screen', 'serial', 'waited'].map((p) => `${p} ${fmt.seconds(t[`${p}_s`])}`).join(' · ') +
        ` · total ${fmt.seconds(t.elapsed_s)}`],
      ['manifest', items.join('; ')],
      ['options', flags.join(', ')],
      ['updated', fmt.timestamp(job.updated_at)],
      ['error', job.error || ''],
      ['reports', (job.reports || []).length ? `${job.reports.length} problems reported` : ''],
    ].filter(([, text]) => text);
    return fmt.factList(facts);
  }

  function renderJobs() {
    const body = $('jobs-table').querySelector('tbody');
    if (!state.jobs.length) {
      body.replaceChildren(el('tr', null, el('td', { colspan: 5, class: 'empty' }, 'No jobs yet.')));
      return;
    }
    const rows = [];
    for (const job of state.jobs) {
      const counts = job.counts || {};
      const toggle = () => { state.openJob = state.openJob === job.id ? '' : job.id; renderJobs(); };
      rows.push(el('tr', {
        class: 'clickable', 'data-job': job.id, 'data-state': job.state, title: 'show details', tabindex: 0,
        'aria-expanded': state.openJob === job.id ? 'true' : 'false', onclick: toggle,
        onkeydown: (event) => { if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); toggle(); } },
      },
      el('td', null, stateBadge(job.state)),
      el('td', { class: 'nowrap' }, el('code', null, job.id), job.submitted_by ? el('div', { class: 'sub' }, `by ${job.submitted_by}`) : null),
      el('td', { class: 'nowrap', title: fmt.timestamp(job.created_at) }, fmt.shortTime(job.created_at)),
      el('td', { class: 'num', title: `${fmt.count(counts.problems)} problems, ${fmt.count(counts.variants)} variants` },
        `${fmt.count(counts.problems)} / ${fmt.count(counts.variants)}`),
      el('td', { class: 'progress-cell' }, progressCell(job))));
      if (state.openJob === job.id) rows.push(el('tr', { class: 'job-detail' }, el('td', { colspan: 5 }, jobDetail(job))));
    }
    body.replaceChildren(...rows);
  }

  async function loadJobs() {
    try {
      const data = await api('/api/jobs?limit=50');
      state.jobs = data.jobs || [];
      clearMessage('jobs');
    } catch (error) {
      report('jobs', 'Jobs', error);
    }
    renderJobs();
    schedulePoll();
  }

  // While a job runs, its progress (and the GPUs) every 2 s; a job that
  // ends brings the lists up to date once, then polling stops.
  function schedulePoll() {
    clearTimeout(state.pollTimer);
    const running = state.jobs.some((job) => RUNNING.has(job.state));
    $('jobs-live').textContent = running ? 'live · every 2 s' : '';
    if (running) state.pollTimer = setTimeout(poll, POLL_MS);
  }

  async function poll() {
    let ended = false;
    const running = state.jobs.filter((job) => RUNNING.has(job.state));
    await Promise.all(running.map(async (job) => {
      try {
        const fresh = await api(`/api/jobs/${encodeURIComponent(job.id)}`);
        const i = state.jobs.findIndex((j) => j.id === job.id);
        if (i >= 0) state.jobs[i] = fresh;
        if (!RUNNING.has(fresh.state)) ended = true;
      } catch (error) {
        report('jobs', `Job ${job.id}`, error);
        ended = true;  // ask for the whole list again rather than this job
      }
    }));
    await loadDevices();
    if (ended) {
      await Promise.all([loadJobs(), loadEntries()]);
      return;
    }
    renderJobs();
    schedulePoll();
  }

  // The cache's entries, filtered and paged.

  function entryKey(entry) {
    return [entry.family, entry.family_hash, entry.device && entry.device.name, fmt.dims(entry.problem),
      entry.problem && entry.problem.dtype].join('|');
  }

  function readFilters() {
    const form = $('filters');
    const value = (name) => form.elements[name].value.trim();
    const filters = { family: value('family'), device: value('device'), dims: value('dims'), dtype: value('dtype') };
    if (Boolean(filters.dims) !== Boolean(filters.dtype)) {
      showMessage('filters', 'error', 'Filter by dims and dtype together: a problem is both.');
      return null;
    }
    clearMessage('filters');
    return filters;
  }

  async function loadEntries() {
    const body = $('entries-table').querySelector('tbody');
    $('entries-panel').dataset.loading = 'true';
    let data;
    try {
      data = await api(`/api/entries${query({ ...state.filters, limit: PAGE_SIZE, offset: state.offset })}`);
      clearMessage('entries');
    } catch (error) {
      report('entries', 'Entries', error);
      showEmptyEntries('Not available.');
      return;
    } finally {
      $('entries-panel').dataset.loading = 'false';
    }
    state.entries = data.entries || [];
    state.total = fmt.num(data.total);
    const selected = state.detail ? entryKey(state.detail) : '';
    const rows = state.entries.map((entry, i) => {
      const t = entry.timing || {};
      const flags = [];
      if (entry.tie) flags.push(fmt.badge(`tie(${fmt.num(entry.tied)})`, 'info'));
      if (entry.contended) flags.push(fmt.badge('CONTENDED', 'warn'));
      if (entry.phase === 'SCREEN') flags.push(fmt.badge('screen', 'plain'));
      return el('tr', { class: `clickable${entryKey(entry) === selected ? ' selected' : ''}`, 'data-index': i, onclick: () => openEntry(entry) },
        el('td', null, el('button', { type: 'button', class: 'link open-entry' }, entry.family)),
        el('td', { class: 'mono' }, fmt.dims(entry.problem)),
        el('td', null, fmt.dtype(entry.problem && entry.problem.dtype)),
        el('td', { class: 'nowrap' }, (entry.device && entry.device.name) || ''),
        el('td', null, el('code', null, fmt.breakable(fmt.config(entry.config)))),
        el('td', { class: 'num' }, fmt.micros(t.median_us)),
        el('td', { class: 'num' }, entry.tie ? `tie/${fmt.num(entry.tied)}` : fmt.signedPercent(fmt.num(entry.margin))),
        el('td', { class: 'nowrap', title: fmt.timestamp(entry.tuned_at) }, fmt.shortTime(entry.tuned_at)),
        el('td', null, el('span', { class: 'flags' }, flags)));
    });
    if (!rows.length) rows.push(el('tr', null, el('td', { colspan: 9, class: 'empty' }, 'No entries match.')));
    body.replaceChildren(...rows);
    $('entries-count').textContent = `${fmt.count(state.total)} ${state.total === 1 ? 'entry' : 'entries'}`;
    $('entries-count').dataset.total = String(state.total);
    const first = state.entries.length ? state.offset + 1 : 0;
    $('page-text').textContent = `${fmt.count(first)}–${fmt.count(state.offset + state.entries.length)} of ${fmt.count(state.total)}`;
    $('page-prev').disabled = state.offset === 0;
    $('page-next').disabled = state.offset + state.entries.length >= state.total;
  }

  function showEmptyEntries(text) {
    state.entries = [];
    $('entries-table').querySelector('tbody').replaceChildren(el('tr', null, el('td', { colspan: 9, class: 'empty' }, text)));
    $('entries-count').textContent = '';
    delete $('entries-count').dataset.total;
    $('page-text').textContent = '';
    $('page-prev').disabled = true;
    $('page-next').disabled = true;
  }

  // One entry: its evidence, landscape and measurements.

  function entryParams(entry) {
    return {
      family: entry.family, hash: entry.family_hash, device: entry.device && entry.device.name,
      dims: fmt.dims(entry.problem), dtype: entry.problem && entry.problem.dtype,
    };
  }

  function measurementsTable(measurements, entry) {
    const winner = fmt.config(entry.config);
    const order = { SERIAL_VALIDATION: 0, SCREEN: 1 };
    const rows = measurements.slice().sort((a, b) =>
      (order[a.phase] ?? 2) - (order[b.phase] ?? 2) || (a.status === 'OK' ? 0 : 1) - (b.status === 'OK' ? 0 : 1) ||
      fmt.num(a.timing && a.timing.median_us) - fmt.num(b.timing && b.timing.median_us) ||
      fmt.statusRank(a.status) - fmt.statusRank(b.status));
    const head = ['phase', 'status', 'config', 'median µs', 'interval µs', 'GB/s', 'rounds', 'noise', 'job', 'measured (UTC)', 'detail'];
    const numeric = new Set([3, 5, 6, 7]);
    return el('div', { class: 'measurements' }, el('table', { class: 'data compact', id: 'measurements-table' },
      el('thead', null, el('tr', null, head.map((h, i) => el('th', { class: numeric.has(i) ? 'num' : null }, h)))),
      el('tbody', null, rows.map((m) => {
        const t = m.timing || {};
        const iv = fmt.interval(t);
        const isWinner = m.status === 'OK' && fmt.config(m.config) === winner && m.phase === entry.phase;
        const notes = [m.detail, m.carried ? 'carried' : '', m.contended ? `CONTENDED ${m.contention}` : ''].filter(Boolean).join(' · ');
        return el('tr', { class: isWinner ? 'row-winner' : null },
          el('td', null, m.phase === 'SERIAL_VALIDATION' ? 'serial' : String(m.phase || '').toLowerCase()),
          el('td', null, el('span', { style: `color:${fmt.statusColor(m.status)}` }, m.status)),
          el('td', { class: 'nowrap' }, el('code', null, fmt.config(m.config)), isWinner ? ' ★' : ''),
          el('td', { class: 'num' }, fmt.micros(t.median_us)),
          el('td', { class: 'nowrap' }, iv ? `[${fmt.micros(iv.low)}, ${fmt.micros(iv.high)}]` : ''),
          el('td', { class: 'num' }, fmt.fixed(t.achieved_gbps, 1)),
          el('td', { class: 'num' }, fmt.num(m.rounds) || ''),
          el('td', { class: 'num' }, fmt.num(m.noise) ? fmt.percent(fmt.num(m.noise), 2) : ''),
          el('td', { class: 'nowrap' }, m.job_id ? el('code', null, m.job_id) : ''),
          el('td', { class: 'nowrap', title: fmt.timestamp(m.measured_at) }, fmt.shortTime(m.measured_at)),
          el('td', null, notes));
      }))));
  }

  async function openEntry(entry) {
    const panel = $('entry-detail');
    state.detail = entry;
    for (const row of $('entries-table').querySelectorAll('tbody tr')) {
      row.classList.toggle('selected', state.entries[Number(row.dataset.index)] === entry);
    }
    panel.hidden = false;
    panel.replaceChildren(el('p', { class: 'empty' }, 'Loading…'));
    let data;
    try {
      data = await api(`/api/entry${query(entryParams(entry))}`);
      clearMessage('entry');
    } catch (error) {
      panel.replaceChildren(el('p', { class: 'empty' }, 'Not available.'));
      report('entry', 'Entry', error);
      return;
    }
    if (state.detail !== entry) return;  // another entry was opened meanwhile
    const shown = data.entry || entry;
    const measurements = data.measurements || [];
    const invalidate = el('button', { type: 'button', class: 'danger', id: 'invalidate', onclick: () => confirmInvalidate(shown) }, 'Invalidate…');
    // A role below admin would be refused; the button is hidden, and the
    // daemon refuses anyway should the role have changed since.
    invalidate.hidden = !isAdmin();
    const flags = [];
    if (shown.tie) flags.push(fmt.badge(`tie(${fmt.num(shown.tied)})`, 'info'));
    if (shown.contended) flags.push(fmt.badge('CONTENDED', 'warn'));
    const facts = fmt.entryFacts(shown);
    const launch = shown.launch || {};
    if ((launch.grid || []).length) {
      facts.push(['launch', `grid (${launch.grid.join(', ')}), block (${(launch.block || []).join(', ')})` +
        (fmt.num(launch.dynamic_shared_bytes) ? `, ${fmt.count(launch.dynamic_shared_bytes)} B dynamic shared` : '')]);
    }
    if (shown.function_name) facts.push(['function', shown.function_name]);
    if (shown.binary_sha256) facts.push(['binary', `sha256 ${shown.binary_sha256}`]);
    panel.replaceChildren(
      el('div', { class: 'detail-head' },
        el('h2', null, fmt.problemLabel(shown.family, shown.problem)),
        el('span', { class: 'muted' }, `on ${(shown.device && shown.device.name) || '?'}`), flags,
        el('span', { class: 'spacer' }), invalidate,
        el('button', { type: 'button', id: 'detail-close', onclick: closeEntry }, 'Close')),
      fmt.factList(facts));
    autotune.landscape.render(panel, { measurements, entry: shown });
    panel.append(el('h3', { class: 'section-title' }, `Measurements (${fmt.count(measurements.length)})`));
    panel.append(measurements.length ? measurementsTable(measurements, shown) : el('p', { class: 'empty' }, 'None stored.'));
    panel.dataset.entry = entryKey(shown);
    panel.scrollIntoView({ block: 'start', behavior: 'auto' });
  }

  function closeEntry() {
    state.detail = null;
    const panel = $('entry-detail');
    panel.hidden = true;
    panel.replaceChildren();
    delete panel.dataset.entry;
    for (const row of $('entries-table').querySelectorAll('tbody tr.selected')) row.classList.remove('selected');
  }

  // Invalidation, after a confirmation in the page.

  let pending = null;

  function confirmInvalidate(entry) {
    pending = entry;
    $('confirm-text').textContent = `Remove the entry for ${fmt.problemLabel(entry.family, entry.problem)} on ` +
      `${(entry.device && entry.device.name) || '?'} (config ${fmt.config(entry.config)}) and its measurements?`;
    $('confirm-dialog').showModal();
    $('confirm-cancel').focus();
  }

  async function invalidate() {
    const entry = pending;
    pending = null;
    $('confirm-dialog').close();
    if (!entry) return;
    const filter = {
      family: entry.family, family_hash: entry.family_hash, device: (entry.device && entry.device.name) || '',
      problem: { dims: (entry.problem && entry.problem.dims) || {}, dtype: entry.problem && entry.problem.dtype },
    };
    let result;
    try {
      result = await api('/api/invalidate', { method: 'POST', body: { filter } });
    } catch (error) {
      report('invalidate', 'Invalidate refused', error);
      return;
    }
    const entries = fmt.num(result.entries_removed);
    const measurements = fmt.num(result.measurements_removed);
    showMessage('invalidate', 'ok', `Removed ${fmt.count(entries)} ${entries === 1 ? 'entry' : 'entries'} and ` +
      `${fmt.count(measurements)} measurements (${fmt.problemLabel(entry.family, entry.problem)}).`);
    closeEntry();
    await loadEntries();
  }

  // Start-up and the controls.

  // Everything again, as after a new token. body[data-ready] is "true"
  // once all of it has been answered (tests wait for it).
  async function loadAll() {
    document.body.dataset.ready = 'false';
    clearTimeout(state.pollTimer);
    const ok = await loadWhoami();
    if (ok) {
      await Promise.all([loadDevices(), loadJobs(), loadEntries()]);
    } else {
      $('devices').replaceChildren(el('p', { class: 'empty' }, 'Sign in to see the devices.'));
      state.jobs = [];
      $('jobs-table').querySelector('tbody').replaceChildren(el('tr', null, el('td', { colspan: 5, class: 'empty' }, 'Sign in to see the jobs.')));
      $('jobs-live').textContent = '';
      showEmptyEntries('Sign in to see the cache.');
    }
    document.body.dataset.ready = 'true';
  }

  function setToken(token) {
    state.token = token;
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    $('token').value = '';
    $('token').placeholder = token ? 'token in use' : 'bearer token';
  }

  // A login link (`autotune admin-url`) carries a one-time token in the
  // fragment, which no request sends: dropped from the address bar and the
  // history first, then swapped for the session cookie. The page keeps
  // nothing of it; opened twice, the link is refused.
  async function loginFromLink() {
    const match = /^#login=([^&]+)$/.exec(location.hash);
    if (!match) return;
    history.replaceState(null, '', location.pathname + location.search);
    try {
      await api('/api/login', { method: 'POST', body: { login: decodeURIComponent(match[1]) } });
      setToken('');  // the link's session, not an older pasted token
    } catch (error) {
      showMessage('login', 'error', `The login link was refused (${error.code}: ${error.message}).`);
    }
  }

  // "Forget": the pasted token, and the session of a login link with every
  // unused link of its holder.
  async function signOut() {
    setToken('');
    try {
      await api('/api/logout', { method: 'POST', body: {} });
    } catch (error) {
      report('logout', 'Sign out', error);
    }
  }

  async function start() {
    setToken(sessionStorage.getItem(TOKEN_KEY) || '');
    await loginFromLink();
    $('token-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const token = $('token').value.trim();
      if (!token) return;
      setToken(token);
      closeEntry();
      loadAll();
    });
    $('token-forget').addEventListener('click', async () => {
      await signOut();
      closeEntry();
      loadAll();
    });
    $('filters').addEventListener('submit', (event) => {
      event.preventDefault();
      const filters = readFilters();
      if (!filters) return;
      state.filters = filters;
      state.offset = 0;
      loadEntries();
    });
    $('filters-clear').addEventListener('click', () => {
      $('filters').reset();
      clearMessage('filters');
      state.filters = {};
      state.offset = 0;
      loadEntries();
    });
    $('page-prev').addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE_SIZE); loadEntries(); });
    $('page-next').addEventListener('click', () => { state.offset += PAGE_SIZE; loadEntries(); });
    $('jobs-refresh').addEventListener('click', () => Promise.all([loadJobs(), loadDevices()]));
    $('confirm-cancel').addEventListener('click', () => { pending = null; $('confirm-dialog').close(); });
    $('confirm-ok').addEventListener('click', invalidate);
    $('confirm-dialog').addEventListener('cancel', () => { pending = null; });
    loadAll();
  }

  autotune.admin = { start, state };
  document.addEventListener('DOMContentLoaded', start);
})(window.autotune = window.autotune || {});
