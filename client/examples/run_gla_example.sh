#!/usr/bin/env bash
# The gla_decode example on the GPU machine, with the bundled daemon and CLI
# (bundle/gpu from `bash tests/gpu/run.sh bundle`; usable as its
# BENCH_SCRIPT): a daemon tunes the example's shapes (batch 1 and 8, dim 64
# and 128), the example starts with the service up (answers from the
# service; batch 4 is NEAREST), once for a head dim nothing was tuned for
# (a MISS: the default config compiled here), then, with the daemon
# stopped, again (answers from the local cache). Every run checks every
# output. Exits non-zero when any run fails.
set -euo pipefail
bundle=$(cd "${AUTOTUNE_BUNDLE:-bundle/gpu}" && pwd)
out=${OUT:-$bundle/out}
mkdir -p "$out"
dir=$(mktemp -d)
daemon_pid=""
cleanup() {
  if [[ -n "$daemon_pid" ]]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  cp "$dir"/*.log "$out/" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
address=unix://$dir/autotune.sock
cli=("$bundle/autotune" --server "$address")

"$bundle/autotuned" --db "$dir/cache.db" --listen "$address" --kernels "$bundle/kernels" \
  --worker "$bundle/autotune-worker" >"$dir/example-daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 150); do "${cli[@]}" stats >/dev/null 2>&1 && break; sleep 0.2; done
cat >"$dir/example.manifest" <<'MANIFEST'
items { family: "gla_decode" dims { name: "batch" values: [1, 8] } dims { name: "heads" values: [32] } dims { name: "dim" values: [64, 128] } dtypes: [FLOAT32] }
MANIFEST
start=$SECONDS
"${cli[@]}" warmup "$dir/example.manifest" >"$dir/example-warmup.log" 2>&1
echo "warmup of the example's 4 shapes: $((SECONDS - start)) s"

# Batch 4 was not tuned: NEAREST (batch 8's config, launched for batch 4).
echo "== service up"
"$bundle/gla-decode-server" --server "$address" --local-cache "$dir/local" --batch 1,4,8 \
  --expect-source service
# Head dim 96 was not tuned: a MISS, the default config compiled here.
echo "== service up, an untuned head dim"
"$bundle/gla-decode-server" --server "$address" --local-cache "$dir/local" --batch 1 --dim 96 \
  --expect-source service
kill "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""
echo "== service stopped"
"$bundle/gla-decode-server" --server "$address" --local-cache "$dir/local" --batch 1,4,8 \
  --expect-source "local cache"
