#pragma once
// A compiled AArch64 elementwise kernel over one array: dst[i] = fn(src[i])
// for 0 <= i < n, with the math of a64_vmath.h, so it equals a fused kernel of
// the one op bit for bit. The code runs a loop over full Advanced SIMD
// registers (4 floats), then reads and writes the n % 4 last elements one lane
// each: it never touches memory past src[n - 1] or dst[n - 1]. n <= 0 does
// nothing. src and dst may be the same array (in place). The AArch64
// counterpart of x86_unary_kernel.h; the softmax's exp runs through it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/vmath_constants.h"

namespace vjit::codegen {

class A64Code;

class A64UnaryKernel {
 public:
  using Entry = void (*)(const float* src, float* dst, std::int64_t n);

  // Compiles the kernel for Isa::Neon (vjit::UserError where the CPU is not an
  // AArch64 one: require_isa). With `perf_map` the code is named in the perf
  // map.
  A64UnaryKernel(UnaryFn fn, bool perf_map = false);
  ~A64UnaryKernel();

  void operator()(const float* src, float* dst, std::int64_t n) const { entry_(src, dst, n); }

  Entry entry() const { return entry_; }
  // "vjit_unary_<fn>_neon", the name in the perf map.
  const std::string& name() const { return name_; }
  std::size_t code_size() const;

 private:
  std::string name_;
  std::unique_ptr<A64Code> code_;
  Entry entry_ = nullptr;
};

}  // namespace vjit::codegen
