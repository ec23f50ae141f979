#pragma once
// CUDA modules compiled at run time by NVRTC, cached in memory and on disk.
//
// NVRTC is loaded with dlopen (VJIT_NVRTC_SONAME, then the toolkit's lib
// directory the build found), like the driver: a binary built with the CUDA
// toolkit starts on a machine without it and says what is missing only when a
// CUDA module is asked for. The toolkit's header gives the function types.
//
// A module is compiled for the device's own architecture as a cubin (NVRTC runs
// ptxas itself, so a cubin is also the proof that the code assembles); for an
// architecture newer than NVRTC can target it is PTX for the newest one it can,
// which the driver compiles on load. Every error carries the compiler log.
//
// Cache: in memory per (source, architecture, NVRTC version, options), with
// concurrent misses of one key waiting on a single build and failed builds
// never kept; and on disk under `cache_dir` (jit/disk_cache.h) when it is set
// (the engine passes cuda_module_cache_dir: the user's cache directory by default).
#include <cstdint>
#include <string>
#include <vector>

namespace vjit::jit {

struct CudaModuleImage {
  int arch = 0;         // sm_<arch> for a cubin; compute_<arch> for PTX
  bool ptx = false;     // PTX text rather than a cubin
  std::string image;    // what cuModuleLoadData takes
  std::string log;      // the compiler's log (warnings)
  bool from_disk = false;
  bool from_memory = false;
};

struct NvrtcCounters {
  int64_t compiles = 0, memory_hits = 0, disk_hits = 0, damaged_disk_entries = 0;
  double compile_seconds = 0;
};

// "" when NVRTC can compile here; otherwise why not (built without the CUDA
// toolkit, or the library could not be loaded, with dlopen's message).
std::string nvrtc_unavailable_reason();
// NVRTC's version as major·1000 + minor·10 (13000 for 13.0). Throws UserError
// with the reason when NVRTC is unavailable.
int nvrtc_version();
// The sm_<arch> numbers NVRTC can make a cubin for (75, 80, 86, 89, 90, ...).
std::vector<int> nvrtc_supported_archs();

// Compiles `source` for sm_<arch>. `name` names the module in errors. Throws
// UserError when NVRTC is unavailable, InternalError with the log when the
// source does not compile (generated code that does not compile is our bug).
CudaModuleImage compile_cuda_module(const std::string& source, int arch, const std::string& cache_dir,
                                    const std::string& name = "vjit module");

NvrtcCounters nvrtc_counters();

// Where compiled CUDA modules are kept on disk: `cache_dir` (VJIT_CACHE_DIR)
// when set, else the user's cache directory — $XDG_CACHE_HOME/vjit, or
// $HOME/.cache/vjit — and "" (memory only) when neither variable is set.
std::string cuda_module_cache_dir(const std::string& cache_dir);

}  // namespace vjit::jit
