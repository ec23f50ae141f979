// VJIT_CHECK_FINITE: after each forward step, the values it wrote are
// searched for the first NaN or ±Inf (in row order, then in the order the step
// writes them), which becomes a UserError naming the sample, the vertex, the
// vertex type and the op (for a fused kernel, every op of its group).
#include <algorithm>
#include <cctype>
#include <string>

#include "runtime/runner.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::ValueId;

void Runner::check_finite(const Rows& rows, const Step& step, Lane& lane) {
  const FunctionPlan& fp = function_plan(Pass::Forward, rows.type);
  const ir::Function& f = *fp.function;
  const std::vector<View>& views = lane.views[int(Pass::Forward)];
  const std::span<const ValueId> written =
      step.fused >= 0 ? std::span<const ValueId>(fused_step(Pass::Forward, rows.type, step.fused).outputs)
                      : std::span(&step.node, 1);
  // Values with rows of their own: not views, sinks, parameters or stacked parameters.
  auto has_rows = [&](ValueId id) {
    const Node& n = f[id];
    return !ir::is_view(n.op) && !ir::is_sink(n.op) && !n.uniform && !fp.folded[size_t(id)] &&
           views[size_t(id)].data != nullptr;
  };
  // The first in row order, then in the order the step writes its values.
  NonFinite first{rows.count, 0, 0.0f};
  ValueId first_value = -1;
  for (ValueId id : written) {
    if (!has_rows(id)) continue;
    const bool child_rows_space = fp.in_child_rows(id);
    NonFinite found = device_.find_non_finite(lane, child_rows_space ? child_rows(rows).count : rows.count,
                                              fp.row_width(id), views[size_t(id)]);
    if (found.row >= 0 && child_rows_space) {  // as row k of the vertex's [K, d] block
      const std::vector<int64_t>& begin = child_row_begin_[size_t(rows.type)];
      const int64_t child = begin[size_t(rows.begin)] + found.row;
      found.row = parent_row(rows, found.row);
      found.element += (child - begin[size_t(rows.begin + found.row)]) * fp.row_width(id);
    }
    if (found.row >= 0 && found.row < first.row) first = found, first_value = id;
  }
  if (first_value >= 0) throw_non_finite(rows, first.row, step, first_value, first.element, first.value);
}

namespace {
// "%12 log": a value and its op, as the Builder names the op.
std::string value_label(const ir::Function& f, ValueId id) {
  std::string name = ir::op_name(f[id].op);
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  return "%" + std::to_string(id) + " " + name;
}
}  // namespace

void Runner::throw_non_finite(const Rows& rows, int64_t row, const Step& step, ValueId value, int64_t element,
                                   float found) const {
  const scheduler::FlatBatch& graph = *batch_.graph;
  const FunctionPlan& fp = function_plan(Pass::Forward, rows.type);
  const ir::Function& f = *fp.function;
  const scheduler::VertexRef ref = graph.ref(rows.vertices[row]);
  const std::string& name = graph.batch().samples[size_t(ref.sample)].name;
  detail::Message m;
  m << "VJIT_CHECK_FINITE: sample " << ref.sample;
  if (!name.empty()) m << " ('" << name << "')";
  m << ", vertex " << ref.vertex << " (type '" << program_.type_name(rows.type) << "'): " << value_label(f, value)
    << " of shape " << f[value].shape.str() << " is " << found << " at element " << element;
  if (step.fused >= 0) {
    // The group's ops: what the kernel computes from its inputs up to its outputs.
    const FusedStep& group = fused_step(Pass::Forward, rows.type, step.fused);
    std::vector<char> member(size_t(f.size()), 0);
    std::vector<ValueId> pending(group.outputs.begin(), group.outputs.end());
    while (!pending.empty()) {
      const ValueId id = pending.back();
      pending.pop_back();
      if (member[size_t(id)] || std::find(group.inputs.begin(), group.inputs.end(), id) != group.inputs.end())
        continue;
      member[size_t(id)] = 1;
      for (ValueId arg : f[id].args) pending.push_back(arg);
    }
    m << ", an output of fused kernel " << group.kernel.name << " (ops";
    for (ValueId id = 0; id < f.size(); ++id)
      if (member[size_t(id)]) m << " " << value_label(f, id);
    m << "; which of them first went non-finite is not tracked)";
  }
  m << "; the first non-finite value of this forward pass, in execution order";
  throw UserError(m.str());
}

}  // namespace vjit::runtime
