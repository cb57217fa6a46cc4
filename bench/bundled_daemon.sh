# Sourced by the GPU benchmarks: one bundled autotuned on a socket in a
# temporary folder, stopped, and the folder removed, when the script exits.
#
#   bundle=bundle/gpu; source bench/bundled_daemon.sh
#   daemon_start "$daemon_dir/cache.db" "$out/daemon.log"   # returns once it answers
#   "${cli[@]}" warmup MANIFEST
#   daemon_stop
#
# Needs $bundle (from `bash tests/gpu/run.sh bundle`). Sets daemon_dir (the
# folder, for the script's own files too), cli (the bundled CLI on the
# daemon's socket) and LD_LIBRARY_PATH.
daemon_dir=$(mktemp -d)
daemon_pid=
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cli=("$bundle/autotune" --server "unix://$daemon_dir/autotune.sock")

daemon_stop() {
  if [[ -n "$daemon_pid" ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  daemon_pid=
}
trap 'daemon_stop; rm -rf "$daemon_dir"' EXIT

# daemon_start DB LOG: a daemon on database DB, its output appended to LOG.
# The families are the bundle's alone: `--kernels` adds to the built-in
# folder, which a bundle does not have where the daemon looks for it, so
# `none` comes first. Fails loudly (the log's tail on stderr, status 1) when
# the daemon exits or does not answer within 20 s.
daemon_start() {
  "$bundle/autotuned" --db "$1" --listen "unix://$daemon_dir/autotune.sock" \
    --kernels none --kernels "$bundle/kernels" --worker "$bundle/autotune-worker" >>"$2" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do
    "${cli[@]}" stats >/dev/null 2>&1 && return 0
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      wait "$daemon_pid" 2>/dev/null
      echo "bundled_daemon.sh: autotuned exited (status $?) before it answered; its log:" >&2
      daemon_pid=
      tail -20 "$2" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "bundled_daemon.sh: autotuned did not answer within 20 s; its log:" >&2
  tail -20 "$2" >&2
  return 1
}
