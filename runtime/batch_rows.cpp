#include "runtime/batch_rows.h"

#include <algorithm>

#include "vjit/error.h"

namespace vjit::runtime {

using ir::ValueId;

namespace {

int64_t scatter_width(const ExecPlan& plan, int type) {
  const FunctionPlan& fp = plan.types[size_t(type)].forward;
  return fp.scatter_value >= 0 ? (*fp.function)[fp.scatter_value].shape.numel() : 0;
}

// The slot of `parent` that reads `child` and may take what it forwards: its
// fixed slot, or the variadic one (the fixed arity) where the child is the
// parent's one variadic child (a sum of one); -1 otherwise.
int forward_slot_of(const scheduler::FlatBatch& graph, const std::vector<TypeSignature>& signatures, int child,
                    int parent) {
  std::span<const int> children = graph.children(parent);
  const int fixed = signatures[size_t(graph.type(parent))].fixed_arity;
  const int slot = int(std::find(children.begin(), children.begin() + fixed, child) - children.begin());
  if (slot < fixed) return slot;
  return children.size() == size_t(fixed) + 1 && children[size_t(fixed)] == child ? fixed : -1;
}

// The index into the forward targets of `parent`'s type of the gather of its
// `slot` that may take `part` of a child of type `child_type` (scattering
// rows `child_row_width` wide) in this layout, or -1. A view the task reads in
// place needs nothing; one a Concat then copies is worth less than the
// forwarded rows.
int usable_forward_target(const ExecPlan& plan, const BatchLayout& layout, const scheduler::FlatBatch& graph,
                          int parent, int slot, const ForwardedPart& part, int64_t child_row_width) {
  const int parent_type = graph.type(parent);
  const bool view = layout.gather(layout.vertex_task[size_t(parent)], slot).is_view();
  const std::vector<ForwardTarget>& targets = plan.placement->types[size_t(parent_type)].forward_targets;
  for (size_t i = 0; i < targets.size(); ++i) {
    const ForwardTarget& g = targets[i];
    if (g.slot != slot || !g.takes(part, child_row_width)) continue;
    const bool in_concat = layout.value(Pass::Forward, parent_type, g.gather).in_concat >= 0;
    return view && (!in_concat || i >= 64) ? -1 : int(i);
  }
  return -1;
}

// The parent that takes most of what `vertex` (of type `type`, scattering rows
// `width` wide) forwards, the first on a tie, into layout.forward_parent and forward_slot (-1: none takes
// any); marks the views its parts go to instead (unviewed_targets).
void choose_forward_parent(const ExecPlan& plan, const std::vector<TypeSignature>& signatures,
                           const scheduler::FlatBatch& graph, int type, int64_t width, int vertex,
                           BatchLayout& layout) {
  const std::vector<ForwardedPart>& parts = plan.types[size_t(type)].forward.forwarded;
  int64_t most = 0;
  for (int p : graph.parents(vertex)) {
    const int slot = forward_slot_of(graph, signatures, vertex, p);
    if (slot < 0) continue;
    int64_t taken = 0;
    for (const ForwardedPart& part : parts)
      if (usable_forward_target(plan, layout, graph, p, slot, part, width) >= 0) taken += part.width;
    if (taken <= most) continue;
    most = taken;
    layout.forward_parent[size_t(vertex)] = p;
    layout.forward_slot[size_t(vertex)] = slot;
  }
  const int parent = layout.forward_parent[size_t(vertex)];
  if (parent < 0) return;
  const int task = layout.vertex_task[size_t(parent)], slot = layout.forward_slot[size_t(vertex)];
  const bool view = layout.gather(task, slot).is_view();
  int* target = layout.forward_target[size_t(type)].data() + layout.vertex_row[size_t(vertex)] * int64_t(parts.size());
  for (size_t j = 0; j < parts.size(); ++j) {
    const int i = usable_forward_target(plan, layout, graph, parent, slot, parts[j], width);
    target[j] = i;
    if (i >= 0 && view) layout.unviewed_targets[size_t(task)] |= uint64_t(1) << i;
  }
}

void choose_forward_parents(const ExecPlan& plan, const std::vector<TypeSignature>& signatures,
                            const scheduler::FlatBatch& graph, BatchLayout& layout) {
  layout.forward_parent.clear();
  layout.forward_slot.clear();
  layout.unviewed_targets.clear();
  if (std::none_of(plan.types.begin(), plan.types.end(), [](const TypePlan& t) { return !t.forward.forwarded.empty(); })) {
    layout.forward_target.clear();
    return;
  }
  layout.forward_parent.assign(size_t(graph.num_vertices()), -1);
  layout.forward_slot.assign(size_t(graph.num_vertices()), -1);
  layout.unviewed_targets.assign(layout.task_first_row.size(), 0);
  layout.forward_target.resize(plan.types.size());
  for (size_t c = 0; c < plan.types.size(); ++c) {
    const size_t parts = plan.types[c].forward.forwarded.size();
    layout.forward_target[c].assign(size_t(layout.type_rows[c]) * parts, -1);
    if (parts == 0) continue;
    const int64_t width = scatter_width(plan, int(c));
    for (int v : layout.rows_of(int(c))) choose_forward_parent(plan, signatures, graph, int(c), width, v, layout);
  }
}

// Per type, the gather slots some task reads as a view, the gathers children
// forward over excepted.
void find_read_view_slots(const ExecPlan& plan, const scheduler::FlatSchedule& schedule, BatchLayout& layout) {
  layout.read_view_slots.assign(plan.types.size(), 0);
  if (layout.view_slots.empty()) return;
  for (int t = 0; t < schedule.num_tasks(); ++t) {
    const int type = schedule.task_type[size_t(t)];
    const uint64_t views = layout.view_slots[size_t(type)];
    if (views == 0) continue;
    for (auto [gather, slot] : plan.placement->types[size_t(type)].view_gathers)
      if ((views >> slot & 1) && layout.gather(t, slot).is_view() && !forwarded_over_view(plan, layout, type, t, gather))
        layout.read_view_slots[size_t(type)] |= uint64_t(1) << slot;
  }
}

// Counts each vertex's contributions to its scatter gradient, in its own
// place of assigned_once: one per parent slot whose whole-slot GatherGrad
// writes it outside an in-place gather (an exclusive view), two (never
// assigned) for any other (a variadic child, a partial, accumulated or
// in-place gradient); a row of one is assigned. (The counts live where the
// answer goes: a steady state allocates nothing.)
void find_rows_assigned_once(const ExecPlan& plan, const std::vector<TypeSignature>& signatures,
                             const PlanInput& input, BatchLayout& layout) {
  const scheduler::FlatBatch& graph = *input.graph;
  const scheduler::FlatSchedule& schedule = *input.schedule;
  layout.assigned_once.resize(plan.types.size());
  for (size_t t = 0; t < plan.types.size(); ++t) layout.assigned_once[t].assign(size_t(layout.type_rows[t]), 0);
  auto count_of = [&](int v) -> uint8_t& {
    return layout.assigned_once[size_t(graph.type(v))][size_t(layout.vertex_row[size_t(v)])];
  };
  for (int t = 0; t < schedule.num_tasks(); ++t) {
    const int type = schedule.task_type[size_t(t)];
    const int fixed = signatures[size_t(type)].fixed_arity;
    const TypePlacement& placed = plan.placement->types[size_t(type)];
    uint64_t assigning = placed.whole_slot_gather_grads & ~placed.accumulating_slots;
    for (int k = 0; k < fixed; ++k)
      if (layout.gather(t, k).is_exclusive_view())
        assigning &= ~(uint64_t(1) << k);  // maybe computed in place
    for (int v : schedule.task(t)) {
      std::span<const int> children = graph.children(v);
      for (size_t k = 0; k < children.size(); ++k) {
        const bool assigns = int(k) < fixed && (assigning >> k & 1);
        uint8_t& count = count_of(children[k]);
        count = uint8_t(std::min(2, count + (assigns ? 1 : 2)));
      }
    }
  }
  for (std::vector<uint8_t>& rows : layout.assigned_once)
    for (uint8_t& row : rows) row = row == 1 ? 1 : 0;
}

// accumulated_to_child: task by task, the first row that sends a GatherGrad's
// parts to a child claims it (a stamp per vertex: the task's number + 1).
void find_accumulated_to_child(const ExecPlan& plan, const std::vector<TypeSignature>& signatures,
                               const PlanInput& input, BatchLayout& layout) {
  const scheduler::FlatBatch& graph = *input.graph;
  const scheduler::FlatSchedule& schedule = *input.schedule;
  layout.accumulated_to_child.resize(plan.types.size());
  for (size_t t = 0; t < plan.types.size(); ++t)
    layout.accumulated_to_child[t].assign(
        plan.placement->types[t].accumulated_parts.empty() ? 0 : size_t(layout.type_rows[t]), 0);
  thread_local std::vector<int> claimed;  // per vertex (reused: a steady state allocates nothing)
  claimed.assign(size_t(graph.num_vertices()), 0);
  for (int task = 0; task < schedule.num_tasks(); ++task) {
    const int type = schedule.task_type[size_t(task)];
    const std::vector<AccumulatedPart>& parts = plan.placement->types[size_t(type)].accumulated_parts;
    const ir::Function& f = *plan.types[size_t(type)].backward.function;
    int group = -1;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k > 0 && parts[k - 1].gather_grad == parts[k].gather_grad) continue;
      VJIT_INTERNAL_CHECK(++group < 64, "over 64 GatherGrads with accumulated parts in one type");
      for (int v : schedule.task(task)) {
        const int child = accumulating_child(f[parts[k].gather_grad], graph.children(v), signatures[size_t(type)].fixed_arity);
        if (child < 0 || claimed[size_t(child)] == task + 1) continue;
        claimed[size_t(child)] = task + 1;
        layout.accumulated_to_child[size_t(type)][size_t(layout.vertex_row[size_t(v)])] |= uint64_t(1) << group;
      }
    }
  }
}

}  // namespace

int accumulating_child(const ir::Node& gather_grad, std::span<const int> children, int fixed_arity) {
  if (gather_grad.target == ir::GatherGradTarget::Slot) return children[size_t(gather_grad.child_slot)];
  return children.size() == size_t(fixed_arity) + 1 ? children[size_t(fixed_arity)] : -1;
}

void place_batch_rows(const ExecPlan& plan, const std::vector<TypeSignature>& signatures, const PlanInput& input,
                      BatchLayout& layout) {
  const scheduler::FlatSchedule& schedule = *input.schedule;
  layout.vertex_task.assign(size_t(input.graph->num_vertices()), -1);
  for (int t = 0; t < schedule.num_tasks(); ++t)
    for (int v : schedule.task(t)) layout.vertex_task[size_t(v)] = t;
  choose_forward_parents(plan, signatures, *input.graph, layout);
  find_read_view_slots(plan, schedule, layout);
  if (input.backward) {
    find_rows_assigned_once(plan, signatures, input, layout);
    find_accumulated_to_child(plan, signatures, input, layout);
  } else {
    layout.assigned_once.clear();
    layout.accumulated_to_child.clear();
  }
}

bool forwarded_over_view(const ExecPlan& plan, const BatchLayout& layout, int type, int task, ValueId gather) {
  if (layout.forward_parent.empty() || task < 0) return false;
  const uint64_t unviewed = layout.unviewed_targets[size_t(task)];
  if (unviewed == 0) return false;
  const std::vector<ForwardTarget>& targets = plan.placement->types[size_t(type)].forward_targets;
  for (size_t i = 0; i < targets.size() && i < 64; ++i)
    if (targets[i].gather == gather) return (unviewed >> i & 1) != 0;
  return false;
}

}  // namespace vjit::runtime
