#!/usr/bin/env bash
# Removes the test folders (base/temp_dir.h) of test processes that are
# gone: a test killed by a timeout or a signal cannot remove its own.
# Run by .ci/test.sh once ctest has ended; prints how many it removed.
set -euo pipefail
parent=${TEST_TMPDIR:-${TMPDIR:-/tmp}}
removed=0
shopt -s nullglob
for dir in "$parent"/autotune-test-*-*; do
  pid=${dir##*/autotune-test-}
  pid=${pid%%-*}
  [[ "$pid" =~ ^[0-9]+$ ]] || continue
  if ! kill -0 "$pid" 2>/dev/null && [[ ! -e /proc/$pid ]]; then
    # A test may have left a folder read-only (tests/reliability/resource_test.cc).
    chmod -R u+rwx -- "$dir" 2>/dev/null || true
    if rm -rf -- "$dir" 2>/dev/null; then
      removed=$((removed + 1))
    else
      echo "reap_temp_dirs: could not remove $dir" >&2
    fi
  fi
done
echo "reap_temp_dirs: removed $removed folder(s) of test processes that are gone"
