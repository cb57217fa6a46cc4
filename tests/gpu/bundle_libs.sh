# shellcheck shell=bash
# Shell functions for scripts that carry binaries built here (Debian 12) to
# a machine with a stock Ubuntu 24.04, the CUDA 13 toolkit at
# /usr/local/cuda and the NVIDIA driver: tests/gpu/run.sh and
# bench/run_compile_bench_remote.sh. Source it; it only defines functions.

# bundle_copy_libs DIR BINARY...
# Copies into DIR every shared library that ldd resolves for the binaries
# under /lib/x86_64-linux-gnu or /usr/lib/x86_64-linux-gnu (gRPC, protobuf,
# Abseil, c-ares, re2, OpenSSL, zlib, SQLite, muparser, spdlog, fmt...),
# except the C and C++ runtimes (libc, libm, libstdc++, libgcc_s, ld-linux,
# libpthread, libdl, librt), which the target has in newer versions, and
# CUDA's own: the driver's libcuda and the toolkit's NVRTC, which the
# programs dlopen there. Fails naming the binary when ldd cannot resolve one
# of its libraries.
bundle_copy_libs() {
  local dest=$1
  shift
  local skip='^(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libnvrtc|libnvrtc-builtins|libcuda)\.so'
  local binary name path
  mkdir -p "$dest"
  for binary in "$@"; do
    if ldd "$binary" | grep -q 'not found'; then
      echo "error: $binary has unresolved libraries:" >&2
      ldd "$binary" | grep 'not found' >&2
      return 1
    fi
    # "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3 (0x...)"
    while read -r name path; do
      case "$path" in
        /lib/x86_64-linux-gnu/* | /usr/lib/x86_64-linux-gnu/*) ;;
        *) continue ;;
      esac
      if [[ "$name" =~ $skip ]]; then continue; fi
      [ -e "$dest/$name" ] || cp -L "$path" "$dest/$name"
    done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
  done
}

# bundle_check_size DIR MAX_MB
# Prints the folder's size and the libraries in DIR/lib; fails when the
# folder is larger than MAX_MB megabytes.
bundle_check_size() {
  local dir=$1 max_mb=$2
  local size_kb
  size_kb=$(du -sk "$dir" | cut -f1)
  local libs
  libs=$(find "$dir/lib" -maxdepth 1 -type f -printf '%f\n' | sort)
  echo "bundle: $dir, $(du -sh "$dir" | cut -f1), $(grep -c . <<<"$libs") libraries:"
  echo "$libs" | tr '\n' ' '
  echo
  if [ "$size_kb" -gt $((max_mb * 1024)) ]; then
    echo "error: the bundle is larger than the $max_mb MB left beside the checkout ($((size_kb / 1024)) MB); leave optional binaries out with BUNDLE_OPTIONAL" >&2
    return 1
  fi
}
