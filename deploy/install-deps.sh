#!/usr/bin/env bash
# Installs the Debian packages that building and testing autotune need.
# Installs only what is missing (apt-get update runs only then); prints one
# line and changes nothing when everything is present. Runs apt-get directly
# as root, through sudo otherwise. The CUDA toolkit (/usr/local/cuda) is not
# a Debian package and is not installed here.
#
#   deploy/install-deps.sh                # building and every test (CI)
#   deploy/install-deps.sh --build-only   # building and running (the quick
#                                         # start): no browser, clang, linters
#   deploy/install-deps.sh [--build-only] --print   # the selection, one a line
#
# apt-get's own output goes to $TMPDIR/autotune-install-deps.log; its last
# lines are shown when it fails.
set -euo pipefail

build_only=0
print=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --print) print=1 ;;
    *)
      echo "install-deps: unknown argument '$arg' (--build-only, --print)" >&2
      exit 2
      ;;
  esac
done

packages=(
  build-essential      # g++, make
  cmake
  ninja-build          # the generator of the trees .ci/test.sh makes
  pkg-config           # finds sqlite3
  protobuf-compiler    # protoc
  protobuf-compiler-grpc  # grpc_cpp_plugin
  libprotobuf-dev
  libgrpc++-dev
  libabsl-dev
  libsqlite3-dev
  libssl-dev
  libgtest-dev
  libgmock-dev
  libcli11-dev
  libspdlog-dev
  libmuparser-dev      # expressions in kernel family descriptors
  libxxhash-dev        # xxhash.h: the check of the client's local cache packs
  libxgboost-dev       # the cost model of the model-guided search (service/jobs/)
  prometheus-cpp-dev   # the daemon's metrics over HTTP
  python3              # the Python client and the tests that read exported configs
  python3-grpcio       # the Python client (client/python)
  python3-protobuf
  python3-xxhash       # XXH3: the Python client's local cache packs
)
# Only the tests and CI's checks need these.
test_packages=(
  openssl              # the TLS end-to-end test makes its own certificates
  clang-14             # clang++-14: .ci/check-thread-safety.sh, .ci/fuzz.sh
  libclang-rt-14-dev   # libFuzzer and the sanitizers runtimes (.ci/fuzz.sh)
  lld-14               # links the sanitizer trees (.ci/sanitize.sh)
  lld                  # ld.lld, for GCC: links the Release tree in CI (.ci/test.sh)
  jq                   # reads compile_commands.json for that check
  clang-format-14      # .ci/check-format.sh
  python3-yaml         # deploy/test_deploy.py reads the Kubernetes manifests
  systemd              # systemd-analyze verifies deploy/autotuned.service
  chromium             # the browser tests of the report and the admin page (web/tests)
)

((build_only)) || packages+=("${test_packages[@]}")
if ((print)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

# Node.js and npm build the web pages (web/build.mjs, with the packages
# pinned in web/package-lock.json); any Node.js 18 or newer on PATH will do,
# Debian's otherwise.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages$( ((build_only)) && echo " to build and run" || echo " to build and test"), node and npm are already installed"
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

log=${TMPDIR:-/tmp}/autotune-install-deps.log
echo "install-deps: installing ${missing[*]} (apt-get's output: $log)"
if ! { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "install-deps: apt-get failed; its output is in $log" >&2
  exit 1
fi
echo "install-deps: installed ${#missing[@]} packages"
