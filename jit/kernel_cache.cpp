#include "jit/kernel_cache.h"

#include <chrono>

#include "codegen/jit_kernels.h"
#include "codegen/perf_map.h"
#include "vjit/error.h"

namespace vjit::jit {

KernelCache& KernelCache::global() {
  static KernelCache cache;
  return cache;
}

namespace {
// The reference kernel behind the kernel ABI: the spec comes as the context.
void reference_entry(const ir::KernelArgs* args) {
  codegen::run_reference_kernel(*static_cast<const codegen::KernelSpec*>(args->context), *args);
}
}  // namespace

std::shared_ptr<const CompiledKernel> KernelCache::build(const codegen::KernelSpec& spec, codegen::Isa isa,
                                                        bool perf_map) {
  auto kernel = std::make_shared<CompiledKernel>();
  kernel->isa = isa;
  if (isa == codegen::Isa::Scalar) {
    auto owned = std::make_shared<const codegen::KernelSpec>(spec);
    kernel->name = codegen::fused_kernel_name(spec, isa);  // "vjit_fused_scalar_w..."
    kernel->entry = &reference_entry;
    kernel->context = owned.get();
    kernel->owner = owned;
    return kernel;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    VJIT_INTERNAL_CHECK(!refuse_ || !refuse_(spec), "kernel refused for testing (KernelCache::refuse_builds_for_testing)");
  }
  std::shared_ptr<const codegen::FusedKernel> code = codegen::compile_fused_kernel(spec, isa, perf_map);
  kernel->name = code->name();
  kernel->code_bytes = code->code_bytes();
  kernel->entry = code->function();
  kernel->owner = code;
  return kernel;
}

KernelLookup KernelCache::lookup(const codegen::KernelSpec& spec, codegen::Isa isa, bool perf_map) {
  std::string key = std::string(codegen::isa_name(isa)) + " " + spec.key();
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(key);
    if (it != kernels_.end()) {
      ++counters_.hits;
      pending = it->second;
    } else {
      kernels_.emplace(key, promise.get_future().share());
    }
  }
  if (pending.valid()) {  // built, or being built by another thread
    std::shared_ptr<const CompiledKernel> kernel = pending.get();
    if (perf_map) name_in_perf_map(*kernel);
    return {kernel, true};
  }
  auto start = std::chrono::steady_clock::now();
  try {
    std::shared_ptr<const CompiledKernel> kernel = build(spec, isa, perf_map);
    promise.set_value(kernel);
    std::lock_guard<std::mutex> lock(mutex_);
    if (perf_map && kernel->code_bytes > 0) perf_mapped_.insert(reinterpret_cast<const void*>(kernel->entry));
    ++counters_.compiles;
    counters_.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {kernel, false};
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mutex_);
    kernels_.erase(key);  // a failed build is not cached
    throw;
  }
}

// A cached kernel built without VJIT_PERF_MAP, named now (JIT code only: the
// scalar reference kernels are not generated code).
void KernelCache::name_in_perf_map(const CompiledKernel& kernel) {
  if (kernel.code_bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (perf_mapped_.insert(reinterpret_cast<const void*>(kernel.entry)).second)
    codegen::register_perf_map(reinterpret_cast<const void*>(kernel.entry), kernel.code_bytes, kernel.name);
}

void KernelCache::refuse_builds_for_testing(std::function<bool(const codegen::KernelSpec&)> refuse) {
  std::lock_guard<std::mutex> lock(mutex_);
  refuse_ = std::move(refuse);
}

KernelCacheCounters KernelCache::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace vjit::jit
