// Lowering: classify each node's phase, fold weight-gradient outer products
// into their GEMM, fuse elementwise groups into JIT kernels, and order the
// resulting steps.
#include "jit/pipeline.h"

#include <iostream>
#include <algorithm>
#include <queue>

#include "codegen/x86_unary_kernel.h"
#include "ir/fusion.h"
#include "jit/kernel_cache.h"
#include "vjit/error.h"

namespace vjit {

namespace {

using ir::ValueId;

codegen::Isa isa_of(const Options& options) {
  codegen::Isa isa = codegen::parse_isa(options.isa);
  codegen::require_isa(isa);
  return isa;
}

// The kernel spec of a group: inputs first, then one instruction per node.
codegen::KernelSpec kernel_spec(const ir::Function& f, const ir::FusionGroup& group) {
  codegen::KernelSpec spec;
  spec.width = f[group.nodes[0]].shape.numel();
  std::vector<int> operand_of(f.nodes.size(), -1);
  for (ValueId in : group.inputs) {
    operand_of[size_t(in)] = int(spec.inputs.size());
    spec.inputs.push_back({f[in].shape.numel() != spec.width});
  }
  for (ValueId id : group.nodes) {
    const ir::Node& n = f[id];
    codegen::KernelInstr instr{n.op, operand_of[size_t(n.args[0])], n.args.size() > 1 ? operand_of[size_t(n.args[1])] : -1,
                               float(n.scalar)};
    operand_of[size_t(id)] = int(spec.inputs.size() + spec.instrs.size());
    spec.instrs.push_back(instr);
  }
  for (ValueId out : group.outputs) spec.outputs.push_back(operand_of[size_t(out)] - int(spec.inputs.size()));
  return spec;
}

// Orders the steps of one phase so that every step follows the steps it reads
// (a fused group runs where all its inputs are ready), keeping function order
// where dependencies allow.
std::vector<runtime::Step> order_steps(const ir::Function& f, const runtime::FunctionPlan& plan, ir::Phase phase,
                                       const std::vector<int>& group_of) {
  size_t n = f.nodes.size();
  // unit_of[id]: the step that computes node id (a folded outer product belongs to its ParamGrad).
  std::vector<int> unit_of(n, -1);
  std::vector<runtime::Step> units;
  std::vector<int> unit_key;
  for (ValueId id = 0; id < f.size(); ++id) {
    if (plan.phases[size_t(id)] != phase) continue;
    int g = group_of[size_t(id)];
    if (g >= 0) {
      bool first = true;
      for (ValueId other = 0; other < id; ++other) first = first && group_of[size_t(other)] != g;
      if (first) {
        units.push_back({-1, g});
        unit_key.push_back(id);
      }
      continue;
    }
    if (plan.folded[size_t(id)]) continue;
    units.push_back({id, -1});
    unit_key.push_back(id);
  }
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].node >= 0) unit_of[size_t(units[u].node)] = int(u);
    else
      for (ValueId id = 0; id < f.size(); ++id)
        if (group_of[size_t(id)] == units[u].fused) unit_of[size_t(id)] = int(u);
  }
  for (ValueId id = 0; id < f.size(); ++id)  // folded outer products join their reader
    if (plan.folded[size_t(id)] && group_of[size_t(id)] < 0)
      for (ValueId user = id + 1; user < f.size(); ++user)
        for (ValueId arg : f[user].args)
          if (arg == id) unit_of[size_t(id)] = unit_of[size_t(user)];
  std::vector<std::vector<int>> readers(units.size());
  std::vector<int> pending(units.size(), 0);
  for (ValueId id = 0; id < f.size(); ++id) {
    int u = unit_of[size_t(id)];
    if (u < 0) continue;
    for (ValueId arg : f[id].args) {
      int v = unit_of[size_t(arg)];
      if (v < 0 || v == u) continue;
      readers[size_t(v)].push_back(u);
      ++pending[size_t(u)];
    }
  }
  std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> ready;
  for (size_t u = 0; u < units.size(); ++u)
    if (pending[u] == 0) ready.push({unit_key[u], int(u)});
  std::vector<runtime::Step> order;
  while (!ready.empty()) {
    int u = ready.top().second;
    ready.pop();
    order.push_back(units[size_t(u)]);
    for (int r : readers[size_t(u)])
      if (--pending[size_t(r)] == 0) ready.push({unit_key[size_t(r)], r});
  }
  VJIT_INTERNAL_CHECK(order.size() == units.size(), "fusion made the steps of " << f.name << " cyclic");
  return order;
}

runtime::FunctionPlan lower_function(const ir::Function& function, const Options& options,
                                     const std::vector<bool>& keep) {
  runtime::FunctionPlan plan;
  plan.function = &function;
  plan.phases = ir::classify_phases(function, options.lazy);
  plan.folded.assign(function.nodes.size(), false);
  std::vector<int> readers(function.nodes.size(), 0);
  for (const ir::Node& node : function.nodes)
    for (ValueId arg : node.args) ++readers[size_t(arg)];
  for (ValueId id = 0; id < function.size(); ++id) {
    const ir::Node& node = function[id];
    if (node.op == ir::Op::Scatter) plan.scatter_value = node.args[0];
    if (node.op != ir::Op::ParamGrad) continue;
    const ir::Node& term = function[node.args[0]];
    bool per_vertex_operands = term.op == ir::Op::Outer && !function[term.args[0]].uniform &&
                               !function[term.args[1]].uniform;
    if (per_vertex_operands && readers[size_t(node.args[0])] == 1) plan.folded[size_t(node.args[0])] = true;
  }
  std::vector<int> group_of(function.nodes.size(), -1);
  if (options.fusion) {
    codegen::Isa isa = isa_of(options);
    std::vector<ir::FusionGroup> groups = ir::find_fusion_groups(function, plan.phases, keep);
    if (options.logs("passes")) std::cerr << "[vjit] fusion groups of " << function.name << "\n" << ir::to_string(function, groups);
    for (const ir::FusionGroup& group : groups) {
      std::shared_ptr<const CompiledKernel> kernel =
          KernelCache::global().lookup(kernel_spec(function, group), isa, options.perf_map).kernel;
      int index = int(plan.fused.size());
      plan.fused.push_back({kernel->name, group.inputs, group.outputs, function[group.nodes[0]].shape.numel(),
                            [kernel](const KernelArgs& args) { kernel->run(args); }});
      for (ValueId id : group.nodes) {
        group_of[size_t(id)] = index;
        plan.folded[size_t(id)] = std::find(group.outputs.begin(), group.outputs.end(), id) == group.outputs.end();
      }
    }
  }
  plan.eager = order_steps(function, plan, ir::Phase::Eager, group_of);
  plan.core = order_steps(function, plan, ir::Phase::Core, group_of);
  plan.lazy = order_steps(function, plan, ir::Phase::Lazy, group_of);
  if (options.logs("passes")) {
    std::cerr << "[vjit] plan for " << function.name << "\n";
    for (ValueId id = 0; id < function.size(); ++id)
      std::cerr << "  " << (plan.folded[size_t(id)] ? "folded" : ir::phase_name(plan.phases[size_t(id)]))
                << (group_of[size_t(id)] >= 0 ? " fused" : "") << "\t" << ir::to_string(function, id) << "\n";
  }
  return plan;
}

// Forward values ∂F reads: they are written to memory even inside a fused group.
std::vector<bool> values_read_by_backward(const ir::Function& forward, const ir::Function& backward) {
  std::vector<bool> keep(forward.nodes.size(), false);
  for (const ir::Node& n : backward.nodes)
    if (n.op == ir::Op::Fwd) keep[size_t(n.slot)] = true;
  return keep;
}

}  // namespace

runtime::ExecPlan lower_program(const Program& program, const Options& options) {
  runtime::ExecPlan plan;
  codegen::Isa isa = isa_of(options);
  if (isa != codegen::Isa::Scalar) {
    auto exp = std::make_shared<codegen::UnaryKernel>(isa, codegen::UnaryFn::Exp, options.perf_map);
    plan.exp = [exp](const float* src, float* dst, int64_t n) { (*exp)(src, dst, n); };
  }
  for (int t = 0; t < program.num_types(); ++t) {
    const ir::Function& forward = program.forward(t);
    const ir::Function& backward = program.backward(t);
    plan.types.push_back({lower_function(forward, options, values_read_by_backward(forward, backward)),
                          lower_function(backward, options, std::vector<bool>(backward.nodes.size(), false))});
  }
  return plan;
}

}  // namespace vjit
