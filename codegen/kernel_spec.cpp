#include "codegen/kernel_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <vector>

#include "ir/op_semantics.h"
#include "ir/ops.h"
#include "vjit/error.h"

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

KernelSpec accumulating_spec(const KernelSpec& spec, const std::vector<int>& accumulated) {
  KernelSpec out = spec;
  const int added = int(accumulated.size()), inputs = int(spec.inputs.size());
  // Instruction values are numbered after the inputs: they move up by `added`.
  auto moved = [&](int operand) { return operand >= inputs ? operand + added : operand; };
  for (KernelInstr& instr : out.instrs) {
    instr.a = moved(instr.a);
    if (instr.b >= 0) instr.b = moved(instr.b);
  }
  out.inputs.insert(out.inputs.end(), size_t(added), KernelInput{});
  for (int k = 0; k < added; ++k) {
    int& output = out.outputs[size_t(accumulated[size_t(k)])];
    out.instrs.push_back({ir::Op::Add, output + inputs + added, inputs + k, 0.0f});
    output = int(out.instrs.size()) - 1;
  }
  return out;
}

void check_kernel_spec(const KernelSpec& spec) {
  const int num_inputs = int(spec.inputs.size());
  const int num_instrs = int(spec.instrs.size());
  VJIT_INTERNAL_CHECK(spec.width >= 0, "fused kernel: negative width " << spec.width << " in spec '" << spec.key() << "'");
  for (int k = 0; k < num_instrs; ++k) {
    const KernelInstr& in = spec.instrs[size_t(k)];
    const int defined = num_inputs + k;  // operands 0..defined-1 exist before instruction k
    const bool unary = ir::is_fusable_op(in.op) && ir::op_kind(in.op) == ir::OpKind::Unary;
    VJIT_INTERNAL_CHECK(unary || (ir::is_fusable_op(in.op) && ir::op_kind(in.op) == ir::OpKind::Binary),
                        "fused kernel: instruction " << k << " is " << ir::op_name(in.op)
                                                     << ", not a fusable elementwise op, in spec '"
                                                     << spec.key() << "'");
    VJIT_INTERNAL_CHECK(in.a >= 0 && in.a < defined,
                        "fused kernel: instruction " << k << " (" << ir::op_name(in.op) << ") reads operand "
                                                     << in.a << ", valid are 0.." << defined - 1
                                                     << ", in spec '" << spec.key() << "'");
    if (unary) {
      VJIT_INTERNAL_CHECK(in.b == -1, "fused kernel: unary instruction " << k << " (" << ir::op_name(in.op)
                                                                         << ") has a second operand " << in.b
                                                                         << " in spec '" << spec.key() << "'");
    } else {
      VJIT_INTERNAL_CHECK(in.b >= 0 && in.b < defined,
                          "fused kernel: instruction " << k << " (" << ir::op_name(in.op) << ") reads operand "
                                                       << in.b << ", valid are 0.." << defined - 1
                                                       << ", in spec '" << spec.key() << "'");
    }
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    VJIT_INTERNAL_CHECK(spec.outputs[o] >= 0 && spec.outputs[o] < num_instrs,
                        "fused kernel: output " << o << " is instruction " << spec.outputs[o]
                                                << ", valid are 0.." << num_instrs - 1 << ", in spec '"
                                                << spec.key() << "'");
  }
}

std::string kernel_name(const KernelSpec& spec, std::string_view target) {
  std::vector<std::pair<ir::Op, int>> counts;
  for (const KernelInstr& in : spec.instrs) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == in.op; });
    if (it == counts.end()) counts.emplace_back(in.op, 1);
    else ++it->second;
  }
  std::uint32_t hash = 2166136261u;  // FNV-1a
  for (char c : spec.key()) hash = (hash ^ std::uint8_t(c)) * 16777619u;
  std::ostringstream name;
  name << "vjit_fused_" << target << "_w" << spec.width;
  for (size_t i = 0; i < counts.size() && i < 6; ++i) {
    std::string op = ir::op_name(counts[i].first);
    std::transform(op.begin(), op.end(), op.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    name << "_" << op << counts[i].second;
  }
  name << "_" << std::hex << hash;
  return name.str();
}

namespace {

float apply(const KernelInstr& k, float a, float b) {
  return ir::op_kind(k.op) == ir::OpKind::Binary ? ir::apply_binary(k.op, a, b) : ir::apply_unary(k.op, a, k.scalar);
}

}  // namespace

void run_reference_kernel(const KernelSpec& spec, const ir::KernelArgs& args) {
  int num_inputs = int(spec.inputs.size());
  std::vector<float> values(spec.instrs.size());
  // Row r of operand k (the inputs, then the outputs).
  auto row_of = [&](size_t k, const float* data, int64_t ld, int64_t r) {
    const float* const* table = args.row_tables ? args.row_tables[k] : nullptr;
    return table ? table[r] : data + r * ld;
  };
  for (int64_t r = 0; r < args.rows; ++r) {
    for (int64_t i = 0; i < spec.width; ++i) {
      auto operand = [&](int o) {
        if (o >= num_inputs) return values[size_t(o - num_inputs)];
        const float* row = row_of(size_t(o), args.inputs[o], args.input_ld[o], r);
        return spec.inputs[size_t(o)].scalar ? row[0] : row[i];
      };
      for (size_t k = 0; k < spec.instrs.size(); ++k) {
        const KernelInstr& instr = spec.instrs[k];
        values[k] = apply(instr, operand(instr.a), instr.b >= 0 ? operand(instr.b) : 0.0f);
      }
      for (size_t o = 0; o < spec.outputs.size(); ++o) {
        float* row = const_cast<float*>(row_of(size_t(num_inputs) + o, args.outputs[o], args.output_ld[o], r));
        row[i] = values[size_t(spec.outputs[o])];
      }
    }
  }
}

}  // namespace vjit::codegen
