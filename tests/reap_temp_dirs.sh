#!/usr/bin/env bash
# Removes the test folders (base/temp_dir.h) of test processes that are
# gone: a test killed by a timeout or a signal cannot remove its own.
# Run by deploy/test.sh once ctest has ended; prints how many it removed.
set -euo pipefail
parent=${TEST_TMPDIR:-${TMPDIR:-/tmp}}
removed=0
shopt -s nullglob
for dir in "$parent"/autotune-test-*-*; do
  pid=${dir##*/autotune-test-}
  pid=${pid%%-*}
  [[ "$pid" =~ ^[0-9]+$ ]] || continue
  if ! kill -0 "$pid" 2>/dev/null && [[ ! -e /proc/$pid ]]; then
    rm -rf -- "$dir"
    removed=$((removed + 1))
  fi
done
echo "reap_temp_dirs: removed $removed folder(s) of test processes that are gone"
