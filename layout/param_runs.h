#pragma once
// Parameter runs: the per-program use of layout planning (issue 11). A merged
// product (ir/merge_matmuls.h) reads its parameters stacked, W = [W_a; W_b; …],
// as one row-major block. Where the Model holds them one right after another,
// in that order, the product reads them in place; else an executor copies them
// into a block of its own every pass.
//
// Each stacked weight asks for a *sequence*: its parameters consecutive and in
// its order. Consecutive-ones constraints (a PQ-tree) say nothing of order, and
// a sequence is already as narrow as a constraint can be, so the exact planner
// is simpler: a sequence fixes each parameter's successor, and the sequences
// that agree on successors and close no cycle join into chains, one block each.
//
//   plan_param_runs(n, sequences)   sequences in priority order (an earlier
//                                   one is kept before a later that conflicts
//                                   with it)
//   runs                            the chains of two or more parameters, each
//                                   in its order (disjoint)
//   kept[s]                         whether sequence s lies inside a run, as it
//                                   asked; a sequence not kept costs its reader a
//                                   copy of the weights, never a wrong result
#include <span>
#include <vector>

namespace vjit::layout {

struct ParamRuns {
  std::vector<std::vector<int>> runs;
  std::vector<bool> kept;  // per sequence
};

// Parameters are 0 … num_params − 1; a sequence naming one outside that range,
// or one twice, or fewer than two, is not kept.
ParamRuns plan_param_runs(int num_params, std::span<const std::vector<int>> sequences);

}  // namespace vjit::layout
