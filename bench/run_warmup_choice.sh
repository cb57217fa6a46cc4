#!/usr/bin/env bash
# How stable the daemon's choice is on the GPU machine: the bundled daemon
# tunes a manifest RUNS times (the first run cold, the others with
# --retune) on a fresh database and prints each run's wall time and entries
# (config, median, margin, or tie and how many configs tied).
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
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$bundle/autotuned" --db "$dir/cache.db" --listen "unix://$dir/autotune.sock" \
  --kernels "$bundle/kernels" --worker "$bundle/autotune-worker" >"$dir/daemon.log" 2>&1 &
pid=$!
cli=("$bundle/autotune" --server "unix://$dir/autotune.sock")
for _ in $(seq 100); do
  "${cli[@]}" stats >/dev/null 2>&1 && break
  sleep 0.2
done
for run in $(seq "$runs"); do
  flags=()
  if ((run > 1)); then flags=(--retune); fi
  start=$SECONDS
  if ! "${cli[@]}" warmup "$manifest" "${flags[@]}" >"$dir/warmup.log" 2>&1; then
    tail -20 "$dir/warmup.log"
    exit 1
  fi
  echo "run $run ($(((run > 1)) && echo retune || echo cold)): $((SECONDS - start)) s"
  "${cli[@]}" ls
done
