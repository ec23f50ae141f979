#pragma once
// The JIT's kernels, whatever the ISA: what the jit layer compiles through.
// A build has the code generators of its own architecture only: x86-64 builds
// generate x86 code (x86_fused_kernel.h, x86_unary_kernel.h), AArch64 builds
// AArch64 code (a64_fused_kernel.h, a64_unary_kernel.h). Asking for an ISA of the other
// architecture is an InternalError (the pipeline checks the CPU first:
// require_isa).
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/isa.h"
#include "codegen/kernel_spec.h"

namespace vjit::codegen {

// What register allocation did to one fused kernel, counted in the generated
// code: over its loop bodies (full vectors `unroll` at a time, full vectors
// one at a time, the tail; each allocated on its own).
struct FusedKernelStats {
  int unroll = 1;           // vectors per step of the main loop
  int value_registers = 0;  // vector registers available to values
  int peak_live = 0;        // most computed values live at once (inputs not counted)
  int spill_slots = 0;      // stack slots of one vector each
  int spills = 0;           // stores of a live value to its slot
  int reloads = 0;          // loads of a spilled value back
  int input_loads = 0;      // loads of input rows, re-loads after eviction included
};

// A compiled fused elementwise kernel (codegen/kernel_spec.h), computing what
// run_reference_kernel computes.
class FusedKernel {
 public:
  virtual ~FusedKernel() = default;
  virtual ir::KernelFn function() const = 0;
  virtual const std::string& name() const = 0;
  virtual size_t code_bytes() const = 0;
  virtual const FusedKernelStats& stats() const = 0;
};

// Compiles `spec` for `isa` with this build's generator: Avx2 or Avx512 on
// x86-64, Neon on AArch64. The CPU must have the ISA (else vjit::UserError);
// InternalError for Scalar, an ISA this build does not generate, a malformed
// spec or a generator bug. With `perf_map` the code is named in the perf map.
std::shared_ptr<const FusedKernel> compile_fused_kernel(const KernelSpec& spec, Isa isa, bool perf_map = false);

// The name compile_fused_kernel gives the kernel of `spec` for `isa`
// ("vjit_fused_avx2_w64_sigmoid3_tanh2_mul3_add1_9f3c21d0"), for logs.
std::string fused_kernel_name(const KernelSpec& spec, Isa isa);

// exp over an array, dst[i] = exp(src[i]) for i < n (the softmax's): entry is
// null for Isa::Scalar (the caller loops over std::exp). `owner` keeps the code alive.
struct ArrayKernel {
  void (*entry)(const float* src, float* dst, std::int64_t n) = nullptr;
  std::shared_ptr<const void> owner;
};
ArrayKernel compile_exp_kernel(Isa isa, bool perf_map);

}  // namespace vjit::codegen
