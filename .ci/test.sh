#!/usr/bin/env bash
# CI: installs what is missing, builds everything in build/ (Release, GCC,
# warnings are errors), checks the layout of the sources
# (.ci/check-format.sh) and the header guards (.ci/check-header-guards.sh)
# and runs every test; then builds build-asan/
# (clang: AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer,
# -Wthread-safety -Werror, the fuzz targets) and runs every test again there,
# the concurrent parts under ThreadSanitizer (.ci/sanitize.sh thread), and
# the fuzz targets for a bounded time each (.ci/fuzz.sh). The lock
# annotations of the units only build/ compiles (benchmarks, GPU suite,
# example) are checked by .ci/check-thread-safety.sh.
#
# Every step runs even when one before it failed, so one run shows
# everything; the last lines are a table of each step's time and result.
# The exit status is 0 when every step passed, else 1.
# CTEST_JOBS sets ctest's parallelism: by default 6 for the Release tests,
# which mostly wait on processes and sockets, not on a core (on 2 cores, -j4
# kept them busy 78% of the time: 334 s, 522 CPU-s; -j6 took 282 s), and 4
# for the sanitized trees, whose tests are busier.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# CMake takes CMAKE_GENERATOR only for a new tree; an existing one keeps its own.
command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}

names=()
results=()
times=()
# Runs one step ("name" command...), timing it.
step() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "test.sh: == $name"
  "$@" || rc=$?
  names+=("$name")
  times+=($((SECONDS - start)))
  if ((rc == 0)); then results+=(passed); else results+=("FAILED ($rc)"); fi
  echo "test.sh: $name: ${results[-1]} in ${times[-1]} s"
  return 0
}

# Linked with lld: GNU ld took 1.0 s a program here, lld 0.3 s, over about
# 110 programs.
release_build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld &&
    cmake --build build -j"$(nproc)"
}
release_tests() {
  local rc=0
  ctest --test-dir build --output-on-failure -j"${CTEST_JOBS:-6}" || rc=$?
  # A test killed by a timeout cannot remove its folders: remove them now.
  tests/reap_temp_dirs.sh || true
  return "$rc"
}

total=$SECONDS
step "dependencies" deploy/install-deps.sh
step "Release build (GCC)" release_build
step "format check" .ci/check-format.sh
step "header guards" .ci/check-header-guards.sh
step "thread-safety check of bench/, tests/gpu/, client/examples/" \
  .ci/check-thread-safety.sh build bench/ tests/gpu/ client/examples/
step "Release tests" release_tests
step "ASan+UBSan build (clang, -Wthread-safety)" env SANITIZE_STEP=build .ci/sanitize.sh address
step "ASan+UBSan tests" env SANITIZE_STEP=test .ci/sanitize.sh address
step "TSan build" env SANITIZE_STEP=build .ci/sanitize.sh thread
step "TSan tests" env SANITIZE_STEP=test .ci/sanitize.sh thread
step "fuzzing, ${FUZZ_SECONDS:-20} s a target" .ci/fuzz.sh

status=0
echo
printf 'test.sh: %-60s %8s  %s\n' step seconds result
for i in "${!names[@]}"; do
  printf 'test.sh: %-60s %8s  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
  [[ "${results[$i]}" == passed ]] || status=1
done
printf 'test.sh: %-60s %8s\n' "total" "$((SECONDS - total))"
exit "$status"
