#!/usr/bin/env bash
# Checks that every header of the checkout (git ls-files '*.h') guards itself
# with the macro its path names: kernels/gpu/nvml.h is guarded by
# AUTOTUNE_KERNELS_GPU_NVML_H_ (#ifndef, #define, and the closing #endif's
# comment), so that a header moved or copied keeps no stale or clashing
# guard. Prints one line per header that does not and exits 1 when there is
# one; `--fix` rewrites them instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fix=0
[[ "${1:-}" == --fix ]] && fix=1
bad=0
checked=0
while IFS= read -r header; do
  checked=$((checked + 1))
  want=AUTOTUNE_$(tr 'a-z/.-' 'A-Z___' <<<"$header")_
  have=$(sed -n 's/^#ifndef \([A-Z0-9_]*_H_\)$/\1/p' "$header" | head -1)
  if [[ "$have" == "$want" ]] && grep -qx "#define $want" "$header" &&
    grep -qx "#endif  // $want" "$header"; then
    continue
  fi
  if ((fix)) && [[ -n "$have" ]]; then
    sed -i "s/^#ifndef $have\$/#ifndef $want/; s/^#define $have\$/#define $want/; s|^#endif  // $have\$|#endif  // $want|" "$header"
    echo "header-guards: fixed $header ($have -> $want)"
    continue
  fi
  echo "header-guards: $header is guarded by '${have:-nothing}', not $want" \
    "(#ifndef, #define and '#endif  // $want')"
  bad=$((bad + 1))
done < <(git ls-files '*.h')
if ((bad > 0)); then
  echo "header-guards: $bad of $checked headers do not follow their path (.ci/check-header-guards.sh --fix)"
  exit 1
fi
echo "header-guards: all $checked headers follow their path"
