#!/usr/bin/env bash
# Builds everything with clang-14 under AddressSanitizer +
# UndefinedBehaviorSanitizer (LeakSanitizer on) in build-asan/ and runs every
# test there. The daemons, workers and commands the tests start are the
# sanitized builds too, so a report in any of them fails its test. Each
# sanitizer stops the program at its first report (halt_on_error,
# -fno-sanitize-recover). The same tree holds the fuzz targets
# (deploy/fuzz.sh). Leaks reported in code that is not ours would be
# suppressed in deploy/sanitizer-suppressions/lsan.txt, each with its reason.
# The 100-kill crash test runs 20 kills here (CRASH_TEST_KILLS).
#
# ThreadSanitizer is not run: Debian's Abseil is not built with it, so TSan
# cannot see the ordering absl::Mutex gives and reports every guarded
# member as a race. The locking discipline is checked statically instead
# (deploy/check-thread-safety.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=build-asan
suppressions=$PWD/deploy/sanitizer-suppressions

mkdir -p "$dir"
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAUTOTUNE_FUZZ=ON > "$dir/configure.log"
cmake --build "$dir" -j"$(nproc)"

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.txt:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export CRASH_TEST_KILLS=${CRASH_TEST_KILLS:-20}
# downstream_find_package is left out: a project built without the
# sanitizer cannot link archives built with it.
ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600 -LE gpu \
  -E '^downstream_find_package$'
