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
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/bundled_daemon.sh
source "$repo/bench/bundled_daemon.sh"
dir=$daemon_dir
start_daemon() { daemon_start "$1" "$dir/daemon.log"; }
for run in $(seq "$runs"); do
  flags=()
  if [[ "${RETUNE:-0}" == 1 ]]; then
    ((run == 1)) && start_daemon "$dir/cache.db"
    ((run > 1)) && flags=(--retune)
  else
    daemon_stop
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
