#pragma once
// What one run of F (and ∂F) over a batch is asked to do, and what it returns:
// the same for the engine and the reference interpreter, so their results
// compare field by field.
#include <cstdint>
#include <vector>

namespace vjit {

struct RunOptions {
  bool training = true;   // dropout active
  bool backward = true;   // compute parameter gradients
  uint64_t seed = 0;      // dropout masks are a function of (seed, sample, vertex, op, element)
};

template <typename T>
struct Evaluation {
  double objective = 0.0;
  // pushes[sample][vertex][k]: the k-th pushed value of that vertex, flattened.
  std::vector<std::vector<std::vector<std::vector<T>>>> pushes;
  // param_grads[param id]: d objective / d parameter, flattened (zeros when unused).
  std::vector<std::vector<T>> param_grads;
};

}  // namespace vjit
