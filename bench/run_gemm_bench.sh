#!/usr/bin/env bash
# gemm_bf16 against cuBLAS on the GPU machine: the bundled daemon tunes the
# shapes of a manifest (cold, on a fresh database), then
# bench/gemm_vs_cublas.py times each tuned cubin, torch.matmul (cuBLAS) and
# the fastest cuBLASLt algorithm for the shape the same way in one process
# (CUDA graphs over input sets larger than 2x L2, the sides interleaved,
# GEMM_RUNS runs, default 3), and prints one row per shape with the tuned
# kernel's and cuBLAS's TFLOP/s, their ratios and spread over the runs, and
# the daemon's speedup over the family's default config; then summaries per
# M group, the GPU's clocks, and M <= 16 as a share of copy bandwidth.
#
#   bash bench/run_gemm_bench.sh [MANIFEST]   # default bench/gemm.manifest
#
# Needs bundle/gpu from `bash tests/gpu/run.sh bundle` (AUTOTUNE_BUNDLE
# overrides it) and python3 with torch. Writes gemm_daemon.log,
# gemm_warmup.log (progress), gemm_job.json (the finished job), lookups/,
# screens/ (`autotune show --json` of each problem, gzipped) and
# gemm_bench.json under $OUT (default bundle/gpu/out). Exits non-zero when the warmup or the timing fails.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${AUTOTUNE_BUNDLE:-bundle/gpu}
manifest=${1:-$repo/bench/gemm.manifest}
out=${OUT:-$bundle/out}
mkdir -p "$out/lookups"
# shellcheck source=bench/bundled_daemon.sh
source "$repo/bench/bundled_daemon.sh"
dir=$daemon_dir
daemon_start "$dir/cache.db" "$out/gemm_daemon.log"
start=$SECONDS
# The warmup may take what BENCH_TIMEOUT leaves after a minute for the timing.
limit=$(( ${BENCH_TIMEOUT:-3600} - 60 ))
if ! timeout "$limit" "${cli[@]}" warmup "$manifest" --json >"$out/gemm_job.json" 2>"$out/gemm_warmup.log"; then
  tail -30 "$out/gemm_warmup.log"
  exit 1
fi
echo "warmup of $(basename "$manifest"): $((SECONDS - start)) s (compile, screen and serial phases, cold)"
# One lookup per tuned problem: the entry (config, launch, function) and its cubin.
python3 - "$out/gemm_job.json" >"$dir/problems.txt" <<'EOF'
import json, sys
job = json.load(open(sys.argv[1]))
t = job.get("timing", {})
print(f"job: compile {t.get('compile_s', 0):.0f} s, screen {t.get('screen_s', 0):.0f} s, "
      f"serial {t.get('serial_s', 0):.0f} s; counts {json.dumps(job.get('counts', {}))}",
      file=sys.stderr)
for report in job.get("reports", []):
    dims = report["problem"]["dims"]
    print(",".join(f"{k}={dims[k]}" for k in ("M", "N", "K")))
EOF
# And every measurement behind the entry (each variant's screen, the serial
# rounds), gzipped: the data a search strategy can be replayed against.
mkdir -p "$out/screens"
while read -r dims; do
  name=${dims//[=,]/_}
  "${cli[@]}" lookup gemm_bf16 --dims "$dims" --dtype bf16 --exact --json \
    --cubin-out "$out/lookups/$name.cubin" >"$out/lookups/$name.json"
  "${cli[@]}" show gemm_bf16 --dims "$dims" --dtype bf16 --json | gzip >"$out/screens/$name.json.gz"
done <"$dir/problems.txt"
# The inference-server example: the tuned kernels of the manifest's M
# buckets and one between them (NEAREST), with the service up, then down.
if [[ -x "$bundle/gemm-server" ]]; then
  ms=$(cut -d, -f1 "$dir/problems.txt" | cut -d= -f2 | sort -n | paste -sd,)
  nk=$(head -1 "$dir/problems.txt" | cut -d, -f2-3)
  n=${nk%%,*}; n=${n#N=}; k=${nk##*K=}
  echo "== gemm-server, service up (M $ms and 512)"
  "$bundle/gemm-server" --server "unix://$dir/autotune.sock" --local-cache "$dir/local" \
    --m "$ms,512" --n "$n" --k "$k" --expect-source service
fi
daemon_stop
if [[ -x "$bundle/gemm-server" ]]; then
  echo "== gemm-server, service stopped"
  "$bundle/gemm-server" --server "unix://$dir/autotune.sock" --local-cache "$dir/local" \
    --m "$ms,512" --n "$n" --k "$k" --expect-source "local cache"
fi
python3 "$repo/bench/gemm_vs_cublas.py" --lookups "$out/lookups" --job "$out/gemm_job.json" \
  --json "$out/gemm_bench.json" --runs "${GEMM_RUNS:-3}"
