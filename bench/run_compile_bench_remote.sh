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
# Bundled: every library ldd resolves under /lib/x86_64-linux-gnu or
# /usr/lib/x86_64-linux-gnu except the C and C++ runtimes (libc, libm,
# libstdc++, libgcc_s, ld-linux, libpthread, libdl, librt), which the target
# has in newer versions. NVRTC and the driver are never bundled: the programs
# dlopen libnvrtc.so.13 from /usr/local/cuda/lib64 there.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
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

skip='^(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libnvrtc|libnvrtc-builtins|libcuda)\.so'
for binary in "${binaries[@]}"; do
  if ldd "$binary" | grep -q 'not found'; then
    echo "error: $binary has unresolved libraries:" >&2
    ldd "$binary" | grep 'not found' >&2
    exit 1
  fi
  # "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3 (0x...)"
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
    while read -r name path; do
      case "$path" in
        /lib/x86_64-linux-gnu/* | /usr/lib/x86_64-linux-gnu/*) ;;
        *) continue ;;
      esac
      if [[ "$name" =~ $skip ]]; then continue; fi
      [ -e "$bundle/lib/$name" ] || cp -L "$path" "$bundle/lib/$name"
    done
done

size_kb=$(du -sk "$bundle" | cut -f1)
echo "bundle: $bundle, $(du -sh "$bundle" | cut -f1), $(ls "$bundle/lib" | wc -l) libraries:"
ls "$bundle/lib" | tr '\n' ' '
echo
if [ "$size_kb" -gt $((max_mb * 1024)) ]; then
  echo "error: the bundle is larger than $max_mb MB" >&2
  exit 1
fi

echo
echo "Run from the repository root there (carry $bundle):"
echo "LD_LIBRARY_PATH=\$PWD/$bundle/lib:/usr/local/cuda/lib64 $bundle/autotune-bench-compile --kernels-dir kernels ${flags[*]}"
