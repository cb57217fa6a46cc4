#!/usr/bin/env bash
# Checks that every tracked C++ and CUDA source (*.h, *.cc, *.cu) is laid out
# as clang-format-14 lays it out under the committed .clang-format. Changes
# nothing. Prints the files that differ, one a line, and exits 1 when any
# does, 0 when none does, 2 when it cannot check. Other clang-format
# versions lay some constructs out differently, so the version is pinned;
# $CLANG_FORMAT overrides the binary. Fix a file with: clang-format-14 -i FILE
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check-format: $clang_format not found (deploy/install-deps.sh installs it)" >&2
  exit 2
fi

# Fuzz seeds are inputs, laid out as the cases they stand for: not checked.
mapfile -d '' files < <(git ls-files -z -- '*.h' '*.cc' '*.cu' \
  ':!:tests/reliability/fuzz/corpus/**')
if ((${#files[@]} == 0)); then
  echo "check-format: no tracked *.h, *.cc or *.cu files" >&2
  exit 2
fi

# One process for all files: it reports every file (one error each with
# --ferror-limit=1) and fails if any differs.
status=0
output=$("$clang_format" --dry-run -Werror --ferror-limit=1 "${files[@]}" 2>&1) || status=$?
if ((status == 0)); then
  echo "check-format: all ${#files[@]} files match clang-format"
  exit 0
fi

pattern='^([^:]+):[0-9]+:[0-9]+: error: code should be clang-formatted.*'
mapfile -t drifting < <(sed -n -E "s/$pattern/\\1/p" <<<"$output" | sort -u)
if ((${#drifting[@]} == 0)); then
  # Not a layout difference: a bad .clang-format, an unreadable file...
  printf '%s\n' "$output" >&2
  echo "check-format: $clang_format failed with status $status" >&2
  exit 2
fi
printf '%s\n' "${drifting[@]}"
echo "check-format: ${#drifting[@]} of ${#files[@]} files differ from clang-format" \
  "(fix one with: $clang_format -i FILE)" >&2
exit 1
