#!/usr/bin/env bash
# Quick start: installs what is missing, builds what it runs (Release, in
# build/: the daemon, the CLI, the worker and the web pages, not the tests;
# .ci/test.sh builds those) and says how long that took, starts autotuned on its default socket and database unless one already
# answers there, runs a real warmup of the built-in rmsnorm family (three
# problems) and looks problems up in what it tuned. On a machine without a
# GPU the warmup compiles only, says that measuring needs a GPU, and the
# lookups answer MISS with their reason. The daemon is left running; the
# last lines say how to stop it.
#
# Environment: AUTOTUNE_WAIT_S (how long to wait for the daemon to answer,
# default 30).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon=build/service/autotuned
cli=build/client/autotune
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

say "dependencies (to build and run; the tests' are installed by .ci/test.sh)"
deploy/install-deps.sh --build-only

say "build (Release, build/): autotuned, autotune, autotune-worker"
build_start=$SECONDS
# CMake takes CMAKE_GENERATOR only for a new tree; an existing one keeps its own.
command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target autotuned autotune autotune-worker
echo "quickstart: built in $((SECONDS - build_start)) s"
for binary in "$daemon" "$cli"; do
  [[ -x "$binary" ]] || fail "the build did not produce $binary"
done

# The daemon's own defaults (no flags): the socket under XDG_RUNTIME_DIR, else
# /tmp/autotune-UID/autotune.sock (a 0700 folder); the database under XDG_STATE_HOME, else
# ~/.local/state. AUTOTUNE_SERVER points the CLI at that socket, whatever the
# caller's environment had.
if [[ -n "${XDG_RUNTIME_DIR:-}" ]]; then
  address="unix://$XDG_RUNTIME_DIR/autotune.sock"
else
  address="unix:///tmp/autotune-$(id -u)/autotune.sock"
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

say "a warmup: the built-in rmsnorm family, three problems"
mkdir -p "$demo_dir"
manifest=$demo_dir/quickstart.manifest
cat >"$manifest" <<'MANIFEST'
# rmsnorm over 64 rows of 4096 and 8192 elements, and 4096 rows of 4096, in bf16.
items {
  family: "rmsnorm"
  dims { name: "rows" values: [64] }
  dims { name: "hidden" values: [4096, 8192] }
  dtypes: [BFLOAT16]
}
items {
  family: "rmsnorm"
  dims { name: "rows" values: [4096] }
  dims { name: "hidden" values: [4096] }
  dtypes: [BFLOAT16]
}
MANIFEST
measured=1
if ! step "$cli" warmup "$manifest"; then
  # Without a GPU the daemon refuses to measure (FAILED_PRECONDITION, with
  # the reason); everything short of measuring still runs.
  measured=0
  echo
  echo "Measuring needs a CUDA GPU, and this daemon has none it can use (the reason is above)."
  echo "What can run here is the compile warmup: every variant compiled with NVRTC and cached."
  step "$cli" warmup "$manifest" --compile-only
fi
if ((measured)); then
  say "rows=64, hidden=4096 was tuned: EXACT"
else
  say "rows=64, hidden=4096 was only compiled, not measured: MISS, saying why"
fi
step "$cli" lookup rmsnorm --dims rows=64,hidden=4096 --dtype bf16
if ((measured)); then
  say "rows=100 was not tuned, but rows is a bucketed dimension: NEAREST"
  echo "(the server picks the tuned neighbour, rows=64 or rows=4096; the answer names it)"
else
  say "rows=100: no neighbour was measured either: MISS"
fi
step "$cli" lookup rmsnorm --dims rows=100,hidden=4096 --dtype bf16
say "nothing was tuned in fp16: MISS (an answer, not an error)"
step "$cli" lookup rmsnorm --dims rows=64,hidden=4096 --dtype fp16
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
