#!/usr/bin/env bash
# Installs the Debian packages that building and testing autotune need.
# Installs only what is missing (apt-get update runs only then); prints one
# line and changes nothing when everything is present. Runs apt-get directly
# as root, through sudo otherwise. The CUDA toolkit (/usr/local/cuda) is not
# a Debian package and is not installed here.
set -euo pipefail

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
  openssl              # the TLS end-to-end test makes its own certificates
  clang-14             # clang++-14: .ci/check-thread-safety.sh, .ci/fuzz.sh
  libclang-rt-14-dev   # libFuzzer and the sanitizers runtimes (.ci/fuzz.sh)
  lld-14               # links the sanitizer trees (.ci/sanitize.sh)
  lld                  # ld.lld, for GCC: links the Release tree in CI (.ci/test.sh)
  jq                   # reads compile_commands.json for that check
  clang-format-14      # .ci/check-format.sh
  python3              # the Python client and the tests that read exported configs
  python3-grpcio       # the Python client (client/python)
  python3-protobuf
  python3-yaml         # deploy/test_deploy.py reads the Kubernetes manifests
  systemd              # systemd-analyze verifies deploy/autotuned.service
  chromium             # the browser tests of the report and the admin page (web/tests)
)

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
  echo "install-deps: all ${#packages[@]} build and test packages, node and npm are already installed"
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

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
