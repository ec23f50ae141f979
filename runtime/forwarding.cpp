#include "runtime/forwarding.h"

#include "ir/passes.h"

namespace vjit::runtime {

namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// The parts of a type's scattered row a fused kernel computes: the scattered
// value itself, or the arguments of the Concat it scatters.
std::vector<ForwardedPart> fused_parts(const FunctionPlan& fp) {
  const ir::Function& f = *fp.function;
  const ValueId scattered = fp.scatter_value;
  std::vector<ForwardedPart> parts;
  if (scattered < 0) return parts;
  auto computed_by_kernel = [&](ValueId id) { return fp.in_fused_step(id) && !fp.folded[size_t(id)]; };
  if (f[scattered].op != Op::Concat) {
    if (computed_by_kernel(scattered)) parts.push_back({scattered, 0, f[scattered].shape.numel()});
    return parts;
  }
  int64_t column = 0;
  for (ValueId arg : f[scattered].args) {
    const ValueId root = ir::under_reshapes(f, arg);  // laid out in place: that value's buffer
    if (computed_by_kernel(root)) parts.push_back({root, column, f[arg].shape.numel()});
    column += f[arg].shape.numel();
  }
  return parts;
}

}  // namespace

std::vector<std::vector<ForwardTarget>> forward_targets(const ExecPlan& plan,
                                                        const std::vector<TypeSignature>& signatures,
                                                        const std::vector<std::vector<int>>& pointers) {
  std::vector<std::vector<ForwardTarget>> targets(plan.types.size());
  for (size_t t = 0; t < plan.types.size(); ++t) {
    const ir::Function& f = *plan.types[t].forward.function;
    const TypeSignature& signature = signatures[t];
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      if (n.uniform || (!pointers[t].empty() && pointers[t][size_t(id)] > 0)) continue;
      if (n.op == Op::Gather)
        targets[t].push_back({id, n.child_slot, n.start, n.shape.numel(),
                              signature.slot_shapes[size_t(n.child_slot)].numel()});
      else if (n.op == Op::GatherSum)
        targets[t].push_back({id, signature.fixed_arity, n.start, n.shape.numel(), signature.variadic_shape.numel()});
    }
  }
  return targets;
}

std::vector<std::vector<ForwardedPart>> forwarded_parts(const ExecPlan& plan,
                                                        const std::vector<std::vector<ForwardTarget>>& targets) {
  std::vector<std::vector<ForwardedPart>> out(plan.types.size());
  for (size_t c = 0; c < plan.types.size(); ++c) {
    const FunctionPlan& fp = plan.types[c].forward;
    if (fp.scatter_value < 0) continue;
    const int64_t row_width = (*fp.function)[fp.scatter_value].shape.numel();
    for (const ForwardedPart& part : fused_parts(fp)) {
      bool gathered = false;
      for (size_t p = 0; p < plan.types.size() && !gathered; ++p)
        for (const ForwardTarget& g : targets[p]) gathered = gathered || g.takes(part, row_width);
      if (gathered) out[c].push_back(part);
    }
  }
  return out;
}

}  // namespace vjit::runtime
