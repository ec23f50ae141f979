#include "codegen/kernel_spec.h"

#include <sstream>
#include <vector>

#include "ir/op_semantics.h"

namespace vjit::codegen {

std::string KernelSpec::key() const {
  std::ostringstream out;
  out << "w" << width << " in";
  for (const KernelInput& in : inputs) out << (in.scalar ? "s" : "v");
  for (const KernelInstr& k : instrs) {
    out << " " << ir::op_name(k.op) << "(" << k.a;
    if (k.b >= 0) out << "," << k.b;
    if (ir::has_unary_constant(k.op)) out << ";" << std::hexfloat << k.scalar << std::defaultfloat;
    out << ")";
  }
  out << " out";
  for (int o : outputs) out << " " << o;
  return out.str();
}

namespace {

float apply(const KernelInstr& k, float a, float b) {
  return ir::op_kind(k.op) == ir::OpKind::Binary ? ir::apply_binary(k.op, a, b) : ir::apply_unary(k.op, a, k.scalar);
}

}  // namespace

void run_reference_kernel(const KernelSpec& spec, const KernelArgs& args) {
  int num_inputs = int(spec.inputs.size());
  std::vector<float> values(spec.instrs.size());
  for (int64_t r = 0; r < args.rows; ++r) {
    for (int64_t i = 0; i < spec.width; ++i) {
      auto operand = [&](int o) {
        if (o >= num_inputs) return values[size_t(o - num_inputs)];
        const float* row = args.inputs[o] + r * args.input_ld[o];
        return spec.inputs[size_t(o)].scalar ? row[0] : row[i];
      };
      for (size_t k = 0; k < spec.instrs.size(); ++k) {
        const KernelInstr& instr = spec.instrs[k];
        values[k] = apply(instr, operand(instr.a), instr.b >= 0 ? operand(instr.b) : 0.0f);
      }
      for (size_t o = 0; o < spec.outputs.size(); ++o)
        args.outputs[o][r * args.output_ld[o] + i] = values[size_t(spec.outputs[o])];
    }
  }
}

}  // namespace vjit::codegen
