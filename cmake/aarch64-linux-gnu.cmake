# Cross-compiles vjit for AArch64 Linux on an x86-64 Debian or Ubuntu host
# (scripts/build.sh Aarch64): the GNU cross compiler, and the arm64 libraries
# of the host's multiarch tree (/usr/lib/aarch64-linux-gnu, installed by
# scripts/install-deps.sh aarch64). Headers are searched on the host, where
# multiarch keeps the arm64 packages' headers too; programs (the host's cmake
# helpers, python3) are the host's. ctest runs the test programs under
# qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), with / as the guest's root: the
# programs load the multiarch arm64 libraries, whose C library (libc6:arm64)
# must come with its own dynamic loader (/lib/ld-linux-aarch64.so.1).
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

# Not -L /usr/aarch64-linux-gnu: that root gives the loader of the cross
# toolchain's C library (libc6-arm64-cross), which then loads libc.so.6 from
# the multiarch tree, a different build of glibc. The two disagree on the
# loader's private data, and the first pthread_create loops forever in glibc's
# stack cache (a hang of every test that starts a thread: the thread pool,
# OpenBLAS's threads at its dlopen, std::thread).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
