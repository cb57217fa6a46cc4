#!/usr/bin/env bash
# How stable the daemon's choice is on the GPU machine: the bundled daemon
# tunes a manifest RUNS times, each run cold on a fresh database (so nothing
# of an earlier run, not even the tie-break's current entry, steers it), and
# prints each run's wall time and entries (config, median, margin, or tie
# and how many configs tied). With RETUNE=1 the runs share one database and
# runs after the first use --retune (what a nightly retune does).
#
#   bash bench/run_warmup_choice.sh [MANIFEST] [RUNS]   # default bench/choice.manifest 2
#
# Needs bundle/gpu from `bash tests/gpu/run.sh bundle` (AUTOTUNE_BUNDLE
# overrides it). Exits non-zero when a warmup fails.
set -euo pipefail
bundle=${AUTOTUNE_BUNDLE:-bundle/gpu}
manifest=${1:-bench/choice.manifest}
runs=${2:-2}
dir=$(mktemp -d)
pid=
stop_daemon() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
trap 'stop_daemon; rm -rf "$dir"' EXIT
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cli=("$bundle/autotune" --server "unix://$dir/autotune.sock")
# start_daemon DB: a daemon on DB, answering before this returns.
start_daemon() {
  "$bundle/autotuned" --db "$1" --listen "unix://$dir/autotune.sock" \
    --kernels "$bundle/kernels" --worker "$bundle/autotune-worker" >>"$dir/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    "${cli[@]}" stats >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "the daemon did not answer; its log:" >&2
  tail -20 "$dir/daemon.log" >&2
  return 1
}
for run in $(seq "$runs"); do
  flags=()
  if [[ "${RETUNE:-0}" == 1 ]]; then
    ((run == 1)) && start_daemon "$dir/cache.db"
    ((run > 1)) && flags=(--retune)
  else
    stop_daemon
    start_daemon "$dir/cache-$run.db"
  fi
  start=$SECONDS
  if ! "${cli[@]}" warmup "$manifest" "${flags[@]}" >"$dir/warmup.log" 2>&1; then
    tail -20 "$dir/warmup.log"
    exit 1
  fi
  echo "run $run (${flags[*]:-cold, fresh database}): $((SECONDS - start)) s"
  "${cli[@]}" ls
done
