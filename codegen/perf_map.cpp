#include "codegen/perf_map.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <mutex>

namespace vjit::codegen {

void register_perf_map(const void* code, std::size_t size, const std::string& name) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) return;  // profiling aid only: never fail a kernel for it
  std::fprintf(file, "%" PRIxPTR " %zx %s\n", reinterpret_cast<std::uintptr_t>(code), size,
               name.c_str());
  std::fclose(file);
}

}  // namespace vjit::codegen
