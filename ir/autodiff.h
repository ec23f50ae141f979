#pragma once
// Reverse-mode differentiation of a vertex function F into ∂F, itself IR.
//
// ∂F runs per vertex in reverse topological order. It reads F's values through
// Fwd nodes, the gradient its parents accumulated into its scatter through
// ScatterGrad, and emits sinks: GatherGrad (a scatter-*add* into a child's
// gradient slot, since a child may have several parents), ParamGrad (one per
// use of a parameter, so each weight-gradient term stays a separate product the
// runtime can batch across all vertices) and EmbeddingGrad (a sparse row update).
// A uniform Concat of parameters (merge_matmuls' stacked weights) is read again
// in ∂F like a parameter, and its gradient is sliced back to each parameter.
#include "ir/ops.h"

namespace vjit::ir {

// Precondition: `forward` verifies and has been simplified (its ids are final:
// Fwd nodes of ∂F refer to them).
Function differentiate(const Function& forward);

}  // namespace vjit::ir
