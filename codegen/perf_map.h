#pragma once
// The perf map: JIT code named for `perf report`, whatever the architecture.
#include <cstddef>
#include <string>

namespace vjit::codegen {

// Appends "addr size name" (hex address and size) to /tmp/perf-<pid>.map so
// `perf report` names JIT code. Kernels call it when built with perf_map set
// (Options::perf_map, VJIT_PERF_MAP, parsed by the jit layer, not here).
void register_perf_map(const void* code, std::size_t size, const std::string& name);

}  // namespace vjit::codegen
