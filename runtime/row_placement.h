#pragma once
// Row placement, the half decided once per program: for each vertex type, which
// values of F are read through a pointer per row instead of a buffer of their
// own, which gradients of ∂F are written through such pointers or added by
// their kernels straight into the children's rows, which GatherGrads may be
// computed in the children's rows, which gathers a child's kernel may write
// into, and which gather slots each phase step reads in place. jit/pipeline.cpp
// decides it when it lowers a plan (ExecPlan::placement); the memory planners
// and the executors read it and decide none of it again. The half decided per
// batch (which rows a task's views cover, which parent a child writes into) is
// the planner's and the executor's, from these.
#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/exec_plan.h"
#include "runtime/forwarding.h"
#include "vjit/graph.h"

namespace vjit::runtime {

// A backward value written through the row pointers of a GatherGrad's
// gradient (VJIT_ROW_PLACEMENT=tables): that gradient's value id, and the
// value's column in its rows; gradient -1: the value has rows of its own.
struct GradientPointer {
  ir::ValueId gradient = -1;
  int64_t column = 0;
};

// VJIT_ROW_PLACEMENT=tables: a gradient part a fused kernel of ∂F adds into
// the children's scatter-gradient rows: the value, its GatherGrad, its column
// in the gradient, its width.
struct AccumulatedPart {
  ir::ValueId value = -1, gather_grad = -1;
  int64_t column = 0, width = 0;
};

struct TypePlacement {
  // VJIT_ROW_PLACEMENT=tables (runtime/row_pointers.h): per forward value, the
  // parts each row is read in through row pointers (0: a buffer of its own).
  std::vector<int> row_pointer_parts;
  // Per backward value: the gradient it is written through and its column
  // there (gradient_pointers in row_placement.cpp); and the GatherGrads of
  // such gradients.
  std::vector<GradientPointer> gradient_pointers;
  std::vector<ir::ValueId> pointer_gather_grads;
  // The gathers of F that may be views (not read through row pointers), with
  // their slots (the fixed arity: the variadic sum).
  std::vector<std::pair<ir::ValueId, int>> view_gathers;
  // The backward's GatherGrads whose gradient may be computed straight into
  // the children's scatter-gradient rows (when the layout's gather is an
  // exclusive view): it, and what is laid out in it, are computed and read
  // within the task only.
  std::vector<ir::ValueId> in_place_gather_grads;
  // Bit k when the backward has one GatherGrad of slot k and it covers the
  // child's whole row.
  uint64_t whole_slot_gather_grads = 0;
  // Per pass, per step of the eager and lazy phases: the gather slots whose
  // rows it reads in place (bit k: slot k, bit fixed_arity: the variadic
  // sum), through views, Fwd and folded nodes.
  std::vector<uint64_t> eager_reads[2], lazy_reads[2];
  // VJIT_ROW_PLACEMENT=tables (runtime/forwarding.h): the gathers of F into
  // buffers of their own that children may write into.
  std::vector<ForwardTarget> forward_targets;
  // VJIT_ROW_PLACEMENT=tables (FusedStep::accumulating): the gradient parts
  // the fused kernels of ∂F add into the children's rows, GatherGrad by
  // GatherGrad; per fused step of ∂F, whether it runs `accumulating`; per
  // such GatherGrad, the columns [begin, end) of its gradient no part covers;
  // bit k when slot k's GatherGrad has such parts (its children's rows are
  // zeroed, never assigned).
  std::vector<AccumulatedPart> accumulated_parts;
  std::vector<uint8_t> accumulating_steps;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> accumulated_rest;
  uint64_t accumulating_slots = 0;
};

struct RowPlacement {
  std::vector<TypePlacement> types;
};

// Decides the placement of every type of `plan` (its fused steps' accumulating
// kernels and forwarded outputs already chosen). `gather_pointers`:
// VJIT_ROW_PLACEMENT=tables on a device that honours it.
RowPlacement place_rows(const ExecPlan& plan, const std::vector<TypeSignature>& signatures, bool gather_pointers);

}  // namespace vjit::runtime
