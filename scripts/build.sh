#!/usr/bin/env bash
# Configures and builds vjit with Ninja on all cores.
#   scripts/build.sh [Release|Debug|Sanitize] [ninja targets...]
#   Release  -> build/        (default)
#   Debug    -> build-debug/
#   Sanitize -> build-asan/   (Debug with -DVJIT_SANITIZE=ON: ASan + UBSan)
#   NoCuda   -> build-nocuda/ (Release with -DVJIT_CUDA=OFF: no GPU back end)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-Release}"
if [[ $# -gt 0 ]]; then shift; fi

case "$mode" in
  Release)  dir=build;       flags=(-DCMAKE_BUILD_TYPE=Release -DVJIT_SANITIZE=OFF) ;;
  Debug)    dir=build-debug; flags=(-DCMAKE_BUILD_TYPE=Debug -DVJIT_SANITIZE=OFF) ;;
  Sanitize) dir=build-asan;  flags=(-DCMAKE_BUILD_TYPE=Debug -DVJIT_SANITIZE=ON) ;;
  NoCuda)   dir=build-nocuda; flags=(-DCMAKE_BUILD_TYPE=Release -DVJIT_SANITIZE=OFF -DVJIT_CUDA=OFF) ;;
  *)
    echo "build.sh: unknown mode '$mode'; valid modes: Release, Debug, Sanitize, NoCuda" >&2
    exit 2
    ;;
esac

# ccache, when installed, makes rebuilds of unchanged files free (optional).
if command -v ccache >/dev/null 2>&1; then flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
ninja -C "$dir" -j "$jobs" "$@"
