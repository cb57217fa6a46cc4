#!/usr/bin/env bash
# Installs what is missing, builds everything in build/ (Release,
# warnings are errors for the project's targets) and runs every test.
# Exits with ctest's status.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"

status=0
ctest --test-dir build --output-on-failure -j2 || status=$?
exit "$status"
