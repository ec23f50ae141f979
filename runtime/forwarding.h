#pragma once
// VJIT_ROW_PLACEMENT=tables (CPU executor): a part of what a vertex scatters that a
// fused kernel computes — a Tree-LSTM's h, an argument of the Concat [h; c] it
// scatters — and that its parent gathers into a buffer of the parent's own
// (the parent's [h_l; h_r], which the GEMM reads) is written there by the
// kernel as it computes it, beside the child's own row: the kernel has the
// part as a second output (jit/pipeline.cpp), which the executor points, row
// by row, at the parent's row, and the parent's gather copies nothing for
// that child. A child with several parents forwards to the one whose gathers
// take most of its parts (BatchLayout::forward_parent, runtime/batch_rows.h); a gather_sum
// takes a child only where its row has that one child. A gather that is read
// through row pointers (runtime/row_pointers.h) has no buffer to forward to;
// one the layout makes a view takes a part only where a Concat would copy it.
#include <cstdint>
#include <vector>

#include "runtime/exec_plan.h"
#include "vjit/graph.h"

namespace vjit::runtime {

// A gather into a buffer that parts may be forwarded to: the Gather (or
// GatherSum) node, its child slot (the type's fixed arity: the variadic sum,
// forwarded to only where a row has one variadic child), the columns of the
// child's row it reads, and how wide that row is.
struct ForwardTarget {
  ir::ValueId gather = -1;
  int slot = 0;
  int64_t start = 0, width = 0, row_width = 0;

  // Whether `part` of a row `row_width` wide lies within the columns read.
  bool takes(const ForwardedPart& part, int64_t child_row_width) const {
    return child_row_width == row_width && part.start >= start && part.start + part.width <= start + width;
  }
};

// Per type: the gathers of its forward function into buffers of their own
// (Gathers not read through row pointers, `pointers` per type as
// row_pointer_parts gives them, an empty list: none is; GatherSums).
std::vector<std::vector<ForwardTarget>> forward_targets(const ExecPlan& plan,
                                                        const std::vector<TypeSignature>& signatures,
                                                        const std::vector<std::vector<int>>& pointers);

// Per type: the parts of what it scatters that a fused kernel computes and that
// some type's gather reads (within its columns).
std::vector<std::vector<ForwardedPart>> forwarded_parts(const ExecPlan& plan,
                                                        const std::vector<std::vector<ForwardTarget>>& targets);

}  // namespace vjit::runtime
