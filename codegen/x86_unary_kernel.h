#pragma once
// A compiled elementwise kernel: dst[i] = fn(src[i]) for 0 <= i < n, with the
// math of x86_vmath.h. The JIT code runs a vector loop over full registers,
// then one masked step for the n % lanes tail (Avx512: opmask k1; Avx2:
// vmaskmovps), which never touches memory past src[n - 1] or dst[n - 1].
// Isa::Scalar runs a plain C++ loop over the std:: float functions.
// n <= 0 does nothing. src and dst may be the same array (in place).
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/isa.h"
#include "codegen/x86_vmath.h"

namespace vjit::codegen {

class JitGenerator;

class UnaryKernel {
 public:
  using Entry = void (*)(const float* src, float* dst, std::int64_t n);

  // Compiles the kernel; throws vjit::UserError (require_isa) when this CPU
  // lacks `isa`. With `perf_map` the code is named in the perf map
  // (register_perf_map in x86_jit_generator.h).
  UnaryKernel(Isa isa, UnaryFn fn, bool perf_map = false);
  ~UnaryKernel();
  UnaryKernel(UnaryKernel&&) noexcept;
  UnaryKernel& operator=(UnaryKernel&&) noexcept;

  void operator()(const float* src, float* dst, std::int64_t n) const { entry_(src, dst, n); }

  Entry entry() const { return entry_; }
  Isa isa() const { return isa_; }
  UnaryFn fn() const { return fn_; }
  // "vjit_unary_<fn>_<isa>", the name in the perf map.
  const std::string& name() const { return name_; }
  // Bytes of machine code (0 for Isa::Scalar).
  std::size_t code_size() const;

 private:
  Isa isa_;
  UnaryFn fn_;
  std::string name_;
  std::unique_ptr<JitGenerator> jit_;  // null for Isa::Scalar
  Entry entry_ = nullptr;
};

}  // namespace vjit::codegen
