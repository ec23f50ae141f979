#pragma once
// AArch64 code generation for one fused elementwise group (codegen/kernel_spec.h):
// a loop over rows × width in Advanced SIMD registers (4 floats), registers
// allocated over the group's expression DAG by the planner the x86 generator
// uses (codegen/body_plan.h), spilling to the stack when the 32 registers run
// out, assembled with asmjit's a64 assembler.
//
// The generated kernel computes what run_reference_kernel computes, as the x86
// kernels do (x86_fused_kernel.h): Neg, Relu, Step, Scale, AddScalar, Sqrt,
// Add, Sub, Mul and Div are IEEE operations with the same rounding (no FMA
// contraction), so they agree bit for bit given equal operands; Exp, Log, Tanh
// and Sigmoid use codegen/a64_vmath.h. The tail (width % 4 elements) is read
// and written one lane at a time: never past the last element of a row.
//
// Precondition: output rows overlap neither input rows nor each other; ld may
// be 0 for inputs.
#include <memory>

#include "codegen/jit_kernels.h"
#include "codegen/kernel_spec.h"

namespace vjit::codegen {

// Compiles `spec` for Isa::Neon; the CPU must be an AArch64 one (this
// generator is built on AArch64 only). Throws InternalError when the spec is
// malformed or on a generator bug: never emits code for a spec it has not
// checked. With `perf_map` the code is named in the perf map.
std::shared_ptr<const FusedKernel> compile_a64_fused_kernel(const KernelSpec& spec, bool perf_map);

}  // namespace vjit::codegen
