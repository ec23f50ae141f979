#!/usr/bin/env bash
# Installs what is missing, builds Release and runs every test. When the CUDA
# toolkit was found (the GPU back end is built), it also builds and tests the
# configuration without it (-DVJIT_CUDA=OFF), so both stay green.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh Release
ctest --test-dir build --output-on-failure -j2
if grep -q '^VJIT_HAVE_CUDA:INTERNAL=ON' build/CMakeCache.txt; then
  scripts/build.sh NoCuda
  ctest --test-dir build-nocuda --output-on-failure -j2
fi
