#!/usr/bin/env bash
# Builds with clang-14 under a sanitizer and runs the tests there.
#
#   deploy/sanitize.sh [address]  AddressSanitizer + UndefinedBehaviorSanitizer
#                                 (LeakSanitizer on) in build-asan/: every
#                                 test. The same tree holds the fuzz targets
#                                 (deploy/fuzz.sh). The 100-kill crash test
#                                 kills 20 times here (CRASH_TEST_KILLS).
#   deploy/sanitize.sh thread     ThreadSanitizer in build-tsan/: the tests of
#                                 the concurrent parts that run without an
#                                 in-process gRPC server (the store under
#                                 concurrent readers and writers, the lookup
#                                 resolver, the compile and profile pools,
#                                 the job runner (two GPUs and two
#                                 runners sharing leases among its tests),
#                                 tune-on-miss, the local
#                                 cache). Debian's Abseil is not built with
#                                 TSan: tests/tsan/absl_sync_annotations.cc
#                                 makes its locks visible; gRPC's are not,
#                                 hence the choice of tests.
#
# The daemons, workers and commands the tests start are sanitized builds
# too, so a report in any of them fails its test. Each sanitizer stops the
# program at its first report. Reports in code that is not ours are
# suppressed in deploy/sanitizer-suppressions/, each with its reason.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=${1:-address}
suppressions=$PWD/deploy/sanitizer-suppressions
case "$mode" in
  address)
    dir=build-asan
    configure=(-DAUTOTUNE_FUZZ=ON)
    targets=(all)
    # downstream_find_package is left out: a project built without the
    # sanitizer cannot link archives built with it.
    select=(-E '^downstream_find_package$')
    ;;
  thread)
    dir=build-tsan
    configure=(-DAUTOTUNE_SANITIZE=thread)
    targets=(cache_store_test cache_store_concurrency_test service_lookup_resolver_test
      service_compile_pool_test service_profile_pool_test service_compile_phase_test
      service_job_runner_test service_tune_on_miss_test client_test autotune-worker
      fake-profile-worker)
    select=(-R '^(cache\.Store|LookupResolver|CompilePool|ProfilePool|CompilePhase|ScreenJob|TwoGpu|TuneOnMiss|client\.LocalCache)')
    ;;
  *)
    echo "usage: deploy/sanitize.sh [address|thread]" >&2
    exit 2
    ;;
esac

mkdir -p "$dir"
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "${configure[@]}" > "$dir/configure.log"
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.txt:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$suppressions/tsan.txt"
export CRASH_TEST_KILLS=${CRASH_TEST_KILLS:-20}
ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600 -LE gpu "${select[@]}"
