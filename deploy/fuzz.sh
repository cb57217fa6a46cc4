#!/usr/bin/env bash
# Builds the fuzz targets of tests/reliability/fuzz with clang-14, under
# AddressSanitizer and UndefinedBehaviorSanitizer, in build-asan/ (the tree
# deploy/sanitize.sh tests in), and runs
# each for FUZZ_SECONDS (default 30) starting from its checked-in seeds. It
# prints one line per target (executions, corpus, result) and exits 1 when
# one crashed: the input is kept in build-asan/crashes/<name>/. Once fixed,
# copy it into tests/reliability/fuzz/regressions/<name>/, where every build
# replays it (ctest fuzz_<name>_replay).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${FUZZ_SECONDS:-30}

mkdir -p build-asan
CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAUTOTUNE_FUZZ=ON > build-asan/configure.log
cmake --build build-asan -j"$(nproc)" --target fuzzers

seeds=tests/reliability/fuzz/corpus
status=0
printf '%-16s %12s %8s  %s\n' target executions corpus result
for dir in "$seeds"/*/; do
  name=$(basename "$dir")
  fuzzer=build-asan/tests/reliability/fuzz/fuzz_$name
  corpus=build-asan/corpus/$name
  crashes=build-asan/crashes/$name
  mkdir -p "$corpus" "$crashes"
  log=build-asan/fuzz_$name.log
  rc=0
  # New inputs go to the first directory (build-asan/corpus), never into
  # the checked-in seeds.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$corpus" "$dir" > "$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if ((rc == 0)); then
    result=ok
  else
    result="CRASHED (exit $rc): $(ls "$crashes" | head -1); see $log"
    status=1
    tail -n 40 "$log"
  fi
  printf '%-16s %12s %8s  %s\n' "$name" "${runs:-?}" "$(ls "$corpus" | wc -l)" "$result"
done
exit "$status"
