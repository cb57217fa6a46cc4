#!/usr/bin/env bash
# Quick start: installs what is missing, builds autotune (Release, in build/),
# starts autotuned on its default socket and database unless one already
# answers there, and walks through importing a sample cache and looking
# problems up in it. The daemon is left running; the last lines say how to
# stop it. Needs no GPU: the sample kernel is compiled with nvcc only.
#
# Environment: NVCC (default /usr/local/cuda/bin/nvcc), AUTOTUNE_WAIT_S
# (how long to wait for the daemon to answer, default 30).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon=build/service/autotuned
cli=build/client/autotune
make_sample=build/tests/autotune-make-sample
demo_dir=build/quickstart
wait_s=${AUTOTUNE_WAIT_S:-30}

say() { printf '\n== %s\n' "$*"; }
# Prints a command as one would type it, then runs it.
step() {
  local shown=() arg
  for arg in "$@"; do
    if [[ "$arg" =~ [[:space:]] ]]; then shown+=("\"$arg\""); else shown+=("$arg"); fi
  done
  printf '\n$ %s\n' "${shown[*]}"
  "$@"
}
fail() {
  echo "quickstart: $*" >&2
  exit 1
}

say "dependencies"
deploy/install-deps.sh

say "build (Release, build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
for binary in "$daemon" "$cli" "$make_sample"; do
  [[ -x "$binary" ]] || fail "the build did not produce $binary"
done

# The daemon's own defaults (no flags): the socket under XDG_RUNTIME_DIR, else
# /tmp/autotune-UID.sock; the database under XDG_STATE_HOME, else
# ~/.local/state. AUTOTUNE_SERVER points the CLI at that socket, whatever the
# caller's environment had.
if [[ -n "${XDG_RUNTIME_DIR:-}" ]]; then
  address="unix://$XDG_RUNTIME_DIR/autotune.sock"
else
  address="unix:///tmp/autotune-$(id -u).sock"
fi
export AUTOTUNE_SERVER=$address
state_dir="${XDG_STATE_HOME:-${HOME:-/tmp}/.local/state}/autotune"
database="$state_dir/cache.db"
log="$state_dir/autotuned.log"
pid_file="$state_dir/autotuned.pid"
(umask 077 && mkdir -p "$state_dir")  # as private as the daemon makes it

answering() { timeout 10 "$cli" stats >/dev/null 2>&1; }

say "daemon"
if answering; then
  pid=""
  if [[ -f "$pid_file" ]]; then
    pid=$(<"$pid_file")
    # Only trust the pid file if it still names an autotuned process.
    # (A rebuilt binary reads "/path/autotuned (deleted)".)
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */autotuned* ]] || pid=""
  fi
  echo "autotuned is already answering on $address; using it"
else
  echo "starting $daemon (socket $address, database $database, log $log)"
  echo "--- $(date -u +%FT%TZ) deploy/quickstart.sh starts $daemon" >>"$log"
  nohup "$daemon" >>"$log" 2>&1 </dev/null &
  pid=$!
  deadline=$((SECONDS + wait_s))
  until answering; do
    if ! kill -0 "$pid" 2>/dev/null; then
      status=0
      wait "$pid" || status=$?
      echo "quickstart: autotuned exited with status $status before answering; last lines of $log:" >&2
      tail -n 20 "$log" | sed 's/^/  /' >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      kill "$pid" 2>/dev/null || true
      echo "quickstart: autotuned (pid $pid) did not answer on $address within ${wait_s}s;" \
        "stopped it. Last lines of $log:" >&2
      tail -n 20 "$log" | sed 's/^/  /' >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "$pid" >"$pid_file"
  echo "autotuned is answering (pid $pid)"
fi

say "sample data: the vector_scale kernel, compiled for sm_90 (no GPU needed)"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
if [[ ! -x "$nvcc" ]]; then
  wanted=$nvcc
  nvcc=$(command -v nvcc || true)
  [[ -n "$nvcc" ]] || fail "nvcc not found at $wanted or on PATH; set NVCC=/path/to/nvcc"
fi
cuda_version=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
mkdir -p "$demo_dir"
step "$nvcc" -cubin -arch=sm_90 -DBLOCK=256 -DELEMS_PER_THREAD=2 -DAUTOTUNE_DTYPE=__nv_bfloat16 \
  -o "$demo_dir/vector_scale.cubin" tests/sample/vector_scale.cu
step "$make_sample" --cubin "$demo_dir/vector_scale.cubin" --nvrtc-version "${cuda_version:-13.0}" \
  --out "$demo_dir/sample_bundle.json"
echo "(bf16 entries for batch 1, 8 and 64 at n=4096 on an NVIDIA H200; their timings are" \
  "illustrative, not measured)"

say "import the sample into the cache"
step "$cli" import "$demo_dir/sample_bundle.json"

say "batch 8 was tuned: EXACT"
step "$cli" lookup vector_scale --dims batch=8,n=4096 --dtype bf16 --device "NVIDIA H200"

say "batch 12 was not, but batch is a bucketed dimension: NEAREST"
echo "(the server picks which tuned neighbour to serve, 8 or 64; the answer names it)"
step "$cli" lookup vector_scale --dims batch=12,n=4096 --dtype bf16 --device "NVIDIA H200"

say "nothing was tuned in fp16: MISS (an answer, not an error)"
step "$cli" lookup vector_scale --dims batch=16,n=4096 --dtype fp16 --device "NVIDIA H200"

say "what the cache holds"
step "$cli" ls

say "done"
# A daemon found running may use another database than the default one.
served=$("$cli" stats --json 2>/dev/null | sed -n 's/^ *"database_path": "\(.*\)",\{0,1\}$/\1/p' || true)
database=${served:-$database}
if [[ -n "$pid" ]]; then
  echo "autotuned keeps running: pid $pid, log $log"
  echo "stop it with: kill $pid"
else
  echo "autotuned keeps running (started elsewhere, its pid is not known here); log of a daemon" \
    "started by this script: $log"
  echo "stop it with: kill <its pid>   (SIGTERM finishes in-flight calls and closes the database)"
fi
echo "socket $address, database $database"
