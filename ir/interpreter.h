#pragma once
// The scalar reference interpreter over one batch (see include/vjit/reference.h).
// Precondition: the batch was validated against the program and `orders` holds
// each sample's topological order (scheduler: validate_and_order).
#include <vector>

#include "vjit/reference.h"

namespace vjit::ir {

template <typename T>
Evaluation<T> interpret(const Program& program, const std::vector<std::vector<T>>& params, const GraphBatch& batch,
                        const std::vector<std::vector<int>>& orders, const RunOptions& options);

}  // namespace vjit::ir
