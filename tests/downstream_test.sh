#!/usr/bin/env bash
# find_package(autotune) from another CMake project: `cmake --install` into
# a fresh prefix, configure and build tests/downstream against it (nothing
# else on its prefix path) with the README's start-up snippet and
# client/examples/gla_decode_server.cc, check the program links neither
# SQLite nor the CUDA libraries, then run it against the installed daemon:
# the built-in rmsnorm family answers MISS with its default config.
#
# Usage: tests/downstream_test.sh BUILD_DIR SOURCE_DIR (ctest passes both,
# and CMAKE, the cmake that configured BUILD_DIR).
set -euo pipefail
build_dir=$1
source_dir=$2
cmake=${CMAKE:-cmake}

work=$(mktemp -d "${TMPDIR:-/tmp}/autotune-downstream-test-XXXXXX")
daemon_pid=""
cleanup() {
  if [[ -n "$daemon_pid" ]]; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "downstream_test: $*" >&2
  exit 1
}

prefix=$work/prefix
"$cmake" --install "$build_dir" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install failed"; }
[[ -f "$prefix/lib/cmake/autotune/autotuneConfig.cmake" ]] ||
  fail "no lib/cmake/autotune/autotuneConfig.cmake in $prefix"

# The README's C++ start-up snippet, as a user copies it.
awk '/^```cpp/ { block = ""; inside = 1; next }
     /^```/ { if (inside && block ~ /KernelLoader::Open|LoadBiasRelu/) { printf "%s", block; exit }
              inside = 0; next }
     inside { block = block $0 "\n" }' "$source_dir/README.md" >"$work/readme_snippet.cc"
grep -q 'LoadBiasRelu' "$work/readme_snippet.cc" || fail "no start-up snippet (LoadBiasRelu) in README.md"

if ! "$cmake" -S "$source_dir/tests/downstream" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -DREADME_SNIPPET="$work/readme_snippet.cc" \
  -DAUTOTUNE_EXAMPLES_DIR="$source_dir/client/examples" >"$work/configure.log" 2>&1; then
  cat "$work/configure.log" >&2
  fail "the downstream project does not configure against $prefix"
fi
if ! "$cmake" --build "$work/build" -j 2 >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log" >&2
  fail "the downstream project does not build"
fi
program=$work/build/startup
needed=$(readelf -d "$program" | grep NEEDED || true)
for library in libsqlite3 libcuda libnvrtc libcudart; do
  if grep -q "$library" <<<"$needed"; then fail "startup links $library:"$'\n'"$needed"; fi
done

address=unix://$work/autotune.sock
"$prefix/bin/autotuned" --db "$work/state/cache.db" --listen "$address" --gpus none \
  >"$work/autotuned.log" 2>&1 </dev/null &
daemon_pid=$!
for ((try = 0; ; ++try)); do
  if "$prefix/bin/autotune" --server "$address" stats >/dev/null 2>&1; then break; fi
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/autotuned.log" >&2; fail "autotuned exited"; }
  ((try < 300)) || fail "autotuned did not answer within 30 s"
  sleep 0.1
done

out=$("$program" "$address" "$work/local") || { echo "$out" >&2; fail "startup failed"; }
echo "$out"
[[ $(grep -c '^MISS MISS_NO_ENTRY from service; default config params' <<<"$out") == 2 ]] ||
  fail "expected two MISS answers with the default config, got:"$'\n'"$out"
echo "downstream_test: find_package(autotune) builds and runs against $prefix"
