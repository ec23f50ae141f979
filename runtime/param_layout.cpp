#include "runtime/param_layout.h"

#include <algorithm>
#include <map>

#include "ir/model_layout.h"
#include "layout/param_runs.h"

namespace vjit::runtime {

std::vector<std::vector<int>> stacked_weights(const ExecPlan& plan) {
  std::map<std::vector<int>, int64_t> weight;  // values × readers, per sequence
  for (const std::shared_ptr<const ir::Function>& f : plan.functions) {
    for (const ir::Node& n : f->nodes) {
      if (n.op != ir::Op::Concat || !n.uniform) continue;
      std::vector<int> params;
      for (ir::ValueId arg : n.args)
        if ((*f)[arg].op == ir::Op::Param) params.push_back((*f)[arg].param);
      if (params.size() == n.args.size()) weight[params] += n.shape.numel();
    }
  }
  std::vector<std::pair<int64_t, std::vector<int>>> ranked;
  for (auto& [params, w] : weight) ranked.push_back({w, params});
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::vector<int>> out;
  for (auto& [w, params] : ranked) out.push_back(std::move(params));
  return out;
}

ParamLayout lay_out_parameters(const ExecPlan& plan, Model& model) {
  const std::vector<std::vector<int>> sequences = stacked_weights(plan);
  ParamLayout out;
  out.stacked = int(sequences.size());
  const layout::ParamRuns runs = layout::plan_param_runs(model.size(), sequences);
  bool held = true;
  for (size_t s = 0; s < sequences.size(); ++s)
    held = held && (!runs.kept[s] || ir::ModelLayout::consecutive(model, sequences[s]));
  if (!held) {
    ir::ModelLayout::arrange(model, runs.runs);
    out.moved = true;
  }
  for (const std::vector<int>& s : sequences) out.in_place += ir::ModelLayout::consecutive(model, s);
  return out;
}

}  // namespace vjit::runtime
