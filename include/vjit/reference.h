#pragma once
// The scalar reference interpreter: evaluates F and ∂F vertex by vertex in
// topological order, in float or double. It is the oracle every optimisation is
// tested against, so it is kept simple and obviously right.
#include <vector>

#include "vjit/graph.h"
#include "vjit/program.h"
#include "vjit/run.h"

namespace vjit {

template <typename T>
Evaluation<T> reference_evaluate(const Program& program, const std::vector<std::vector<T>>& params,
                                 const GraphBatch& batch, const RunOptions& options = {});

/// Uses the model's current float parameters.
Evaluation<float> reference_evaluate(const Program& program, const GraphBatch& batch,
                                     const RunOptions& options = {});

template <typename T>
std::vector<std::vector<T>> parameter_values(const Model& model) {
  std::vector<std::vector<T>> values;
  for (int i = 0; i < model.size(); ++i)
    values.emplace_back(model.param(i).value.begin(), model.param(i).value.end());
  return values;
}

}  // namespace vjit
