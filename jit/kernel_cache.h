#pragma once
// The kernel cache: one compiled kernel per (canonical kernel spec, ISA), so a
// group that appears in two vertex types or two engines compiles once.
// Thread-safe; concurrent misses of one key wait on a single build (a shared
// future); a failed build is never cached.
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>

#include "codegen/kernel_spec.h"
#include "codegen/isa.h"

namespace vjit::jit {

// A kernel as data: entry(&args) with args.context = context runs it —
// generated code, or for Isa::Scalar the reference kernel reading its spec
// from the context.
struct CompiledKernel {
  std::string name;
  codegen::Isa isa = codegen::Isa::Scalar;
  size_t code_bytes = 0;
  ir::KernelFn entry = nullptr;
  const void* context = nullptr;
  std::shared_ptr<const void> owner;  // keeps generated code (or the spec) alive

  void run(ir::KernelArgs args) const {
    args.context = context;
    entry(&args);
  }
};

struct KernelCacheCounters {
  int64_t compiles = 0;
  int64_t hits = 0;
  double compile_seconds = 0;
};

// A kernel and whether the cache already held it (or was building it).
struct KernelLookup {
  std::shared_ptr<const CompiledKernel> kernel;
  bool hit = false;
};

class KernelCache {
 public:
  static KernelCache& global();

  // The kernel of `spec` for `isa`, built on a miss. `perf_map` names its code
  // in the perf map, once per kernel: when this call builds it, or when an
  // earlier engine without VJIT_PERF_MAP built it (the flag is not part of
  // the key: it does not change the code). Throws what the build throws
  // (codegen refuses a spec with an InternalError).
  KernelLookup lookup(const codegen::KernelSpec& spec, codegen::Isa isa, bool perf_map = false);
  std::shared_ptr<const CompiledKernel> get(const codegen::KernelSpec& spec, codegen::Isa isa) {
    return lookup(spec, isa).kernel;
  }
  KernelCacheCounters counters() const;

  // For tests of the refusal path: while set, a JIT build (not Isa::Scalar)
  // whose spec satisfies `refuse` throws InternalError as codegen would.
  // Pass an empty function to clear it.
  void refuse_builds_for_testing(std::function<bool(const codegen::KernelSpec&)> refuse);

 private:
  std::shared_ptr<const CompiledKernel> build(const codegen::KernelSpec& spec, codegen::Isa isa, bool perf_map);
  void name_in_perf_map(const CompiledKernel& kernel);

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> kernels_;
  KernelCacheCounters counters_;
  std::function<bool(const codegen::KernelSpec&)> refuse_;  // guarded by mutex_
  std::set<const void*> perf_mapped_;  // entries named in the perf map; guarded by mutex_
};

}  // namespace vjit::jit
