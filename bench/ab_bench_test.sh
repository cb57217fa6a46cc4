#!/usr/bin/env bash
# autotune-bench-ab end to end without a GPU: a daemon whose profile worker is
# the test worker (service/testing/fake_profile_worker.cc: MODE=0 times 10 us,
# MODE=1 20 us) tunes one problem of a two-config family; once it has
# stopped, the bench reads the database, pairs the choice (MODE=0) with the
# runner-up of its serial phase (MODE=1, the family's default) and times the
# pair again in two fresh worker processes.
#
#   bash bench/ab_bench_test.sh AB_BENCH AUTOTUNED AUTOTUNE_CLI WORKER FAKE_WORKER TESTDATA_DIR
set -euo pipefail
bench=$1 daemon=$2 cli=$3 worker=$4 fake=$5 testdata=$6
work=$(mktemp -d)
daemon_pid=
cleanup() {
  [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/kernels"
sed 's/values: \[0, 1, 8, 9\]/values: [0, 1]/; s/name: "modes_serial"/name: "ab_pair"/' \
  "$testdata/modes_serial.textproto" >"$work/kernels/ab_pair.textproto"
cp "$testdata/modes.cu" "$work/kernels/"
echo 'items { family: "ab_pair" dims { name: "n" values: [1024] } dtypes: [FLOAT32] }' \
  >"$work/manifest.textproto"

"$daemon" --db "$work/t.db" --listen "unix://$work/s.sock" --kernels none --kernels "$work/kernels" \
  --worker "$worker" --profile-worker "$fake" --compile-workers 1 --lease-dir "$work/leases" \
  >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  "$cli" --server "unix://$work/s.sock" stats >/dev/null 2>&1 && break
  sleep 0.1
done
"$cli" --server "unix://$work/s.sock" warmup "$work/manifest.textproto" >"$work/warmup.log" 2>&1 ||
  { cat "$work/warmup.log" "$work/daemon.log"; exit 1; }
kill "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=


"$bench" --db "$work/t.db" --worker "$fake" --passes 2 --seconds 0.1 --json "$work/ab.json" \
  >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
grep -q '| ab_pair n=1024 fp32 | MODE=0 | MODE=1 (serial) | -50.00% | -50.00% \[' "$work/out" ||
  { cat "$work/out"; exit 1; }
grep -q '| 12 in 2 | yes |' "$work/out" || { cat "$work/out"; exit 1; }
grep -q '^1 of 1 choices within 0.5% ' "$work/out" || { cat "$work/out"; exit 1; }
grep -q '"runner_up":"MODE=1"' "$work/ab.json" || { cat "$work/ab.json"; exit 1; }

# A database with no entry is an error, not an empty success.
"$daemon" --db "$work/empty.db" --listen "unix://$work/e.sock" --kernels none \
  --worker "$worker" --compile-workers 1 >"$work/daemon2.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  "$cli" --server "unix://$work/e.sock" stats >/dev/null 2>&1 && break
  sleep 0.1
done
kill "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=
if "$bench" --db "$work/empty.db" --worker "$fake" >"$work/out" 2>&1; then
  echo "a database without entries passed"; cat "$work/out"; exit 1
fi
grep -q "holds no entry with a runner-up" "$work/out" || { cat "$work/out"; exit 1; }
echo "ok"
