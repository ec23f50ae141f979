#pragma once
// The scalar reference interpreter over one batch (jit/reference.cpp runs it
// behind vjit::reference_evaluate).
// Precondition: the batch was validated against the program and `orders` holds
// each sample's topological order (scheduler: validate_and_order).
#include <vector>

#include "vjit/graph.h"
#include "vjit/program.h"
#include "vjit/run.h"

namespace vjit::ir {

template <typename T>
Evaluation<T> interpret(const Program& program, const std::vector<std::vector<T>>& params, const GraphBatch& batch,
                        const std::vector<std::vector<int>>& orders, const RunOptions& options);

}  // namespace vjit::ir
