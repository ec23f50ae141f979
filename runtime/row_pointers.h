#pragma once
// VJIT_ROW_PLACEMENT=tables: which forward values the CPU executor reads through a
// pointer per row (where each child's row lies) instead of a buffer of their
// own. The executor runs them (runtime/cpu_executor.h); the memory planner
// gives them no buffer (runtime/memplan.h).
#include <vector>

#include "runtime/exec_plan.h"

namespace vjit::runtime {

// Per value of the forward function: how many equal parts each row's value
// is read in through row pointers (1: a gather; P: a Concat of P such
// gathers), 0 for a value with a buffer (or none: a reshape of a gather is a
// view of it, and reads its pointers). A gather qualifies
// when every reader of its value (through reshapes and slices, and the
// backward's Fwd of it) is a per-vertex product the executor runs vertex by
// vertex from row pointers, a fused elementwise kernel (given a table of row
// addresses: a Tree-LSTM's children's c), or one Concat whose parts all
// qualify and whose readers are such products. Such a Concat ([A; B], MV-RNN's
// children's matrices) is read as its parts: a product W·[A; B] splits its
// inner dimension,
// W[:, :k]·A + W[:, k:]·B, and the weight gradient Σ dP·[A; B]ᵀ joins the
// rows where they lie.
std::vector<int> row_pointer_parts(const FunctionPlan& forward, const FunctionPlan& backward);

// VJIT_ROW_PLACEMENT=tables: a value of ∂F that is the gradient a GatherGrad
// of target Slot or EveryVariadic sends to the children, or a part of it (an
// argument of the Concat that is that gradient), read by nothing else: that
// GatherGrad, and the value's first column in the gradient's row.
struct GradientPart {
  ir::ValueId gather_grad = -1;
  int64_t column = 0;
};

// Per value of ∂F: its GradientPart, gather_grad -1 for any other value. A
// fused kernel may add such a value straight into the children's
// scatter-gradient rows (FusedStep::accumulating); the GatherGrad then adds
// only the rest of its gradient.
std::vector<GradientPart> gradient_parts(const ir::Function& backward);

}  // namespace vjit::runtime
