#!/usr/bin/env bash
# Removes the test folders (base/temp_dir.h) of test processes that are
# gone: a test killed by a timeout or a signal cannot remove its own; and
# the empty compile folders of daemons the tests killed.
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
# The compile pools' working folders (autotune-compile-<pid>-XXXXXX) of
# daemons killed by the tests: empty ones only, as a daemon's pool does.
for dir in "$parent"/autotune-compile-*-*; do
  pid=${dir##*/autotune-compile-}
  pid=${pid%%-*}
  [[ "$pid" =~ ^[0-9]+$ ]] || continue
  if ! kill -0 "$pid" 2>/dev/null && [[ ! -e /proc/$pid ]] && rmdir -- "$dir" 2>/dev/null; then
    removed=$((removed + 1))
  fi
done
echo "reap_temp_dirs: removed $removed folder(s) of test processes that are gone"
