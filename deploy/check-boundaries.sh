#!/usr/bin/env bash
# Checks that the binaries keep to the process boundary (DESIGN.md):
#   autotuned        no NVRTC, driver or profiler code (it runs no kernel)
#   autotune-worker  no gRPC, no SQLite, no store (it talks over a pipe)
#   the client       no SQLite, no store (inference servers link it)
# by the symbols each defines or references (nm) and the libraries it needs
# (readelf). Usage: check-boundaries.sh AUTOTUNED WORKER CLIENT_LIB CLI.
# Prints one line per breach and exits 1 when there is one.
set -euo pipefail
if (($# != 4)); then
  echo "usage: $0 AUTOTUNED WORKER CLIENT_LIB CLI" >&2
  exit 2
fi
autotuned=$1 worker=$2 client_lib=$3 cli=$4
breaches=0
# A file that is missing or has no symbols to read would pass every rule.
for file in "$@"; do
  if ! symbols=$(nm "$file" 2>/dev/null) || [[ -z "$symbols" ]]; then
    echo "check-boundaries: cannot read the symbols of $file" >&2
    exit 2
  fi
done

# forbid FILE WHAT REGEX: FILE's demangled symbols must not match REGEX.
forbid() {
  local file=$1 what=$2 regex=$3 found
  found=$(nm -C "$file" 2>/dev/null | grep -E "$regex" | head -3 || true)
  if [[ -n "$found" ]]; then
    echo "check-boundaries: $(basename "$file") has $what:"
    sed 's/^/    /' <<<"$found"
    breaches=$((breaches + 1))
  fi
}
# forbid_library FILE REGEX: FILE must not need a shared library matching REGEX.
forbid_library() {
  local file=$1 regex=$2 found
  found=$(readelf -d "$file" | awk '/NEEDED/ {print $5}' | grep -E "$regex" || true)
  if [[ -n "$found" ]]; then
    echo "check-boundaries: $(basename "$file") needs $found"
    breaches=$((breaches + 1))
  fi
}

gpu_code='autotune::kernels::(Nvrtc|CudaDriver|Profiler|Compile\(|CudaStatus)|kDeviceKernelsPtx|nvrtc[A-Z]'
forbid "$autotuned" "GPU-side code" "$gpu_code"
forbid_library "$autotuned" 'libnvrtc|libcuda|libnvidia-ml'

forbid "$worker" "gRPC code" 'grpc::|grpc_'
forbid "$worker" "SQLite or store code" 'sqlite3_|autotune::cache::'
forbid_library "$worker" 'libgrpc|libsqlite3|libspdlog'

for file in "$client_lib" "$cli"; do
  forbid "$file" "SQLite or store code" 'sqlite3_|autotune::cache::'
  forbid "$file" "GPU-side code" "$gpu_code"
done
forbid_library "$cli" 'libsqlite3'

if ((breaches > 0)); then
  echo "check-boundaries: $breaches breach(es)"
  exit 1
fi
echo "check-boundaries: autotuned, autotune-worker, the client library and the CLI keep to their side"
