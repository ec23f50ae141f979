#pragma once
// A fused elementwise kernel, described without the IR around it: what the
// fusion pass (ir/fusion.h) hands to a code generator. The kernel computes, for
// every row r < rows and every element i < width,
//
//   v_k = op_k(operands)    for the instructions k in order,
//
// where an operand < inputs.size() is input j (element i of row r, or element 0
// of row r for a Scalar input) and an operand o >= inputs.size() is the value
// of instruction o − inputs.size(); then writes each listed output. Rows are
// at data + r·ld; an input with ld 0 is the same for every row (a parameter).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/kernel_abi.h"
#include "ir/ops.h"

namespace vjit::codegen {

struct KernelInput {
  bool scalar = false;  // one float per row, broadcast across the row
};

struct KernelInstr {
  ir::Op op = ir::Op::Neg;  // a unary or binary elementwise op (not Dropout)
  int a = -1, b = -1;       // operands (see above); b = -1 for unary ops
  float scalar = 0.0f;      // ir::unary_constant: Scale's factor, AddScalar's addend
};

struct KernelSpec {
  int64_t width = 0;
  std::vector<KernelInput> inputs;
  std::vector<KernelInstr> instrs;
  std::vector<int> outputs;  // instruction indices whose values are written, in order

  // A canonical text form; equal specs have equal keys (the kernel cache's key
  // together with the ISA).
  std::string key() const;
};

// The kernel that adds outputs `accumulated` (indices into spec.outputs) into
// what their rows hold instead of writing them: each is read as one more input
// (after spec's, in this order) and the output is the sum. The executor passes
// an accumulated output's rows as its input too (VJIT_ROW_PLACEMENT=tables).
KernelSpec accumulating_spec(const KernelSpec& spec, const std::vector<int>& accumulated);

// Throws InternalError when `spec` is malformed: a negative width, an operand
// out of range or referring forward, an op that is not fusable, an output out
// of range. Every code generator checks a spec with it before emitting code.
void check_kernel_spec(const KernelSpec& spec);

// A kernel's name for logs and profiles: "vjit_fused_<target>_w64_sigmoid3_
// tanh2_mul3_add1_9f3c21d0": target, width, op counts in order of first use
// (at most six kinds) and a hash of the key, so that different kernels have
// different names. A valid C identifier when `target` is one.
std::string kernel_name(const KernelSpec& spec, std::string_view target);

// The reference kernel: a loop interpreting the spec in float with std::
// functions. The last entry of every dispatch list, and the JIT's oracle.
void run_reference_kernel(const KernelSpec& spec, const ir::KernelArgs& args);

}  // namespace vjit::codegen
