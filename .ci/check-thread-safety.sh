#!/usr/bin/env bash
# Checks the lock annotations (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED,
# ...) that GCC ignores: runs clang++-14 -fsyntax-only -Wthread-safety
# -Werror over each of the project's own translation units, with the flags
# the build gave it (build/compile_commands.json; the build directory is the
# first argument, default build/). Generated code (anything under the build
# directory, *.pb.cc) and sources outside the checkout are skipped; headers
# are checked through the units that include them. Files run in parallel,
# one clang per core. Further arguments are folders of the checkout
# ("bench/"): only the units under them are checked. .ci/test.sh checks
# this way only what no clang tree builds, since .ci/sanitize.sh's trees
# compile with -Wthread-safety -Werror themselves.
#
# Prints "thread-safety: FAIL <file>" and clang's messages for each unit with
# a warning (any warning fails, as -Werror makes it), then a summary line.
# Exits 0 when every unit is clean, 1 when any is not, 2 when it cannot run.
# $CLANGXX overrides the compiler.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd -P)
build=$(cd "${1:-build}" 2>/dev/null && pwd -P) || {
  echo "check-thread-safety: no build directory ${1:-build} (configure with cmake first)" >&2
  exit 2
}
shift || true
only=$(printf '%s\n' "$@" | jq -R . | jq -s .)
database=$build/compile_commands.json
clangxx=${CLANGXX:-clang++-14}
for tool in "$clangxx" jq; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check-thread-safety: $tool not found (deploy/install-deps.sh installs it)" >&2
    exit 2
  fi
done
if [[ ! -f "$database" ]]; then
  echo "check-thread-safety: no $database (CMAKE_EXPORT_COMPILE_COMMANDS is on: configure first)" >&2
  exit 2
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# One unit: the build's command line with GCC's compiler (and a launcher
# such as ccache) replaced by clang, its output and -c dropped. The project's
# warning flags stay: under clang they are about the same code. Flags only
# GCC knows (-Wno-restrict) would be errors without -Wno-unknown-warning-option.
check_one() {
  local index=$1 directory=$2 file=$3 command=$4
  eval "set -- $command"  # CMake writes the command shell-quoted
  [[ "$(basename "$1")" == ccache ]] && shift
  shift  # the compiler
  local args=()
  while (($#)); do
    case "$1" in
      -o) shift ;;
      -c) ;;
      *) args+=("$1") ;;
    esac
    shift
  done
  local out=$logs/$index
  if ! (cd "$directory" && "$clangxx" "${args[@]}" -fsyntax-only -Wthread-safety \
          -Wno-unknown-warning-option -Werror) >"$out.log" 2>&1; then
    printf '%s\n' "${file#"$root"/}" >"$out.failed"
  fi
  return 0
}
export -f check_one
export logs root clangxx

start=$SECONDS
jq -j --arg root "$root/" --arg build "$build/" --argjson only "$only" '
  [.[] | select((.file | startswith($root)) and (.file | startswith($build) | not)
                and (.file | endswith(".pb.cc") | not))
       | select(($only | length) == 0
                or (.file[($root | length):] as $rel | any($only[]; . as $p | $rel | startswith($p))))]
  | unique_by(.file) | to_entries[]
  | "\(.key)\u0000\(.value.directory)\u0000\(.value.file)\u0000\(.value.command)\u0000"' \
  "$database" >"$logs/units"
units=$(tr -cd '\0' <"$logs/units" | wc -c)
units=$((units / 4))
if ((units == 0)); then
  echo "check-thread-safety: no project sources in $database" >&2
  exit 2
fi
xargs -0 -n4 -P"$(nproc)" bash -c 'check_one "$@"' _ <"$logs/units"

failed=0
for ((i = 0; i < units; i++)); do
  if [[ -f "$logs/$i.failed" ]]; then
    failed=$((failed + 1))
    echo "thread-safety: FAIL $(cat "$logs/$i.failed")"
    cat "$logs/$i.log"
  fi
done
echo "thread-safety: $units units checked with $clangxx, $failed failed ($((SECONDS - start)) s)"
((failed == 0))
