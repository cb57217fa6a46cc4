#!/usr/bin/env bash
# Builds autotune-bench-compile and autotune-worker (Release, in
# build-bench-compile/), bundles them with the shared libraries they need that
# a stock CUDA image lacks into bundle/compile-bench/ (ignored by git), and
# prints the one command that runs the benchmark from the repository root of
# another machine that has the CUDA toolkit at /usr/local/cuda.
#
#   bench/run_compile_bench_remote.sh [benchmark flags...]
#
# Flags given are passed to the benchmark in the printed command (default:
# --methods pool,threads --max-variants 279 --repeat 3, about 4 minutes on a
# 16-core machine; nvcc costs about 20 times as much per variant, so give it a
# run of its own with fewer variants, e.g. --max-variants 96). Environment:
# BUILD_DIR (default build-bench-compile), JOBS (parallel build jobs,
# default 2).
#
# Bundled: the shared libraries tests/gpu/bundle_libs.sh picks (what ldd
# resolves in the system's library folders but the C and C++ runtimes).
# NVRTC and the driver are never bundled: the programs dlopen libnvrtc.so.13
# from /usr/local/cuda/lib64 there.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=tests/gpu/bundle_libs.sh
source tests/gpu/bundle_libs.sh
build_dir=${BUILD_DIR:-build-bench-compile}
jobs=${JOBS:-2}
bundle=bundle/compile-bench
max_mb=40
if [ "$#" -gt 0 ]; then
  flags=("$@")
else
  flags=(--methods pool,threads --max-variants 279 --repeat 3)
fi

if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build_dir" -j"$jobs" --target autotune-bench-compile autotune-worker

rm -rf "$bundle"
mkdir -p "$bundle/lib" "$bundle/kernels"
binaries=("$build_dir/bench/autotune-bench-compile" "$build_dir/service/autotune-worker")
cp "${binaries[@]}" "$bundle/"
cp kernels/*.cu kernels/*.textproto kernels/*.manifest "$bundle/kernels/"

bundle_copy_libs "$bundle/lib" "${binaries[@]}"
bundle_check_size "$bundle" "$max_mb"

echo
echo "Run from the repository root there (carry $bundle):"
echo "LD_LIBRARY_PATH=\$PWD/$bundle/lib:/usr/local/cuda/lib64 $bundle/autotune-bench-compile --kernels-dir kernels ${flags[*]}"
