#pragma once
// Finite differences in double against the reference interpreter's ∂F. The
// five-point stencil (error O(h⁴)) with h = 1e-3 keeps both truncation and
// rounding error near 1e-11, far below the 1e-6 relative tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "vjit/vjit.h"

namespace vjit::testing {

struct GradcheckResult {
  double max_relative_error = 0.0;
  std::string worst;  // "param[index]: analytic vs numeric"
  int checked = 0;
};

// Relative error with a floor on the denominator, so gradients that are zero
// up to rounding compare absolutely.
inline double relative_error(double analytic, double numeric) {
  return std::abs(analytic - numeric) / std::max({std::abs(analytic), std::abs(numeric), 1e-3});
}

// Checks up to `per_param` elements of every parameter (all of them when the
// parameter is smaller), chosen by a fixed seed.
inline GradcheckResult gradcheck(const Program& program, const GraphBatch& batch, int per_param = 24,
                                 double h = 1e-3, RunOptions options = {}) {
  std::vector<std::vector<double>> params = parameter_values<double>(program.model());
  Evaluation<double> analytic = reference_evaluate(program, params, batch, options);
  RunOptions forward_only = options;
  forward_only.backward = false;
  GradcheckResult result;
  std::mt19937_64 rng(7);
  for (size_t p = 0; p < params.size(); ++p) {
    std::vector<size_t> indices(params[p].size());
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = i;
    std::shuffle(indices.begin(), indices.end(), rng);
    if (int(indices.size()) > per_param) indices.resize(size_t(per_param));
    for (size_t i : indices) {
      double saved = params[p][i];
      auto objective_at = [&](double offset) {
        params[p][i] = saved + offset;
        return reference_evaluate(program, params, batch, forward_only).objective;
      };
      double numeric = (8 * (objective_at(h) - objective_at(-h)) - (objective_at(2 * h) - objective_at(-2 * h))) / (12 * h);
      params[p][i] = saved;
      double error = relative_error(analytic.param_grads[p][i], numeric);
      ++result.checked;
      if (error > result.max_relative_error) {
        result.max_relative_error = error;
        result.worst = program.model().param(int(p)).name + "[" + std::to_string(i) + "]: analytic " +
                       std::to_string(analytic.param_grads[p][i]) + " vs numeric " + std::to_string(numeric);
      }
    }
  }
  return result;
}

}  // namespace vjit::testing
