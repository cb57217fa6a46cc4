#!/usr/bin/env bash
# Checks that the binaries keep to the process boundary (README, "Layout and
# libraries"):
#   autotuned        no NVRTC, driver or profiler code (it runs no kernel)
#   autotune-worker  no gRPC, no SQLite, no store (it talks over a pipe)
#   the client       no SQLite, no store (inference servers link it); the
#                    library no GPU-side code, the CLI only NVRTC (check)
# by the symbols each defines or references (nm) and the libraries it needs
# (readelf). Usage: check-boundaries.sh AUTOTUNED WORKER CLIENT_LIB CLI.
#
# check-boundaries.sh --sources ROOT checks the same cut, and the layers
# inside the daemon, on the sources under ROOT by what each folder includes
# (tests and testing/ folders aside):
#   service/pools/    nothing of jobs/, lookup/, rpc/, the worker but its
#                     pipe, kernels/gpu/, the store, gRPC
#   service/jobs/     nothing of lookup/, rpc/, worker/, kernels/gpu/, gRPC
#   service/lookup/   nothing of rpc/, worker/, kernels/gpu/, gRPC
#   service/rpc/, service/*   nothing of worker/, kernels/gpu/
#   service/worker/   nothing of the daemon's folders, the store, the client,
#                     gRPC, SQLite
#   kernels/          nothing of service/, cache/, client/, gRPC, SQLite
#   cache/            nothing of service/, client/, kernels/gpu/, gRPC
#   client/           nothing of service/ but defaults.h (the CLI's help
#                     states the daemon's defaults), cache/, SQLite
# Prints one line per breach and exits 1 when there is one.
set -euo pipefail
if (($# == 2)) && [[ "$1" == --sources ]]; then
  root=$2
  [[ -d "$root/service" && -d "$root/kernels" ]] || {
    echo "check-boundaries: $root holds no service/ and kernels/" >&2
    exit 2
  }
  found=0
  # rule DIR MAXDEPTH FORBIDDEN [ALLOWED]: includes under DIR matching
  # FORBIDDEN (and not ALLOWED) are breaches.
  rule() {
    local dir=$root/$1 depth=$2 forbidden=$3 allowed=${4:-^$} hits
    [[ -d "$dir" ]] || return 0
    hits=$(find "$dir" -maxdepth "$depth" -type f \( -name '*.cc' -o -name '*.h' \) \
             ! -name '*_test.cc' ! -path '*/testing/*' -print0 |
           xargs -0 -r grep -HnE "^#include [\"<]($forbidden)" | grep -vE "$allowed" | sort || true)
    if [[ -n "$hits" ]]; then
      sed "s|^$root/|check-boundaries: |" <<<"$hits"
      found=$((found + $(wc -l <<<"$hits")))
    fi
  }
  rule service/pools 9 'service/(jobs|lookup|rpc)/|service/worker/[^w]|kernels/gpu/|cache/|grpcpp/'
  rule service/jobs 9 'service/(lookup|rpc|worker)/|kernels/gpu/|grpcpp/'
  rule service/lookup 9 'service/(rpc|worker)/|kernels/gpu/|grpcpp/'
  rule service/rpc 9 'service/worker/|kernels/gpu/'
  rule service 1 'service/worker/|kernels/gpu/'
  rule service/worker 9 'service/(jobs|lookup|rpc|pools)/|cache/|client/|grpcpp/|sqlite3'
  rule kernels 9 'service/|cache/|client/|grpcpp/|sqlite3'
  rule cache 9 'service/|client/|kernels/gpu/|grpcpp/'
  rule client 9 'service/|cache/|sqlite3' 'service/defaults\.h'
  if ((found > 0)); then
    echo "check-boundaries: $found include(s) across the boundaries"
    exit 1
  fi
  echo "check-boundaries: the sources of service/, kernels/, cache/ and client/ keep to their side"
  exit 0
fi
if (($# != 4)); then
  echo "usage: $0 AUTOTUNED WORKER CLIENT_LIB CLI | $0 --sources ROOT" >&2
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
done
forbid "$client_lib" "GPU-side code" "$gpu_code"
# `autotune check` compiles a family with NVRTC on its author's machine, with
# no daemon; nothing else of the GPU side (the driver, the profiler).
forbid "$cli" "GPU-side code other than NVRTC" \
  'autotune::kernels::(CudaDriver|Profiler|CudaStatus)|kDeviceKernelsPtx'

forbid_library "$cli" 'libsqlite3'

if ((breaches > 0)); then
  echo "check-boundaries: $breaches breach(es)"
  exit 1
fi
echo "check-boundaries: autotuned, autotune-worker, the client library and the CLI keep to their side"
