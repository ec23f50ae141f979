#!/usr/bin/env bash
# Configures and builds vjit with Ninja on all cores.
#   scripts/build.sh [Release|Debug|Sanitize|NoCuda|Thread|Fuzz] [ninja targets...]
#   Release  -> build/        (default)
#   Debug    -> build-debug/
#   Sanitize -> build-asan/   (Debug with -DVJIT_SANITIZE=ON: ASan + UBSan)
#   NoCuda   -> build-nocuda/ (Release with -DVJIT_CUDA=OFF: no GPU back end)
#   Thread   -> build-tsan/   (-O1 with line tables, -DVJIT_TSAN=ON: ThreadSanitizer, gcc; no GPU back end)
#   Fuzz     -> build-fuzz/   (clang++, -O1 with line tables, -DVJIT_FUZZ=ON: libFuzzer targets of fuzz/,
#                              every library with ASan + UBSan; no GPU back end)
#   Aarch64  -> build-aarch64/ (Release cross-compiled for AArch64 Linux with
#                              cmake/aarch64-linux-gnu.cmake; no GPU back end, no MPI;
#                              ctest runs the tests under qemu-aarch64. Needs
#                              scripts/install-deps.sh aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-Release}"
if [[ $# -gt 0 ]]; then shift; fi

case "$mode" in
  Release)  dir=build;       flags=(-DCMAKE_BUILD_TYPE=Release -DVJIT_SANITIZE=OFF) ;;
  Debug)    dir=build-debug; flags=(-DCMAKE_BUILD_TYPE=Debug -DVJIT_SANITIZE=OFF) ;;
  Sanitize) dir=build-asan;  flags=(-DCMAKE_BUILD_TYPE=Debug -DVJIT_SANITIZE=ON -DVJIT_PYTHON=OFF) ;;
  NoCuda)   dir=build-nocuda; flags=(-DCMAKE_BUILD_TYPE=Release -DVJIT_SANITIZE=OFF -DVJIT_CUDA=OFF -DVJIT_PYTHON=OFF) ;;
  # The modes below build no GPU back end: nothing runs it on a machine
  # without a GPU, and it would only lengthen the build. Nor do they, or
  # NoCuda, build the Python module (python/): an instrumented module would
  # not load into an uninstrumented interpreter, and Release tests it.
  Thread)   dir=build-tsan;  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
                                   -DVJIT_SANITIZE=OFF -DVJIT_TSAN=ON -DVJIT_CUDA=OFF -DVJIT_PYTHON=OFF) ;;
  Fuzz)     dir=build-fuzz;  flags=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
                                   "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
                                   -DVJIT_SANITIZE=OFF -DVJIT_FUZZ=ON -DVJIT_CUDA=OFF -DVJIT_PYTHON=OFF) ;;
  Aarch64)  dir=build-aarch64; flags=(-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
                                   -DCMAKE_BUILD_TYPE=Release -DVJIT_SANITIZE=OFF -DVJIT_CUDA=OFF -DVJIT_MPI=OFF -DVJIT_PYTHON=OFF) ;;
  *)
    echo "build.sh: unknown mode '$mode'; valid modes: Release, Debug, Sanitize, NoCuda, Thread, Fuzz, Aarch64" >&2
    exit 2
    ;;
esac

# ccache, when installed, makes rebuilds of unchanged files free (optional).
if command -v ccache >/dev/null 2>&1; then flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
ninja -C "$dir" -j "$jobs" "$@"
