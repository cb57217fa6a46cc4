#!/usr/bin/env bash
# The Python launcher (client/python/autotune_client/launch.py) on the GPU:
# the bundled daemon tunes rmsnorm and softmax for a few shapes, then
# tests/gpu/python_launch.py looks them up with the Python client, launches
# each on PyTorch tensors, eagerly, inside a captured CUDA graph and as a
# custom op under torch.compile, and checks the outputs against PyTorch's;
# then client/python/examples/qk_norm_scores.py runs its block on tuned
# kernels against the eager one and times both and torch.compile's. Run by tests/gpu/run.sh as a
# benchmark hook:
#
#   BENCH_SCRIPT=tests/gpu/python_launch.sh bash tests/gpu/run.sh run
#
# Needs a python3 with torch (CUDA) and grpcio + protobuf; says which is
# missing and exits 1 without them. client/python/autotune_client/autotune_pb2.py
# must travel with the checkout (carry it: it is generated, and ignored).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bundle=${AUTOTUNE_BUNDLE:-bundle/gpu}
out=${OUT:-$bundle/out}
mkdir -p "$out"
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>"$out/python.err"; then
  echo "python_launch: python3 has no CUDA torch: $(tail -1 "$out/python.err")" >&2
  exit 1
fi
if ! python3 -c 'import grpc, google.protobuf' 2>"$out/python.err"; then
  echo "python_launch: python3 cannot import grpcio and protobuf: $(tail -1 "$out/python.err")" >&2
  exit 1
fi
[[ -f client/python/autotune_client/autotune_pb2.py ]] ||
  { echo "python_launch: autotune_pb2.py was not carried" >&2; exit 1; }
# shellcheck source=bench/bundled_daemon.sh
source bench/bundled_daemon.sh
daemon_start "$daemon_dir/cache.db" "$out/launch-daemon.log"
cat >"$daemon_dir/launch.manifest" <<'MANIFEST'
arch: "sm_90a"
items {
  family: "rmsnorm"
  dims { name: "rows" values: [64, 4096] }
  dims { name: "hidden" values: [4096] }
  dtypes: [BFLOAT16]
}
items {
  family: "softmax"
  dims { name: "rows" values: [4096] }
  dims { name: "hidden" values: [8192] }
  dtypes: [BFLOAT16]
}
# client/python/examples/qk_norm_scores.py's shapes.
items {
  family: "rmsnorm"
  dims { name: "rows" values: [64] }
  dims { name: "hidden" values: [128] }
  dtypes: [BFLOAT16]
}
items {
  family: "gemm_bf16"
  dims { name: "M" values: [64] }
  dims { name: "N" values: [4096] }
  dims { name: "K" values: [128] }
  dtypes: [BFLOAT16]
}
items {
  family: "softmax"
  dims { name: "rows" values: [64] }
  dims { name: "hidden" values: [4096] }
  dtypes: [BFLOAT16]
}
MANIFEST
start=$(date +%s)
"${cli[@]}" warmup "$daemon_dir/launch.manifest" >"$out/launch-tune.log" 2>&1 ||
  { tail -20 "$out/launch-tune.log" >&2; echo "python_launch: the tune failed" >&2; exit 1; }
echo "python_launch: tuned 6 problems in $(($(date +%s) - start)) s"
status=0
PYTHONPATH=client/python python3 tests/gpu/python_launch.py "unix://$daemon_dir/autotune.sock" \
  "$daemon_dir/local" || status=1
PYTHONPATH=client/python python3 client/python/examples/qk_norm_scores.py \
  --server "unix://$daemon_dir/autotune.sock" --local-cache "$daemon_dir/local" || status=1
exit $status
