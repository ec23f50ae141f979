#include "jit/nvrtc.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "codegen/cuda_source.h"
#include "jit/disk_cache.h"
#include "runtime/cuda_driver.h"
#include "vjit/error.h"

#ifdef VJIT_HAVE_CUDA
#include <nvrtc.h>
#endif

namespace vjit::jit {

#ifdef VJIT_HAVE_CUDA

namespace {

// The NVRTC entry points vjit uses, resolved once.
struct Nvrtc {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) num_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) archs = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  std::string error;  // why it could not be loaded
  int version_number = 0;
  std::vector<int> supported;
};

const Nvrtc& nvrtc() {
  static const Nvrtc loaded = [] {
    Nvrtc n;
    void* handle = runtime::open_first_library({VJIT_NVRTC_SONAME, VJIT_CUDA_LIBRARY_DIR "/" VJIT_NVRTC_SONAME},
                                               "NVRTC", n.error);
    if (!handle) return n;
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, symbol));
      if (!fn && n.error.empty()) n.error = std::string("NVRTC lacks the symbol ") + symbol;
    };
    load(n.version, "nvrtcVersion");
    load(n.error_string, "nvrtcGetErrorString");
    load(n.num_archs, "nvrtcGetNumSupportedArchs");
    load(n.archs, "nvrtcGetSupportedArchs");
    load(n.create, "nvrtcCreateProgram");
    load(n.destroy, "nvrtcDestroyProgram");
    load(n.compile, "nvrtcCompileProgram");
    load(n.log_size, "nvrtcGetProgramLogSize");
    load(n.log, "nvrtcGetProgramLog");
    load(n.cubin_size, "nvrtcGetCUBINSize");
    load(n.cubin, "nvrtcGetCUBIN");
    load(n.ptx_size, "nvrtcGetPTXSize");
    load(n.ptx, "nvrtcGetPTX");
    if (!n.error.empty()) return n;
    int major = 0, minor = 0, count = 0;
    n.version(&major, &minor);
    n.version_number = major * 1000 + minor * 10;
    n.num_archs(&count);
    n.supported.resize(size_t(count));
    if (count > 0) n.archs(n.supported.data());
    return n;
  }();
  return loaded;
}

const Nvrtc& require_nvrtc() {
  const Nvrtc& n = nvrtc();
  VJIT_USER_CHECK(n.error.empty(), n.error);
  return n;
}

// Throws InternalError with `log` when `result` is not success.
void check(const Nvrtc& n, nvrtcResult result, const char* what, const std::string& name, const std::string& log) {
  VJIT_INTERNAL_CHECK(result == NVRTC_SUCCESS, what << " failed for " << name << ": " << n.error_string(result)
                                                    << (log.empty() ? "" : "\ncompiler log:\n" + log));
}

CudaModuleImage compile_with_nvrtc(const std::string& source, int arch, bool ptx, const std::string& name) {
  const Nvrtc& n = require_nvrtc();
  nvrtcProgram program = nullptr;
  check(n, n.create(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr), "nvrtcCreateProgram",
        name, "");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owner(&program, [](nvrtcProgram* p) {
    nvrtc().destroy(p);
  });
  std::vector<std::string> options = codegen::cuda_compile_options();
  options.push_back((ptx ? "--gpu-architecture=compute_" : "--gpu-architecture=sm_") + std::to_string(arch));
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  nvrtcResult compiled = n.compile(program, int(argv.size()), argv.data());
  size_t log_size = 0;
  n.log_size(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) n.log(program, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  check(n, compiled, "nvrtcCompileProgram", name, log);
  CudaModuleImage image;
  image.arch = arch;
  image.ptx = ptx;
  image.log = log;
  size_t size = 0;
  if (ptx) {
    check(n, n.ptx_size(program, &size), "nvrtcGetPTXSize", name, log);
    image.image.resize(size);
    check(n, n.ptx(program, image.image.data()), "nvrtcGetPTX", name, log);
  } else {
    check(n, n.cubin_size(program, &size), "nvrtcGetCUBINSize", name, log);
    image.image.resize(size);
    check(n, n.cubin(program, image.image.data()), "nvrtcGetCUBIN", name, log);
  }
  return image;
}

struct MemoryCache {
  std::mutex mutex;
  std::map<std::string, std::shared_future<std::shared_ptr<const CudaModuleImage>>> modules;
  NvrtcCounters counters;
};

MemoryCache& memory_cache() {
  static MemoryCache cache;
  return cache;
}

}  // namespace

std::string nvrtc_unavailable_reason() { return nvrtc().error; }
int nvrtc_version() { return require_nvrtc().version_number; }
std::vector<int> nvrtc_supported_archs() { return require_nvrtc().supported; }

CudaModuleImage compile_cuda_module(const std::string& source, int arch, const std::string& cache_dir,
                                    const std::string& name) {
  const Nvrtc& n = require_nvrtc();
  VJIT_USER_CHECK(arch > 0 && !n.supported.empty() && arch >= n.supported.front(),
                  "NVRTC " << n.version_number / 1000 << "." << n.version_number % 1000 / 10
                           << " cannot compile for sm_" << arch << " (oldest it targets: sm_"
                           << (n.supported.empty() ? 0 : n.supported.front()) << ")");
  // Newer than NVRTC knows: PTX for the newest architecture it does.
  const bool ptx = std::find(n.supported.begin(), n.supported.end(), arch) == n.supported.end();
  const int target = ptx ? *std::max_element(n.supported.begin(), n.supported.end()) : arch;
  std::string key = "nvrtc " + std::to_string(n.version_number) + (ptx ? " compute_" : " sm_") +
                    std::to_string(target);
  for (const std::string& o : codegen::cuda_compile_options()) key += " " + o;
  key += "\n" + source;

  MemoryCache& cache = memory_cache();
  std::promise<std::shared_ptr<const CudaModuleImage>> promise;
  std::shared_future<std::shared_ptr<const CudaModuleImage>> pending;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.modules.find(key);
    if (it != cache.modules.end()) {
      ++cache.counters.memory_hits;
      pending = it->second;
    } else {
      cache.modules.emplace(key, promise.get_future().share());
    }
  }
  if (pending.valid()) {
    CudaModuleImage image = *pending.get();
    image.from_memory = true;
    return image;
  }
  try {
    DiskCache disk(cache_dir);
    bool damaged = false;
    std::shared_ptr<CudaModuleImage> image;
    if (std::optional<std::string> stored = disk.load(key, &damaged)) {
      image = std::make_shared<CudaModuleImage>();
      image->arch = target;
      image->ptx = ptx;
      image->image = std::move(*stored);
      image->from_disk = true;
    } else {
      auto start = std::chrono::steady_clock::now();
      image = std::make_shared<CudaModuleImage>(compile_with_nvrtc(source, target, ptx, name));
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      disk.store(key, image->image);
      std::lock_guard<std::mutex> lock(cache.mutex);
      ++cache.counters.compiles;
      cache.counters.compile_seconds += seconds;
    }
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      if (image->from_disk) ++cache.counters.disk_hits;
      if (damaged) ++cache.counters.damaged_disk_entries;
    }
    promise.set_value(image);
    return *image;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.modules.erase(key);  // a failed build is not cached
    throw;
  }
}

NvrtcCounters nvrtc_counters() {
  MemoryCache& cache = memory_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.counters;
}

#else  // built without the CUDA toolkit

namespace {
constexpr const char* kNotBuilt =
    "vjit was built without the CUDA toolkit (configure with the toolkit installed and -DVJIT_CUDA=ON)";
}

std::string nvrtc_unavailable_reason() { return kNotBuilt; }
int nvrtc_version() { VJIT_USER_CHECK(false, kNotBuilt); }
std::vector<int> nvrtc_supported_archs() { VJIT_USER_CHECK(false, kNotBuilt); }
CudaModuleImage compile_cuda_module(const std::string&, int, const std::string&, const std::string&) {
  VJIT_USER_CHECK(false, kNotBuilt);
}
NvrtcCounters nvrtc_counters() { return {}; }

#endif

std::string cuda_module_cache_dir(const std::string& cache_dir) {
  if (!cache_dir.empty()) return cache_dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/vjit";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return std::string(home) + "/.cache/vjit";
  return "";
}

}  // namespace vjit::jit
