#!/usr/bin/env bash
# Runs the Python client's tests (client/python/tests) with the first
# python3 that can import grpc and google.protobuf: python3 on PATH, else
# Debian's /usr/bin/python3 (where python3-grpcio and python3-protobuf
# install). The end-to-end tests use the daemon and tools named by
# AUTOTUNED, AUTOTUNE_CLI and AUTOTUNE_MAKE_SAMPLE (CTest sets them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for python in python3 /usr/bin/python3; do
  if command -v "$python" >/dev/null 2>&1 &&
    "$python" -c 'import grpc, google.protobuf' >/dev/null 2>&1; then
    exec "$python" -m unittest discover -s "$here/tests" -t "$here/tests" "$@"
  fi
done
echo "run_tests.sh: no python3 here imports grpc and google.protobuf;" \
  "install python3-grpcio and python3-protobuf (deploy/install-deps.sh does)" >&2
exit 1
