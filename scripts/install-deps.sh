#!/usr/bin/env bash
# Installs the Debian packages vjit needs to build, test and benchmark, and only
# those that are missing. Quiet and quick when everything is present; safe with
# `set -euo pipefail` and without a terminal (CI).
set -euo pipefail

# Every dependency, by Debian package name. Add new ones here (and to the
# Dependencies table in docs/development.md).
PACKAGES=(
  g++
  cmake
  ninja-build
  pkg-config
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libxbyak-dev
  libboost-graph-dev
  nlohmann-json3-dev
  zlib1g-dev
  libopenblas-dev
  libblis-dev
  libdnnl-dev
  libxsmm-dev
  python3-numpy
  clang
  libclang-rt-14-dev
  libopenmpi-dev  # optional: data-parallel training (vjit/distributed.h); the build works without it
  openmpi-bin
  doxygen  # the API reference (target api_docs, ctest api_docs)
)

missing=()
for package in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: missing packages (${missing[*]}) and not root, and sudo is not available" >&2
    exit 1
  fi
  as_root=(sudo -n)
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
echo "install-deps: done" >&2
