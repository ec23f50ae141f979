#pragma once
// x86 code generation for one fused elementwise group (codegen/kernel_spec.h):
// a loop over rows × width in zmm (AVX-512, opmask tails) or ymm (AVX2) lanes,
// registers allocated over the group's expression DAG, spilling to the stack
// when they run out.
//
// The generated kernel computes exactly what run_reference_kernel computes:
// Neg, Relu, Step, Scale, AddScalar, Sqrt, Add, Sub, Mul and Div are IEEE
// operations with the same rounding (no FMA contraction), so they agree bit for
// bit given equal operands; Exp, Log, Tanh and Sigmoid use codegen/x86_vmath.h
// (<= 3 ulp from the correctly rounded result) instead of the std:: functions.
// Masked tails never touch memory past the last element of a row.
//
// Precondition: output rows overlap neither input rows nor each other (the
// executor gives every value its own buffer); ld may be 0 for inputs.
#include <memory>
#include <string>

#include "codegen/kernel_spec.h"
#include "codegen/x86_isa.h"

namespace vjit::codegen {

// What register allocation did to one kernel, counted in the generated code:
// over its loop bodies (full vectors `unroll` at a time, full vectors one at a
// time, the masked tail; each allocated on its own).
struct FusedKernelStats {
  int unroll = 1;           // vectors per step of the main loop
  int value_registers = 0;  // vector registers available to values
  int peak_live = 0;        // most computed values live at once (inputs not counted)
  int spill_slots = 0;      // stack slots of one vector each
  int spills = 0;           // stores of a live value to its slot
  int reloads = 0;          // loads of a spilled value back
  int input_loads = 0;      // loads of input rows, re-loads after eviction included
};

class X86FusedKernel {
 public:
  virtual ~X86FusedKernel() = default;
  virtual ir::KernelFn function() const = 0;
  virtual const std::string& name() const = 0;
  virtual size_t code_bytes() const = 0;
  virtual const FusedKernelStats& stats() const = 0;
};

// Compiles `spec` for `isa` (Avx2 or Avx512; the CPU must have it). Throws
// vjit::UserError when the CPU lacks the ISA, InternalError when the spec is
// malformed (an operand out of range or referring forward, an op that is not
// elementwise, an output out of range, a width the generator cannot address)
// or on a generator bug. Never emits code for a spec it has not checked.
// With `perf_map` the code is named in the perf map (x86_jit_generator.h).
std::shared_ptr<const X86FusedKernel> compile_fused_kernel(const KernelSpec& spec, Isa isa, bool perf_map = false);

// The name compile_fused_kernel gives the kernel of `spec` for `isa`
// ("vjit_fused_avx2_w64_sigmoid3_tanh2_mul3_add1_9f3c21d0"), for logs.
std::string fused_kernel_name(const KernelSpec& spec, Isa isa);

}  // namespace vjit::codegen
