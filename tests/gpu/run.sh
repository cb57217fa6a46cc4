#!/usr/bin/env bash
# The GPU suite (tests/gpu) and the GPU benchmarks: built and bundled here,
# run on the GPU machine in one command.
#
#   bash tests/gpu/run.sh bundle   # build machine, from anywhere in the checkout
#   bash tests/gpu/run.sh run      # GPU machine, with bundle/gpu/ beside the checkout's files
#
# bundle: configures (once) and builds Release in $BUILD_DIR (default
#   build-gpu/) only the targets needed, then fills bundle/gpu/ (ignored by
#   git) with autotuned, autotune, autotune-worker, gpu_profile_test, and
#   e2e_gpu_test, autotune-bench-profile, autotune-bench-ab, autotune-bench-startup and
#   gla-decode-server (the client example) when those targets exist and
#   build (a warning says so when one does not; BUNDLE_OPTIONAL, a
#   space-separated list, names the optional ones to build instead of all);
#   lib/ with the shared
#   libraries they need that a stock Ubuntu 24.04 + CUDA 13 machine lacks
#   (tests/gpu/bundle_libs.sh says which); kernels/ (built-in families and
#   manifests), faults/ (tests/faults/) and BUILD_INFO (commit, changed
#   files, date). Fails when the bundle and the checkout's tracked files
#   together pass 62 MiB: 64 MiB is what can travel with a command, the
#   working tree included.
#
# run: sets LD_LIBRARY_PATH to bundle/gpu/lib and /usr/local/cuda/lib64 and
#   points the tests at the bundle (AUTOTUNE_WORKER, AUTOTUNED, AUTOTUNE_CLI,
#   AUTOTUNE_KERNELS_DIR, AUTOTUNE_FAULTS_DIR), prints one line per GPU from
#   nvidia-smi, runs gpu_profile_test, then e2e_gpu_test when bundled (the
#   full output goes to gpu_tests.log/.json and e2e_gpu_tests.log/.json under
#   $OUT when set, else under bundle/gpu/out/; the console gets failures,
#   skips and summaries), then the benchmark hook, and prints a summary
#   table last. Where
#   nvidia-smi sees a GPU, the suite must be able to use it
#   (AUTOTUNE_REQUIRE_GPU=1): a test that cannot start the profile pool there
#   fails instead of skipping. Exits 1 when a test failed, the suite did not
#   finish, or the benchmark script failed.
#
# Benchmark hook: when $BENCH_SCRIPT (default bench/run_profile_bench.sh)
#   exists, `run` runs it with bash after the suite, with the words of
#   $BENCH_ARGS as its arguments, and with AUTOTUNE_BUNDLE (absolute path of bundle/gpu),
#   OUT (the output folder), LD_LIBRARY_PATH and BENCH_TIMEOUT (seconds it
#   has) in its environment; its output goes to bench.log there, its last 40
#   lines to the console, and its exit status into the summary. Where
#   nvidia-smi sees no GPU it is left out unless RUN_BENCH=1.
#
# Environment: BUILD_DIR, JOBS (bundle; default build-gpu, 2). For run:
#   RUN_BUDGET (seconds for the whole run, default 570: a command on the GPU
#   machine may take 600), GPU_TEST_TIMEOUT (gpu_profile_test, default 360),
#   E2E_TEST_TIMEOUT (e2e_gpu_test, default 150),
#   AUTOTUNE_GPU_BUILTIN_BUDGET_S (the built-in validation, default 150),
#   GTEST_FILTER (read by the test binaries themselves), SKIP_TESTS=1 (the
#   benchmark hook alone), BENCH_SCRIPT and BENCH_ARGS (above).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
# shellcheck source=tests/gpu/bundle_libs.sh
source tests/gpu/bundle_libs.sh

bundle=bundle/gpu
# What may travel with a command, the working tree included (64 MiB less a
# margin for untracked files).
max_total_mb=62
test_binary=gpu_profile_test
# The end-to-end GPU test (daemon, client, workers), run when it is bundled.
e2e_binary=e2e_gpu_test

usage() {
  echo "usage: bash tests/gpu/run.sh bundle|run" >&2
  exit 2
}

# The file a target built under the build folder.
# The newest executable named $2 under build tree $1: a tree that has been
# built before a target moved folders still holds the old file.
built_file() {
  find "$1" -path '*/CMakeFiles' -prune -o -type f -name "$2" -perm -u+x -printf '%T@ %p\n' |
    sort -nr | head -1 | cut -d' ' -f2-
}

make_bundle() {
  local build_dir=${BUILD_DIR:-build-gpu}
  local jobs=${JOBS:-2}
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
  fi
  local targets=(autotuned autotune autotune-worker "$test_binary")
  echo "building ${targets[*]} in $build_dir"
  cmake --build "$build_dir" -j"$jobs" --target "${targets[@]}"
  # The GPU benchmark and the end-to-end GPU test, when they are part of the
  # build. The bundle goes without one that does not build, saying so.
  local known optional
  known=$(cmake --build "$build_dir" --target help)
  local optionals=(autotune-bench-profile autotune-bench-ab autotune-bench-startup "$e2e_binary" gla-decode-server
    gemm-server)
  if [ -n "${BUNDLE_OPTIONAL+x}" ]; then
    read -r -a optionals <<<"$BUNDLE_OPTIONAL"
  fi
  for optional in "${optionals[@]}"; do
    grep -qw -- "$optional" <<<"$known" || continue
    if cmake --build "$build_dir" -j"$jobs" --target "$optional"; then
      targets+=("$optional")
    else
      echo "WARNING: $optional did not build; the bundle goes without it" >&2
    fi
  done

  rm -rf "$bundle"
  mkdir -p "$bundle/lib" "$bundle/kernels" "$bundle/faults"
  local binaries=() target path
  for target in "${targets[@]}"; do
    path=$(built_file "$build_dir" "$target")
    if [ -z "$path" ]; then
      echo "error: $target was not built in $build_dir" >&2
      exit 1
    fi
    # Without the symbol tables: a fifth of the size, which the command's
    # 64 MiB needs.
    strip -o "$bundle/$target" "$path"
    binaries+=("$bundle/$target")
  done
  bundle_copy_libs "$bundle/lib" "${binaries[@]}"
  cp kernels/builtin/*.cu kernels/builtin/*.textproto kernels/builtin/*.manifest "$bundle/kernels/"
  cp tests/faults/*.cu tests/faults/*.textproto "$bundle/faults/"
  {
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "changed files $(git status --porcelain 2>/dev/null | wc -l)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) in $build_dir"
    echo "binaries ${targets[*]}"
  } >"$bundle/BUILD_INFO"
  # The tracked files travel with the bundle.
  local tree_kb
  tree_kb=$(git ls-files -z 2>/dev/null | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  bundle_check_size "$bundle" $((max_total_mb - ${tree_kb:-0} / 1024))
  echo
  echo "Run on the GPU machine from the repository root (carry $bundle):"
  echo "  bash tests/gpu/run.sh run"
}

# Counts from GoogleTest's closing lines in the log: "[==========] 14 tests
# from 5 test suites ran.", "[  PASSED  ] 13 tests.", "[  SKIPPED ] 1 test,
# listed below:", "[  FAILED  ] 1 test, listed below:".
gtest_count() {
  local pattern=$1 log=$2
  sed -n -E "s/^\[ *$pattern *\] ([0-9]+) tests?[,. ].*/\1/p" "$log" | tail -n 1
}

run_suite() {
  if [ ! -x "$bundle/$test_binary" ]; then
    echo "error: no $bundle/$test_binary; build it with 'bash tests/gpu/run.sh bundle' and carry $bundle" >&2
    exit 1
  fi
  local started=$SECONDS
  local run_budget=${RUN_BUDGET:-570}
  local out=${OUT:-$bundle/out}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local root
  root=$(cd "$bundle" && pwd)
  export LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export AUTOTUNE_WORKER="$root/autotune-worker"
  export AUTOTUNED="$root/autotuned"
  export AUTOTUNE_CLI="$root/autotune"
  export AUTOTUNE_KERNELS_DIR="$root/kernels"
  export AUTOTUNE_FAULTS_DIR="$root/faults"
  export AUTOTUNE_GPU_BUILTIN_BUDGET_S=${AUTOTUNE_GPU_BUILTIN_BUDGET_S:-150}

  echo "bundle: $(tr '\n' ';' <"$root/BUILD_INFO")"
  local gpus=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,temperature.gpu,clocks.sm,utilization.gpu \
      --format=csv,noheader 2>&1 || true)
  fi
  # "0, NVIDIA H200, 580.95.05, 143771 MiB, ..." for each GPU it can use.
  if grep -qE '^[0-9]+, ' <<<"$gpus"; then
    export AUTOTUNE_REQUIRE_GPU=1
  else
    gpus="no GPU: ${gpus:-nvidia-smi not found}"
  fi
  echo "nvidia-smi: $gpus"
  if ldd "$root"/*test "$root/autotune-worker" | grep 'not found'; then
    echo "error: the bundle lacks libraries this machine does not have (above)" >&2
    exit 1
  fi

  local failed_any=0 report=()
  if [ "${SKIP_TESTS:-0}" != 1 ]; then
    run_gtest "$root" "$out" "$test_binary" gpu_tests "${GPU_TEST_TIMEOUT:-360}"
    if [ -x "$root/$e2e_binary" ]; then
      run_gtest "$root" "$out" "$e2e_binary" e2e_gpu_tests "${E2E_TEST_TIMEOUT:-150}"
    fi
  fi

  local bench_script=${BENCH_SCRIPT:-bench/run_profile_bench.sh}
  local bench_args=()
  read -r -a bench_args <<<"${BENCH_ARGS:-}"
  local bench_line="$bench_script: not present"
  if [ -f "$bench_script" ]; then
    local left=$((run_budget - (SECONDS - started) - 10))
    if [ "${AUTOTUNE_REQUIRE_GPU:-0}" != 1 ] && [ "${RUN_BENCH:-0}" != 1 ]; then
      bench_line="$bench_script: not run, no GPU (RUN_BENCH=1 runs it anyway)"
    elif [ "$left" -lt 30 ]; then
      bench_line="$bench_script: not run, only ${left} s left of RUN_BUDGET=$run_budget"
    else
      echo "running $bench_script ${bench_args[*]} (up to $left s; output: $out/bench.log)"
      local bench_started=$SECONDS bench_rc
      set +e
      AUTOTUNE_BUNDLE="$root" OUT="$out" BENCH_TIMEOUT="$left" \
        timeout -k 15 "$left" bash "$bench_script" "${bench_args[@]}" >"$out/bench.log" 2>&1
      bench_rc=$?
      set -e
      tail -n "${BENCH_TAIL:-40}" "$out/bench.log"
      bench_line="$bench_script ${bench_args[*]}: exit $bench_rc, $((SECONDS - bench_started)) s"
      [ "$bench_rc" -eq 0 ] || failed_any=1
    fi
  fi

  echo
  echo "=================== GPU suite summary ==================="
  printf '%-8s %s\n' "gpu" "$gpus" "bundle" "$(head -n 1 "$root/BUILD_INFO")"
  printf '%s\n' "${report[@]}"
  printf '%-8s %s\n' "bench" "$bench_line" "wall" "$((SECONDS - started)) s" "logs" "$out"
  if [ "$failed_any" -ne 0 ]; then exit 1; fi
}

# run_gtest ROOT OUT BINARY LOG_NAME TIMEOUT: runs a GoogleTest binary of the
# bundle, its full output into OUT/LOG_NAME.log and .json, the rest of it
# (no RUN/OK lines, no progress lines) on the console; appends its lines of
# the summary to `report` and sets failed_any when it did not pass.
run_gtest() {
  local root=$1 out=$2 binary=$3 name=$4 limit=$5
  local log="$out/$name.log"
  echo "running $binary (full output: $log)"
  local started=$SECONDS rc
  set +e
  timeout -k 15 "$limit" "$root/$binary" --gtest_color=no --gtest_output="json:$out/$name.json" \
    2>&1 | tee "$log" | grep --line-buffered -v -E '^\[ +(RUN|OK) +\]|^\[gpu-progress\]'
  rc=${PIPESTATUS[0]}
  set -e
  local seconds=$((SECONDS - started))

  local total passed skipped failed line
  total=$(gtest_count '=+' "$log")
  passed=$(gtest_count PASSED "$log")
  skipped=$(gtest_count SKIPPED "$log")
  failed=$(gtest_count FAILED "$log")
  if [ -z "$total" ]; then
    line="did not finish (exit $rc$([ "$rc" -eq 124 ] && echo ": its $limit s ran out"))"
  else
    line="$total run: ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped (exit $rc)"
  fi
  report+=("$(printf '%-8s %s' "tests" "$binary: $line, $seconds s")")
  local test_name
  while read -r test_name; do
    report+=("$(printf '%-8s %s' "failed" "$test_name")")
  done < <(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" |
    sed -E 's/^\[  FAILED  \] //; s/, where GetParam\(\) = .*//; s/ \([0-9]+ ms\)$//' | sort -u)
  if [ "${skipped:-0}" -gt 0 ]; then
    report+=("$(printf '%-8s %s' "skipped" "$(grep -m 1 -E '^(no GPU|cannot start)' "$log" ||
      echo 'see the log')")")
  fi
  while IFS= read -r line; do report+=("  $line"); done < <(sed -n 's/^\[gpu-summary\] //p' "$log")
  if [ -z "$total" ] || [ "$rc" -ne 0 ] || [ "${failed:-0}" -gt 0 ]; then failed_any=1; fi
}

case "${1:-}" in
  bundle) make_bundle ;;
  run) run_suite ;;
  *) usage ;;
esac
