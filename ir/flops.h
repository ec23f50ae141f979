#pragma once
// Useful floating-point operations of one vertex function: what evaluating F
// (or ∂F) once for one vertex needs, counted on the function as written — the
// Program's own F and ∂F, before matmul merging, fusion or any recomputation —
// so a benchmark can compare what a model needs with what the machine can do.
//
// The rule, per node (per vertex; uniform values are counted per vertex too),
// is its op's FlopRule in the op table (ir/ops.h):
//   MatMul            2·m·n·k  (m·n result elements, k the contracted dimension)
//   Outer             m·n      (one product per element)
//   ParamGrad         the operand's elements (one add each into the gradient:
//                     with the Outer before it, a weight gradient costs
//                     2·m·n per vertex, the multiply-add of the outer product)
//   elementwise       1 per result element (every unary and binary op, Dropout
//                     included, whatever the op: tanh counts as one)
//   Sum, SumRows      1 per operand element
//   SoftmaxCE,        kSoftmaxFlopsPerClass per class (max, subtract, exp, add;
//   SoftmaxCEGrad     the gradient: exp, normalise, subtract the one-hot, scale)
//   MaxChildren(Grad) 1 per element of the children block
//   row ops           their own count (RowOp::flops, ir/row_op.h)
//   everything else   0: gathers, pulls, pushes, scatters and their gradients
//                     (EmbeddingGrad, GatherGrad), concatenation, slices, pads,
//                     broadcasts, constants, parameters, losses
#include <cstdint>

#include "ir/ops.h"

namespace vjit::ir {

inline constexpr int64_t kSoftmaxFlopsPerClass = 4;

// The flops of one node of `function` by the rule above.
int64_t flops_of_node(const Function& function, ValueId id);

// Σ flops_of_node over the function: the useful flops of one vertex.
int64_t flops_per_vertex(const Function& function);

}  // namespace vjit::ir
