#!/usr/bin/env bash
# Installs what is missing, builds everything in build/ (Release,
# warnings are errors for the project's targets), checks the lock
# annotations with clang (deploy/check-thread-safety.sh) and the layout of
# the sources (deploy/check-format.sh), runs every test; then every test
# again under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer
# (deploy/sanitize.sh), the tests of the concurrent parts under
# ThreadSanitizer (deploy/sanitize.sh thread), and the fuzz targets for a
# bounded time each (deploy/fuzz.sh). The tests run
# even when a check fails, so one run shows everything; the exit status is
# ctest's, or 1 when a check failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"

failed=()
for check in check-thread-safety check-format; do
  start=$SECONDS
  deploy/$check.sh || failed+=("$check")
  echo "test.sh: $check took $((SECONDS - start)) s"
done
if ((${#failed[@]} > 0)); then
  echo "test.sh: failed: ${failed[*]} (see above); running the tests, then exiting 1"
fi

status=0
ctest --test-dir build --output-on-failure -j2 || status=$?
# A test killed by a timeout cannot remove its folders: remove them now.
tests/reap_temp_dirs.sh || true

# Every test again under ASan + UBSan + LSan, the concurrent parts under
# TSan, then the fuzz targets (in the ASan tree) each for a bounded time.
for step in "sanitize.sh address" "sanitize.sh thread" fuzz.sh; do
  start=$SECONDS
  # shellcheck disable=SC2086  # the step's words: script and mode
  deploy/$step || failed+=("$step")
  echo "test.sh: $step took $((SECONDS - start)) s"
done
if ((status == 0 && ${#failed[@]} > 0)); then status=1; fi
exit "$status"
