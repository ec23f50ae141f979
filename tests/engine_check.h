#pragma once
// Compares an Engine run with the double-precision reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit::testing {

// Example models small enough to check against the double reference in
// milliseconds: hidden 8, `train_samples` built-in samples, dropout on.
inline models::Config small_config(int train_samples = 64) {
  models::Config config;
  config.hidden = 8;
  config.embed = 6;
  config.train_samples = train_samples;
  config.test_samples = 0;
  config.tree_fc_leaves = 16;
  config.dropout = 0.25;
  return config;
}

// ‖a − b‖∞ / max(‖b‖∞, 1e-6): a tensor's relative error; infinite when the
// sizes differ.
template <typename A, typename B>
double tensor_error(const A& a, const B& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// The engine's last objective and pushed values equal the reference's.
inline void expect_outputs_match(Engine& engine, double objective, const Evaluation<double>& ref, double tolerance,
                                 const std::string& what) {
  EXPECT_LE(std::abs(objective - ref.objective), tolerance * std::max(1.0, std::abs(ref.objective))) << what;
  const Evaluation<float>& out = engine.last_result();
  ASSERT_EQ(out.pushes.num_samples(), ref.pushes.num_samples()) << what;
  double worst_push = 0;
  for (int s = 0; s < ref.pushes.num_samples(); ++s)
    for (int v = 0; v < ref.pushes.num_vertices(s); ++v) {
      ASSERT_EQ(out.pushes.count(s, v), ref.pushes.count(s, v)) << what << " sample " << s << " vertex " << v;
      for (int k = 0; k < ref.pushes.count(s, v); ++k)
        worst_push = std::max(worst_push, tensor_error(out.pushes.at(s, v, k), ref.pushes.at(s, v, k)));
    }
  EXPECT_LE(worst_push, tolerance) << what << ": pushed values";
}

// Objective, every pushed value and every parameter gradient of one batched
// training step equal the reference within `tolerance` (relative).
inline void expect_matches_reference(Engine& engine, const Program& program, const GraphBatch& batch,
                                     double tolerance, const std::string& what) {
  RunOptions run;
  run.seed = 5;
  double objective = engine.forward(batch, run);
  engine.backward();
  Evaluation<double> ref = reference_evaluate(program, parameter_values<double>(program.model()), batch, run);
  expect_outputs_match(engine, objective, ref, tolerance, what);
  ASSERT_EQ(engine.gradients().size(), ref.param_grads.size()) << what;
  for (size_t p = 0; p < ref.param_grads.size(); ++p)
    EXPECT_LE(tensor_error(engine.gradients()[p], ref.param_grads[p]), tolerance)
        << what << ": gradient of " << program.model().param(int(p)).name;
}

// The same for a forward pass that no backward follows (RunOptions::backward
// off): objective and pushed values.
inline void expect_forward_only_matches_reference(Engine& engine, const Program& program, const GraphBatch& batch,
                                                  double tolerance, const std::string& what) {
  RunOptions run;
  run.seed = 5;
  run.backward = false;
  double objective = engine.forward(batch, run);
  Evaluation<double> ref = reference_evaluate(program, parameter_values<double>(program.model()), batch, run);
  expect_outputs_match(engine, objective, ref, tolerance, what);
}

}  // namespace vjit::testing
