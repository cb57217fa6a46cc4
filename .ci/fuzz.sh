#!/usr/bin/env bash
# Builds the fuzz targets of tests/reliability/fuzz with clang-14, under
# AddressSanitizer and UndefinedBehaviorSanitizer, in build-asan/ (the tree
# .ci/sanitize.sh tests in, configured by it), and runs each for
# FUZZ_SECONDS (default 20) starting from its checked-in seeds, FUZZ_JOBS
# (default: one per core) at a time. It prints one line per target
# (executions, corpus, result) and exits 1 when one crashed: the input is
# kept in build-asan/crashes/<name>/. Once fixed, copy it into
# tests/reliability/fuzz/regressions/<name>/, where every build replays it
# (ctest fuzz_<name>_replay).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-$(nproc)}

SANITIZE_STEP=build .ci/sanitize.sh address

seeds=tests/reliability/fuzz/corpus
# One target: runs it, then writes its line to build-asan/fuzz_<name>.result
# and its exit status to build-asan/fuzz_<name>.rc.
fuzz_one() {
  local dir=$1 name fuzzer corpus crashes log scratch rc=0 runs result more=()
  name=$(basename "$dir")
  # corpus/<name>.seeds: more seed files, relative to the repository root.
  [[ -f $seeds/$name.seeds ]] && mapfile -t more < <(grep -v -e '^#' -e '^$' "$seeds/$name.seeds")
  fuzzer=build-asan/tests/reliability/fuzz/fuzz_$name
  corpus=build-asan/corpus/$name
  crashes=build-asan/crashes/$name
  log=build-asan/fuzz_$name.log
  mkdir -p "$corpus" "$crashes"
  # libFuzzer takes folders only: the listed seed files start the corpus.
  ((${#more[@]} == 0)) || cp -- "${more[@]}" "$corpus"/
  # The targets that write their input to a file do it under TMPDIR
  # (fuzz_file.h): a folder of this run's, removed after it.
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/autotune-fuzz-run.XXXXXX")
  # New inputs go to the first directory (build-asan/corpus), never into
  # the checked-in seeds.
  TMPDIR=$scratch ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$corpus" "$dir" > "$log" 2>&1 || rc=$?
  rm -rf "$scratch"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if ((rc == 0)); then
    result=ok
  else
    result="CRASHED (exit $rc): $(ls "$crashes" | head -1); see $log"
  fi
  printf '%-16s %12s %8s  %s\n' "$name" "${runs:-?}" "$(ls "$corpus" | wc -l)" "$result" \
    > "build-asan/fuzz_$name.result"
  echo "$rc" > "build-asan/fuzz_$name.rc"
}
export -f fuzz_one
export seconds seeds

rm -f build-asan/fuzz_*.result build-asan/fuzz_*.rc
printf '%s\0' "$seeds"/*/ | xargs -0 -n1 -P"$jobs" bash -c 'fuzz_one "$@"' _

status=0
printf '%-16s %12s %8s  %s\n' target executions corpus result
for dir in "$seeds"/*/; do
  name=$(basename "$dir")
  cat "build-asan/fuzz_$name.result"
  if [[ "$(cat "build-asan/fuzz_$name.rc")" != 0 ]]; then
    status=1
    tail -n 40 "build-asan/fuzz_$name.log"
  fi
done
exit "$status"
