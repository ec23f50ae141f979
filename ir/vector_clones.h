#pragma once
// VJIT_VECTOR_CLONES: a function compiled for several ISAs, the best one for
// the CPU picked when the library is loaded (GCC function multi-versioning).
// The build has no -march flag, so a plain loop alone would only get SSE2. A
// file whose loops carry it is compiled with -ffp-contract=off
// (CMakeLists.txt), so that no clone fuses a multiply and an add: every clone
// computes the same float operations and gives the same results.
// Not under ThreadSanitizer: the clones' resolver runs while the dynamic loader
// relocates the program, before the TSan runtime is set up, and its
// instrumentation crashes there (scripts/build.sh Thread).
#if defined(__SANITIZE_THREAD__)
#define VJIT_VECTOR_CLONES
#elif defined(__x86_64__) && defined(__GNUC__) && __has_attribute(target_clones)
#define VJIT_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define VJIT_VECTOR_CLONES
#endif
