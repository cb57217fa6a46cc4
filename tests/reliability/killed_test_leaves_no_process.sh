#!/usr/bin/env bash
# A test process killed in the middle (as a ctest timeout or a crash ends
# it) takes the daemon it started with it (tests/support/process.h). Runs one
# end-to-end test whose daemon lives for seconds, SIGKILLs the test once its
# daemon is up, and fails when an autotuned started from the test's folder
# is still running a second later. The test's folder is left (nothing of
# the killed process can remove it); tests/reap_temp_dirs.sh must remove it.
#
#   killed_test_leaves_no_process.sh E2E_OPERATIONS_TEST
set -euo pipefail
test_binary=$1
tmp=$(mktemp -d)
trap 'pkill -KILL -f "autotuned --db $tmp/" 2>/dev/null || true; rm -rf "$tmp"' EXIT
TEST_TMPDIR=$tmp "$test_binary" --gtest_filter='*HealthIsNotServing*' >"$tmp/test.log" 2>&1 &
test_pid=$!
for _ in $(seq 200); do
  pgrep -f "autotuned --db $tmp/" >/dev/null && break
  sleep 0.05
done
if ! pgrep -f "autotuned --db $tmp/" >/dev/null; then
  echo "the test's daemon never started; its output:" >&2
  cat "$tmp/test.log" >&2
  exit 1
fi
kill -KILL "$test_pid"
wait "$test_pid" 2>/dev/null || true
sleep 1
if pgrep -fa "autotuned --db $tmp/"; then
  echo "FAIL: the daemon above outlived the test process that started it" >&2
  exit 1
fi
left=$(find "$tmp" -maxdepth 1 -name "autotune-test-$test_pid-*" | wc -l)
TEST_TMPDIR=$tmp "$(dirname "${BASH_SOURCE[0]}")/../reap_temp_dirs.sh"
if find "$tmp" -maxdepth 1 -name 'autotune-test-*' | grep -q .; then
  echo "FAIL: reap_temp_dirs.sh left the killed test's folders:" >&2
  find "$tmp" -maxdepth 1 -name 'autotune-test-*' >&2
  exit 1
fi
if ((left == 0)); then
  echo "FAIL: the killed test left no folder named for its pid $test_pid" >&2
  exit 1
fi
echo "ok: the daemon ended with the killed test, and its $left folder(s) were reaped"
