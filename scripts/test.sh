#!/usr/bin/env bash
# Installs what is missing, builds Release and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh Release
ctest --test-dir build --output-on-failure -j2
