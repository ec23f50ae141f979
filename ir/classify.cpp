#include "ir/classify.h"
#include "ir/ops.h"

namespace vjit::ir {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Eager: return "eager";
    case Phase::Core: return "core";
    case Phase::Lazy: return "lazy";
  }
  return "?";
}

namespace {
bool enters_recurrence(Op op) {
  return op == Op::Gather || op == Op::GatherSum || op == Op::GatherAll || op == Op::ScatterGrad;
}
bool leaves_recurrence(Op op) { return op == Op::Scatter || op == Op::GatherGrad; }
}  // namespace

std::vector<Phase> classify_phases(const Function& function, bool batch_across_tasks) {
  size_t n = function.nodes.size();
  if (!batch_across_tasks) return std::vector<Phase>(n, Phase::Core);
  std::vector<bool> recurrent(n, false);  // depends on the incoming recurrence
  for (ValueId id = 0; id < function.size(); ++id) {
    const Node& node = function[id];
    recurrent[size_t(id)] = enters_recurrence(node.op);
    for (ValueId arg : node.args) recurrent[size_t(id)] = recurrent[size_t(id)] || recurrent[size_t(arg)];
  }
  std::vector<bool> feeds(n, false);  // the outgoing recurrence depends on it
  for (ValueId id = function.size() - 1; id >= 0; --id) {
    if (leaves_recurrence(function[id].op)) feeds[size_t(id)] = true;
    if (feeds[size_t(id)])
      for (ValueId arg : function[id].args) feeds[size_t(arg)] = true;
  }
  std::vector<Phase> phases(n);
  for (size_t id = 0; id < n; ++id) {
    if (!recurrent[id]) phases[id] = feeds[id] || !is_sink(function.nodes[id].op) ? Phase::Eager : Phase::Lazy;
    else phases[id] = feeds[id] ? Phase::Core : Phase::Lazy;
  }
  // Sinks outside the recurrence (push, loss, parameter gradients) always wait
  // for the last task, so each runs once over every vertex.
  for (size_t id = 0; id < n; ++id)
    if (is_sink(function.nodes[id].op) && !leaves_recurrence(function.nodes[id].op)) phases[id] = Phase::Lazy;
  return phases;
}

}  // namespace vjit::ir
