#!/usr/bin/env bash
# Runs the profile benchmark on the GPU machine from a bundle made by
# `bash tests/gpu/run.sh bundle` (which copies autotune-bench-profile,
# autotune-worker, their libraries and kernels/ into bundle/gpu/), then times
# the exported variants again with CuPy, and prints the two short tables last.
#
#   bash bench/run_profile_bench.sh [BUNDLE_DIR] [OUT_DIR]
#
# BUNDLE_DIR: default $AUTOTUNE_BUNDLE, else bundle/gpu. OUT_DIR: default
# $OUT, else BUNDLE_DIR/out. Written there: profile_bench.log and
# profile_bench.json (autotune-bench-profile), fidelity/ (the exported cubins,
# fidelity.json and fidelity_results.json), fidelity.log.
#
# Time: BENCH_TIMEOUT (seconds this script may take; tests/gpu/run.sh sets
# it, default 420) decides the size. 90 s of it are kept for the CuPy side;
# with 240 s or more, 16 variants of each of the 8 default problems, 3 runs,
# 0.1 s timing budget per variant: 416 variant timings, estimated at 1.5 to
# 2 minutes on an H200 with the CuPy side; with less, 8 variants (from
# 180 s), 4 with a 0.05 s budget (from 130 s), 2 (from 70 s), else nothing.
# autotune-bench-profile skips its last runs when the time left would not
# hold them. Extra arguments for autotune-bench-profile go in BENCH_FLAGS
# (word-split; a flag given again there wins).
#
# Exit status: 0 when both programs ran (a missed fidelity goal is a result,
# not a failure) or when there was too little time to start (said so); 1
# when the benchmark or the fidelity script failed.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${1:-${AUTOTUNE_BUNDLE:-bundle/gpu}}
case "$bundle" in /*) ;; *) bundle=$PWD/$bundle ;; esac
out=${2:-${OUT:-$bundle/out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
budget=${BENCH_TIMEOUT:-420}
started=$SECONDS

bench=$bundle/autotune-bench-profile
if [ ! -x "$bench" ]; then
  echo "error: no $bench; build the bundle with 'bash tests/gpu/run.sh bundle'" >&2
  exit 1
fi
case ":${LD_LIBRARY_PATH:-}:" in
  *":$bundle/lib:"*) ;;
  *) export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
esac
# CuPy compiles its own small kernels once; keep them out of $HOME and $OUT.
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-${TMPDIR:-/tmp}/autotune-cupy-cache}

# The size for the time there is; the CuPy side (import, its own kernels,
# up to 40 variants) keeps fidelity_reserve seconds of it.
fidelity_reserve=90
if [ "$budget" -ge 240 ]; then
  size=(--max-variants 16 --timing-budget 0.1)
elif [ "$budget" -ge 180 ]; then
  size=(--max-variants 8 --timing-budget 0.1)
elif [ "$budget" -ge 130 ]; then
  size=(--max-variants 4 --timing-budget 0.05)
elif [ "$budget" -ge 70 ]; then
  size=(--max-variants 2 --timing-budget 0.05)
  fidelity_reserve=40
else
  echo "profile bench: not run, BENCH_TIMEOUT=$budget s is below the 70 s it needs"
  exit 0
fi
bench_budget=$((budget - fidelity_reserve))
# shellcheck disable=SC2206
extra=(${BENCH_FLAGS:-})

gpu_state() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
      --format=csv,noheader 2>&1 | head -n 1
  else
    echo "nvidia-smi not found"
  fi
}

echo "profile bench: bundle $bundle, out $out, BENCH_TIMEOUT ${budget} s, ${size[*]} ${extra[*]}"
echo "gpu before: $(gpu_state)"
bench_log=$out/profile_bench.log
timeout -k 10 "$bench_budget" "$bench" \
  --kernels-dir "$bundle/kernels" --worker "$bundle/autotune-worker" \
  "${size[@]}" --max-seconds $((bench_budget * 3 / 4)) \
  --out "$out/fidelity" --json "$out/profile_bench.json" "${extra[@]}" 2>&1 | tee "$bench_log"
bench_rc=${PIPESTATUS[0]}
echo "gpu after bench: $(gpu_state)"

fidelity_rc=0
fidelity_log=$out/fidelity.log
if [ -f "$out/fidelity/fidelity.json" ]; then
  left=$((budget - (SECONDS - started) - 5))
  if [ "$left" -lt 20 ]; then
    echo "fidelity: not run, ${left} s left" | tee "$fidelity_log"
    fidelity_rc=1
  else
    # The comparison: each variant timed by CuPy in a process of its own.
    # Then, for the record, all of them one after another in one CuPy
    # process, which was seen to add about 0.35 us to every launch after
    # the first variant (only its overall line is shown).
    timeout -k 10 "$((left * 2 / 3))" python3 -u "$repo/bench/profile_fidelity.py" \
      "$out/fidelity/fidelity.json" --fresh --max-seconds $((left * 2 / 3 - 15)) 2>&1 |
      tee "$fidelity_log"
    fidelity_rc=${PIPESTATUS[0]}
    left=$((budget - (SECONDS - started) - 5))
    if [ "$left" -gt 20 ]; then
      timeout -k 10 "$left" python3 -u "$repo/bench/profile_fidelity.py" \
        "$out/fidelity/fidelity.json" --max-seconds $((left - 10)) \
        --results "$out/fidelity/fidelity_results_one_process.json" \
        > "$out/fidelity_one_process.log" 2>&1 || true
    fi
  fi
else
  echo "fidelity: not run, the benchmark exported nothing" | tee "$fidelity_log"
  fidelity_rc=1
fi

echo
echo "=================== profile benchmark ==================="
if grep -q '^Profile bench summary' "$bench_log"; then
  sed -n '/^Profile bench summary/,$p' "$bench_log"
else
  echo "autotune-bench-profile gave no summary (exit $bench_rc); its last lines:"
  tail -n 8 "$bench_log"
fi
if grep -q '^Fidelity summary' "$fidelity_log"; then
  sed -n '/^Fidelity summary/,$p' "$fidelity_log"
else
  echo "profile_fidelity.py gave no summary (exit $fidelity_rc); its last lines:"
  tail -n 8 "$fidelity_log"
fi
if [ -f "$out/fidelity_one_process.log" ]; then
  echo "CuPy timing every variant in one process: $(grep '^overall' "$out/fidelity_one_process.log" || echo 'no summary')"
fi
echo "exit: bench $bench_rc, fidelity $fidelity_rc; $((SECONDS - started)) s; logs in $out"
[ "$bench_rc" -eq 0 ] && [ "$fidelity_rc" -eq 0 ]
