#!/usr/bin/env bash
# Whether a long warmup holds the daemon's and the workers' memory flat, on
# the GPU machine: the bundled daemon tunes MANIFEST cold, then RUNS-1 more
# times with --retune (every variant compiled from the cache, validated,
# screened and timed again), while the resident memory (VmRSS) of autotuned
# and of each autotune-worker is sampled every second. Prints, per process
# kind, the RSS after the first run, after the last and the peak, and the
# growth from the end of the first run to the end of the last (the first run
# pays for the one-time allocations: CUDA context, NVRTC, caches).
#
#   bash bench/run_memory_bench.sh [MANIFEST] [RUNS]   # default kernels/builtin/gla_decode.manifest 3
#
# Needs bundle/gpu from `bash tests/gpu/run.sh bundle` (AUTOTUNE_BUNDLE
# overrides it). AUTOTUNED_ARGS: more flags for autotuned (its words).
# Writes the samples to $OUT/memory.csv when OUT is set.
# Exits non-zero when a warmup fails.
set -euo pipefail
bundle=${AUTOTUNE_BUNDLE:-bundle/gpu}
manifest=${1:-$bundle/kernels/gla_decode.manifest}
runs=${2:-3}
dir=$(mktemp -d)
csv=${OUT:-$dir}/memory.csv
pid=
sampler=
cleanup() {
  [[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cli=("$bundle/autotune" --server "unix://$dir/autotune.sock")
"$bundle/autotuned" --db "$dir/cache.db" --listen "unix://$dir/autotune.sock" \
  --kernels "$bundle/kernels" --worker "$bundle/autotune-worker" ${AUTOTUNED_ARGS:-} \
  >"$dir/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  "${cli[@]}" stats >/dev/null 2>&1 && break
  sleep 0.2
done

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# One line a second: seconds, run, daemon RSS, then the workers' RSS
# (compile workers summed, profile workers summed), in KiB.
echo "seconds,run,daemon_kb,compile_workers_kb,profile_workers_kb" >"$csv"
echo 0 >"$dir/run"
(
  start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    compile=0 profile=0
    for child in $(pgrep -P "$pid" || true); do
      args=$(tr '\0' ' ' <"/proc/$child/cmdline" 2>/dev/null || true)
      kb=$(rss_kb "$child")
      if [[ "$args" == *" profile"* ]]; then profile=$((profile + kb)); else compile=$((compile + kb)); fi
    done
    echo "$((SECONDS - start)),$(cat "$dir/run"),$(rss_kb "$pid"),$compile,$profile" >>"$csv"
    sleep 1
  done
) &
sampler=$!

variants=0
for run in $(seq "$runs"); do
  echo "$run" >"$dir/run"
  flags=()
  ((run > 1)) && flags=(--retune)
  start=$SECONDS
  if ! "${cli[@]}" warmup "$manifest" "${flags[@]}" --json >"$dir/job.json" 2>"$dir/warmup.err"; then
    tail -20 "$dir/warmup.err"
    exit 1
  fi
  n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"]["variants"])' "$dir/job.json" 2>/dev/null || echo "?")
  [[ "$n" =~ ^[0-9]+$ ]] && variants=$((variants + n))
  echo "run $run (${flags[*]:-cold}): $((SECONDS - start)) s, $n variants"
  sleep 2  # a sample after the run ends
done
kill "$sampler" 2>/dev/null || true
sampler=

python3 - "$csv" "$runs" "$variants" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs = int(sys.argv[2])
def last_of(run, key):
    values = [int(r[key]) for r in rows if int(r["run"]) == run and int(r[key]) > 0]
    return values[-1] if values else 0
print(f"{len(rows)} samples over {runs} runs, {sys.argv[3]} variants in all")
print(f"{'process':<18} {'after run 1':>12} {'after run %d' % runs:>12} {'peak':>10} {'growth':>10}")
for key, name in (("daemon_kb", "autotuned"), ("compile_workers_kb", "compile workers"),
                  ("profile_workers_kb", "profile worker")):
    first, final = last_of(1, key), last_of(runs, key)
    peak = max(int(r[key]) for r in rows)
    growth = f"{(final - first) / first * 100:+.1f} %" if first else "-"
    print(f"{name:<18} {first / 1024:>9.1f} MiB {final / 1024:>9.1f} MiB {peak / 1024:>7.1f} MiB {growth:>10}")
PY
