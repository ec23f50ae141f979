#!/usr/bin/env bash
# vjit as a package, tested as a user outside the repository would use it
# (ctest: package.consumer). Uses an already-built build directory:
#   1. cmake --install <build> --prefix <work>/prefix, and checks the tree:
#      include/ holds vjit/ and nothing else (no internal header), the archive,
#      the CMake package files and vjit.pc are there;
#   2. find_package: builds tests/consumer against the prefix and runs it;
#      neither its link command, nor its binary (ldd), nor vjit::vjit's
#      exported link interface names MPI; the exported link interfaces
#      (vjit*Targets.cmake) name targets and library names, no absolute path
#      of the machine that built vjit;
#   2b. find_package(vjit COMPONENTS distributed): builds consumer_distributed
#      (vjit::distributed) and runs its one-process sums; a component vjit does
#      not have fails find_package with a message naming it;
#   3. pkg-config: compiles tests/consumer/main.cpp with
#      `pkg-config --cflags --libs vjit` alone and runs it, and
#      tests/consumer/distributed.cpp with `... vjit-distributed`; neither
#      gives a library by absolute path;
#   4. add_subdirectory: configures tests/consumer with vjit added from its
#      source (the project fails to configure if vjit's tests, examples or
#      benchmarks appear); builds and runs it only with
#      VJIT_CONSUMER_BUILD_SUBDIRECTORY=1, since that compiles all of vjit again.
#
#   tests/consumer/check.sh BUILD_DIR SOURCE_DIR CXX WORK_DIR ARCH
# ARCH is the build's VJIT_ARCH (x86_64 or aarch64): the code generators of
# the other architecture (codegen/x86_*, codegen/a64_*) are not in its library.
set -euo pipefail
# No `| grep -q` under pipefail: grep -q stops at the first match, and the
# writer killed by SIGPIPE fails the pipeline (a pass read as a failure, or
# the other way round, depending on timing).
if [[ $# -ne 5 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR CXX WORK_DIR ARCH" >&2
  exit 2
fi
build="$1" source="$2" cxx="$3" work="$4" arch="$5"
consumer="$source/tests/consumer"
prefix="$work/prefix"

fail() { echo "package.consumer: $*" >&2; exit 1; }
step() { echo "--- $*"; }
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

rm -rf "$work"
mkdir -p "$work"

step "install $build into $prefix"
[[ -f $build/libvjit.a ]] || fail "$build/libvjit.a is missing: build the target vjit_library first (ninja vjit_library)"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log" >&2; fail "cmake --install failed"; }
[[ $(ls "$prefix/include") == vjit ]] || fail "include/ holds more than vjit/: $(ls "$prefix/include" | tr '\n' ' ')"
[[ -f $prefix/include/vjit/vjit.h && -f $prefix/include/vjit/models.h ]] || fail "vjit/vjit.h or vjit/models.h not installed"
archive="$(find "$prefix" -name libvjit.a)"
distributed_archive="$(find "$prefix" -name libvjit_distributed.a)"
[[ -n $distributed_archive ]] || fail "libvjit_distributed.a (the component distributed) is not installed"
ar t "$distributed_archive" | grep -x world.cpp.o >/dev/null || fail "libvjit_distributed.a lacks world.cpp.o (distributed/)"
# MPI is called from distributed/ only: nothing in libvjit.a may need it.
if nm -u "$archive" 2>/dev/null | grep ' MPI_' >/dev/null; then fail "libvjit.a calls MPI: $(nm -u "$archive" | grep ' MPI_' | sort -u | head -3 | tr '\n' ' ')"; fi
config="$(find "$prefix" -name vjitConfig.cmake)"
version="$(find "$prefix" -name vjitConfigVersion.cmake)"
pc="$(find "$prefix" -name vjit.pc)"
[[ -n $archive && -n $config && -n $version && -n $pc ]] ||
  fail "missing from the install: libvjit.a='$archive' vjitConfig.cmake='$config' vjitConfigVersion.cmake='$version' vjit.pc='$pc'"
# Every module's code is in the archive (one object per .cpp of each module folder).
for folder in ir io scheduler layout data codegen runtime jit models; do
  for cpp in "$source/$folder"/*.cpp; do
    object="$(basename "$cpp").o"
    case "$object" in
      x86_*) [[ $arch == x86_64 ]] || continue ;;
      a64_*) [[ $arch == aarch64 ]] || continue ;;
    esac
    ar t "$archive" | grep -x "$object" >/dev/null || fail "libvjit.a lacks $object ($folder/)"
  done
done
echo "installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

step "find_package(vjit) against the installed tree"
cmake -S "$consumer" -B "$work/find_package" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" >"$work/find_package.log" ||
  { cat "$work/find_package.log" >&2; fail "configuring the consumer with find_package failed"; }
cmake --build "$work/find_package" >>"$work/find_package.log" ||
  { cat "$work/find_package.log" >&2; fail "building the consumer with find_package failed"; }
"$work/find_package/consumer" || fail "the consumer built with find_package failed"
targets="$(dirname "$config")/vjitTargets.cmake"
names_mpi() { grep -E "MPI::|libmpi|-lmpi"; }
if names_mpi <"$targets"; then fail "vjit::vjit's exported link interface ($targets) names MPI (above)"; fi
# A path in a link interface is the build machine's: a consumer's machine may
# keep the library elsewhere, or not at all. Every system library must be a
# target that vjitConfig.cmake finds again (vjit_system::dnnl, ZLIB::ZLIB) or a
# plain name (dl, m).
for exported in "$(dirname "$config")"/vjit*Targets.cmake; do
  link_lines="$(grep -E '^[[:space:]]*INTERFACE_LINK_LIBRARIES' "$exported" || true)"
  [[ $exported != "$targets" || -n $link_lines ]] || fail "$targets has no INTERFACE_LINK_LIBRARIES to check"
  paths="$(grep -oE '(^|[";:])/[^";>]*' <<<"$link_lines" || true)"
  [[ -z $paths ]] || fail "$(basename "$exported")'s link interface holds absolute paths: $(tr '\n' ' ' <<<"$paths")"
done
echo "exported link interfaces: $(grep -hE '^[[:space:]]*INTERFACE_LINK_LIBRARIES' "$(dirname "$config")"/vjit*Targets.cmake | tr -s ' ' | tr '\n' ' ')"
if [[ -f $work/find_package/build.ninja ]]; then
  link_command="$(ninja -C "$work/find_package" -t commands consumer | tail -n 1)"
else
  link_command="$(cat "$work/find_package/CMakeFiles/consumer.dir/link.txt")"
fi
if names_mpi <<<"$link_command"; then fail "the consumer's link command names MPI: $link_command"; fi
if ldd "$work/find_package/consumer" | grep -i "libmpi"; then fail "the consumer built with find_package(vjit) loads MPI (above)"; fi
echo "find_package(vjit): the consumer links no MPI (exported link interface, link command, ldd)"

step "find_package(vjit COMPONENTS distributed) against the installed tree"
expect_mpi=none
if grep -q "set(vjit_distributed_MPI ON)" "$config"; then expect_mpi=mpi; fi
cmake -S "$consumer" -B "$work/distributed" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DVJIT_CONSUMER_COMPONENTS=distributed >"$work/distributed.log" ||
  { cat "$work/distributed.log" >&2; fail "configuring the consumer with COMPONENTS distributed failed"; }
cmake --build "$work/distributed" >>"$work/distributed.log" ||
  { cat "$work/distributed.log" >&2; fail "building the consumer with COMPONENTS distributed failed"; }
"$work/distributed/consumer_distributed" "$expect_mpi" || fail "consumer_distributed (vjit::distributed, one process) failed"
if [[ $expect_mpi == mpi ]]; then
  ldd "$work/distributed/consumer_distributed" | grep "libmpi" >/dev/null || fail "consumer_distributed does not load MPI, yet vjit was built with it"
fi
if cmake -S "$consumer" -B "$work/no_such_component" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DVJIT_CONSUMER_COMPONENTS=no_such_component >"$work/no_such_component.log" 2>&1; then
  fail "find_package(vjit COMPONENTS no_such_component) succeeded"
fi
grep -q "vjit has no component 'no_such_component'" "$work/no_such_component.log" ||
  { cat "$work/no_such_component.log" >&2; fail "find_package(vjit COMPONENTS no_such_component) failed without naming the component"; }
echo "find_package(vjit COMPONENTS no_such_component) fails naming it"

step "pkg-config vjit"
command -v pkg-config >/dev/null 2>&1 || fail "pkg-config not found (scripts/install-deps.sh installs it)"
export PKG_CONFIG_PATH="$(dirname "$pc")"
pkg-config --exists vjit || fail "pkg-config does not find vjit in $PKG_CONFIG_PATH"
flags="$(pkg-config --cflags --libs vjit)"
echo "pkg-config --cflags --libs vjit: $flags"
mkdir -p "$work/pkg_config"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++20 -O1 "$consumer/main.cpp" $flags -o "$work/pkg_config/consumer" ||
  fail "compiling the consumer with pkg-config's flags failed"
"$work/pkg_config/consumer" || fail "the consumer built with pkg-config failed"
no_paths_in() {  # the library words of a pkg-config --libs line: -L<dir>, -l<name>, -l:<file>; no /path/lib.so
  local found
  found="$(tr ' ' '\n' <<<"$2" | grep -E '^/' || true)"
  [[ -z $found ]] || fail "pkg-config --libs $1 gives libraries by absolute path: $(tr '\n' ' ' <<<"$found")"
}
no_paths_in vjit "$(pkg-config --libs vjit)"
[[ -f $(dirname "$pc")/vjit-distributed.pc ]] || fail "vjit-distributed.pc (the component distributed) is not installed"
pkg-config --exists vjit-distributed || fail "pkg-config does not find vjit-distributed in $PKG_CONFIG_PATH"
distributed_flags="$(pkg-config --cflags --libs vjit-distributed)"
echo "pkg-config --cflags --libs vjit-distributed: $distributed_flags"
no_paths_in vjit-distributed "$(pkg-config --libs vjit-distributed)"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++20 -O1 "$consumer/distributed.cpp" $distributed_flags -o "$work/pkg_config/consumer_distributed" ||
  fail "compiling consumer_distributed with pkg-config's flags failed"
"$work/pkg_config/consumer_distributed" "$expect_mpi" || fail "consumer_distributed built with pkg-config failed"

step "add_subdirectory(vjit)"
cmake -S "$consumer" -B "$work/add_subdirectory" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DVJIT_CONSUMER_SOURCE="$source" >"$work/add_subdirectory.log" ||
  { cat "$work/add_subdirectory.log" >&2; fail "configuring the consumer with add_subdirectory(vjit) failed"; }
if [[ ${VJIT_CONSUMER_BUILD_SUBDIRECTORY:-0} == 1 ]]; then
  cmake --build "$work/add_subdirectory" >>"$work/add_subdirectory.log" ||
    { tail -50 "$work/add_subdirectory.log" >&2; fail "building the consumer with add_subdirectory(vjit) failed"; }
  "$work/add_subdirectory/consumer" || fail "the consumer built with add_subdirectory(vjit) failed"
else
  echo "configured, without vjit's tests, examples or benchmarks; not built (VJIT_CONSUMER_BUILD_SUBDIRECTORY=1 builds it: all of vjit again)"
fi
echo "package.consumer: passed"
