#pragma once
// Row placement, the half decided per batch (the other half is the program's:
// runtime/row_placement.h). Once a planner has laid a batch out, place_batch_rows
// decides, into the BatchLayout:
//   forward_parent  which parent each child's kernel writes its forwarded
//                   parts into (VJIT_ROW_PLACEMENT=tables; the one whose gathers
//                   take most of them), through which of its slots, and
//                   per part which of that parent's gathers takes it
//                   (forward_target);
//   unviewed_targets per task, the gathers the layout made views that a Concat
//                   would copy, which the children forward into instead;
//   read_view_slots per type, the gather slots some task reads as a view: the
//                   phase steps that read them run task by task;
//   assigned_once   per scatter-gradient row, whether its one contribution is
//                   a parent's whole-slot GatherGrad (assigned, not summed);
//   accumulated_to_child per row, which of its gradient parts its kernel adds
//                   straight into the child's row (VJIT_ROW_PLACEMENT=tables).
// The executors follow these; none of them decides a row's place.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/memplan.h"
#include "runtime/row_placement.h"

namespace vjit::runtime {

// Fills the per-batch row placement of `layout` (laid out for `input`).
// The child a row's parts of `gather_grad` accumulate into: a Slot's child,
// the one variadic child of a row with one; else -1.
int accumulating_child(const ir::Node& gather_grad, std::span<const int> children, int fixed_arity);

void place_batch_rows(const ExecPlan& plan, const std::vector<TypeSignature>& signatures, const PlanInput& input,
                      BatchLayout& layout);

// Whether the task's gather `gather` (of type `type`) was a view that children
// forward over: the task then reads its own buffer.
bool forwarded_over_view(const ExecPlan& plan, const BatchLayout& layout, int type, int task, ir::ValueId gather);

}  // namespace vjit::runtime
