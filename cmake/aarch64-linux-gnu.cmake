# Cross-compiles vjit for AArch64 Linux on an x86-64 Debian or Ubuntu host
# (scripts/build.sh Aarch64): the GNU cross compiler, and the arm64 libraries
# of the host's multiarch tree (/usr/lib/aarch64-linux-gnu, installed by
# scripts/install-deps.sh aarch64). Headers are searched on the host, where
# multiarch keeps the arm64 packages' headers too; programs (the host's cmake
# helpers, python3) are the host's. ctest runs the test programs under
# qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), with the cross toolchain's
# C library as its root for the dynamic loader.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# The arm64 multiarch libraries live under / (CMAKE_LIBRARY_ARCHITECTURE
# selects their directory), so / is a root too.
list(APPEND CMAKE_FIND_ROOT_PATH /)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
