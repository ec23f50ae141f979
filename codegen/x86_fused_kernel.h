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

#include "codegen/isa.h"
#include "codegen/jit_kernels.h"
#include "codegen/kernel_spec.h"

namespace vjit::codegen {

// Compiles `spec` for `isa` (Avx2 or Avx512; the CPU must have it). Throws
// vjit::UserError when the CPU lacks the ISA, InternalError when the spec is
// malformed (an operand out of range or referring forward, an op that is not
// elementwise, an output out of range, a width the generator cannot address)
// or on a generator bug. Never emits code for a spec it has not checked.
// With `perf_map` the code is named in the perf map (x86_jit_generator.h).
std::shared_ptr<const FusedKernel> compile_x86_fused_kernel(const KernelSpec& spec, Isa isa, bool perf_map);

}  // namespace vjit::codegen
