#!/usr/bin/env bash
# `pip install .` as docs/python.md has it, then the installed package tested:
# a fresh virtual environment (Debian's numpy and pytest through
# --system-site-packages), the package built by scikit-build-core (its build
# environment from PyPI, pybind11 among it), and then, from outside the source
# tree so that nothing but the installed package can be imported: the SST
# example trains two epochs on a slice of the shipped data and prints its
# accuracies, and the module's pytest files run against it (the stubs'
# docstrings against the installed module's, too).
#   scripts/check_pip_install.sh      (after scripts/build.sh Release, whose
#                                      checkpoint_tool the checkpoint tests use)
# The wheel is built in build-pip/, beside build/ and as deep: with ccache, and
# the compiler and -Werror as in build/, the library's objects are the Release
# build's.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 -m venv --system-site-packages "$work/venv"
build_env=()
if command -v ccache >/dev/null 2>&1; then build_env+=(CMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# The compiler of build/ by the same name (ccache hashes the name it is called by).
compiler="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/CMakeCache.txt 2>/dev/null || true)"
if [[ -n "$compiler" ]]; then build_env+=(CXX="$compiler"); fi
env "${build_env[@]}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$work/venv/bin/pip" install --quiet --disable-pip-version-check \
  --config-settings=build-dir="$root/build-pip" --config-settings=cmake.define.VJIT_WERROR=ON "$root"

cd "$work"
installed="$("$work/venv/bin/python" -c 'import vjit; print(vjit.__file__)')"
[[ "$installed" == "$work/venv/"* ]] || { echo "check_pip_install: imported vjit from $installed" >&2; exit 1; }

for split in train dev test; do
  gunzip -c "$root/data/sst/$split.txt.gz" > "$work/full_$split.txt"
  head -n 200 "$work/full_$split.txt" > "$work/$split.txt"
done
"$work/venv/bin/python" "$root/examples/python/tree_lstm_sst.py" --epochs 2 --data "$work/train.txt" \
  --dev "$work/dev.txt" --test "$work/test.txt" --save-best "$work/best.safetensors" | tee "$work/out"
grep -q '^epoch 2: loss ' "$work/out" && grep -q 'test acc' "$work/out" ||
  { echo "check_pip_install: the installed package did not train" >&2; exit 1; }

if [[ -x "$root/build/tests/checkpoint_tool" ]]; then export CHECKPOINT_TOOL="$root/build/tests/checkpoint_tool"; fi
"$work/venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$root/python/tests"
