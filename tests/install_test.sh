#!/usr/bin/env bash
# The installed layout, end to end: `cmake --install` into a fresh prefix;
# PREFIX/bin/autotuned, started with no --kernels, registers its built-in
# families from PREFIX/share/autotune/kernels and finds autotune-worker
# beside itself; PREFIX/bin/autotune lists the families and answers a lookup.
# Then a copy of the daemon with no share/ beside it refuses to start,
# naming where it looked, rather than falling back to the checkout (which
# exists here).
#
# Usage: tests/install_test.sh BUILD_DIR SOURCE_DIR (ctest passes both, and
# CMAKE, the cmake that configured BUILD_DIR).
set -euo pipefail
build_dir=$1
source_dir=$2

work=$(mktemp -d "${TMPDIR:-/tmp}/autotune-install-test-XXXXXX")
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
  echo "install_test: $*" >&2
  if [[ -f "$work/autotuned.log" ]]; then sed 's/^/  autotuned: /' "$work/autotuned.log" >&2; fi
  exit 1
}

prefix=$work/prefix
if ! "${CMAKE:-cmake}" --install "$build_dir" --prefix "$prefix" >"$work/install.log" 2>&1; then
  cat "$work/install.log" >&2
  fail "cmake --install $build_dir --prefix $prefix failed"
fi
kernels=$prefix/share/autotune/kernels
for file in "$source_dir"/kernels/builtin/*.textproto "$source_dir"/kernels/builtin/*.manifest; do
  [[ -f "$kernels/${file##*/}" ]] || fail "${file##*/} is not installed in $kernels"
done
for binary in autotuned autotune-worker autotune; do
  [[ -x "$prefix/bin/$binary" ]] || fail "$prefix/bin/$binary is not installed"
done

address=unix://$work/autotune.sock
cli=("$prefix/bin/autotune" --server "$address" --timeout 10)
"$prefix/bin/autotuned" --db "$work/state/cache.db" --listen "$address" \
  >"$work/autotuned.log" 2>&1 </dev/null &
daemon_pid=$!
for ((try = 0; ; ++try)); do
  if "${cli[@]}" stats >/dev/null 2>&1; then break; fi
  kill -0 "$daemon_pid" 2>/dev/null || fail "autotuned exited before answering"
  ((try < 300)) || fail "autotuned did not answer within 30 s"
  sleep 0.1
done

grep -qF "built-in kernel families from $kernels (installed)" "$work/autotuned.log" ||
  fail "the log does not say the families came from $kernels"
# Whether or not NVRTC loads here, the compile pool names the worker it ran.
grep -qF "$prefix/bin/autotune-worker" "$work/autotuned.log" ||
  fail "the daemon did not start $prefix/bin/autotune-worker"

listed=$("${cli[@]}" kernels) || fail "autotune kernels exited with $?"
for family in gla_decode rmsnorm softmax; do
  grep -qw "$family" <<<"$listed" || fail "autotune kernels does not list $family: $listed"
done
answer=$("${cli[@]}" lookup rmsnorm --dims rows=8,hidden=4096 --dtype bf16) ||
  fail "autotune lookup exited with $?"
grep -q MISS <<<"$answer" || fail "a fresh cache should answer MISS, not: $answer"

kill -TERM "$daemon_pid"
status=0
wait "$daemon_pid" || status=$?
daemon_pid=""
((status == 0)) || fail "autotuned exited with $status after SIGTERM"

# An installed binary without its share/ never reads the checkout.
mkdir -p "$work/bare/bin"
cp "$prefix/bin/autotuned" "$work/bare/bin/"
status=0
"$work/bare/bin/autotuned" --db "$work/bare.db" --listen "unix://$work/bare.sock" \
  >"$work/bare.log" 2>&1 </dev/null || status=$?
((status != 0)) || fail "a daemon without share/autotune/kernels started anyway"
grep -qF "$work/bare/share/autotune/kernels" "$work/bare.log" &&
  grep -qF "$source_dir/kernels/builtin" "$work/bare.log" ||
  fail "the start-up error does not name both places: $(cat "$work/bare.log")"
echo "install_test: OK ($prefix)"
