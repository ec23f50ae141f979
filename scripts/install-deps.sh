#!/usr/bin/env bash
# Installs the Debian packages vjit needs to build, test and benchmark, and only
# those that are missing. Quiet and quick when everything is present; safe with
# `set -euo pipefail` and without a terminal (CI).
#   scripts/install-deps.sh           the native build's packages
#   scripts/install-deps.sh aarch64   also what the AArch64 cross build and its
#                                     tests under emulation need (scripts/build.sh
#                                     Aarch64): the arm64 architecture for dpkg,
#                                     the cross compiler, qemu-user and the arm64
#                                     libraries
set -euo pipefail

cross=""
case "${1:-}" in
  "") ;;
  aarch64) cross=aarch64 ;;
  *) echo "install-deps: unknown argument '$1' (valid: aarch64)" >&2; exit 2 ;;
esac

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
  python3-dev  # the Python module (python/): Python.h
  pybind11-dev  # the Python module's bindings
  python3-pytest  # the Python module's tests (ctest python.*)
  python3-venv  # pip install . into a virtual environment (docs/python.md)
  clang
  libclang-rt-14-dev
  libopenmpi-dev  # optional: data-parallel training (vjit/distributed.h); the build works without it
  openmpi-bin
  doxygen  # the API reference (target api_docs, ctest api_docs)
)

# The AArch64 cross build's packages: multiarch arm64 libraries beside the
# host's. oneDNN is not among them: Debian's libdnnl-dev:arm64 cannot be
# installed beside libdnnl-dev (their dnnl_config.h differ), so the cross build
# uses OpenBLAS; a native ARM machine installs the list above, oneDNN included.
AARCH64_PACKAGES=(
  g++-aarch64-linux-gnu
  qemu-user
  libasmjit-dev:arm64
  libgtest-dev:arm64
  libgmock-dev:arm64
  libopenblas-dev:arm64
  zlib1g-dev:arm64
  libboost-dev:arm64
)

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  as_root=(sudo -n)
fi

if [[ "$cross" == aarch64 ]]; then
  PACKAGES+=("${AARCH64_PACKAGES[@]}")
  if ! dpkg --print-foreign-architectures | grep -x arm64 >/dev/null; then
    echo "install-deps: adding the arm64 architecture to dpkg" >&2
    "${as_root[@]}" dpkg --add-architecture arm64
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
  fi
fi

# A package of the host's architecture unless named with one (libgtest-dev
# means libgtest-dev:amd64 on amd64 even where libgtest-dev:arm64 is installed
# too); an Architecture: all package has none.
native_arch="$(dpkg --print-architecture)"
package_status() {
  if [[ "$1" != *:* ]] && dpkg-query -W "$1:$native_arch" >/dev/null 2>&1; then
    dpkg-query -W -f='${db:Status-Status}' "$1:$native_arch" 2>/dev/null || true
  else
    dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true
  fi
}

missing=()
for package in "${PACKAGES[@]}"; do
  status="$(package_status "$package")"
  if [[ "$status" != "installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2

if [[ "$(id -u)" -ne 0 ]] && ! command -v sudo >/dev/null 2>&1; then
  echo "install-deps: missing packages (${missing[*]}) and not root, and sudo is not available" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
echo "install-deps: done" >&2
