#!/usr/bin/env bash
# What CI runs (.ci/run): installs what is missing, then
#   1. builds Release and runs every test (the Python module's among them,
#      against the build tree; the installed package is checked by
#      scripts/check_pip_install.sh, outside CI: docs/development.md);
#   2. when the CUDA toolkit was found (the GPU back end is built), builds and
#      tests the configuration without it (-DVJIT_CUDA=OFF), so both stay green;
#   3. builds the test programs under AddressSanitizer + UndefinedBehaviorSanitizer
#      (scripts/build.sh Sanitize, Debug) and runs every test but the layering
#      checks (compile probes, the same in every build);
#   4. builds the programs with a test labelled `threads` (tests/CMakeLists.txt)
#      under ThreadSanitizer (scripts/build.sh Thread) and runs those tests with
#      the GEMM back ends they choose themselves (each of oneDNN, OpenBLAS, BLIS
#      and the reference was measured clean under TSan with these tests);
#   5. runs every fuzz target (scripts/fuzz.sh, build-fuzz/) for
#      VJIT_CI_FUZZ_SECONDS seconds each (default 30) on its seed corpus;
#   6. cross-builds for AArch64 (scripts/build.sh Aarch64, build-aarch64/) the
#      programs holding a test labelled `aarch64` (tests/CMakeLists.txt) and
#      runs those tests under qemu-aarch64: the AArch64 code generator's fused
#      kernels and vector math, the kernel cache, and the engine against the
#      reference interpreter for the Tree-LSTM, Var-LSTM and Lattice-LSTM
#      under every batching policy (docs/aarch64.md: what it costs).
# Any failure stops it with a non-zero status.
set -euo pipefail
cd "$(dirname "$0")/.."

stage() { echo "=== test.sh: $* ($(date +%T))" >&2; }

scripts/install-deps.sh

stage "Release"
scripts/build.sh Release
ctest --test-dir build --output-on-failure -j2
if grep -q '^VJIT_HAVE_CUDA:INTERNAL=ON' build/CMakeCache.txt; then
  stage "NoCuda"
  scripts/build.sh NoCuda
  ctest --test-dir build-nocuda --output-on-failure -j2
fi

stage "ASan + UBSan"
scripts/build.sh Sanitize all_tests
ctest --test-dir build-asan --output-on-failure -j2 -E '^layering[.]'

stage "TSan (tests labelled threads)"
scripts/build.sh Thread threaded_tests
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  ctest --test-dir build-tsan --output-on-failure -j2 -L threads

stage "fuzzing"
scripts/fuzz.sh "${VJIT_CI_FUZZ_SECONDS:-30}"

stage "AArch64 (cross build, tests labelled aarch64 under qemu-aarch64)"
scripts/install-deps.sh aarch64
scripts/build.sh Aarch64 aarch64_tests
ctest --test-dir build-aarch64 --output-on-failure -j2 -L aarch64
stage "done"
