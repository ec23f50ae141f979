#pragma once
// One round of growth (vjit/growth.h): calls the growth callbacks of the
// vertices a round evaluated for the first time.
#include <span>
#include <string>
#include <vector>

#include "vjit/growth.h"
#include "vjit/program.h"

namespace vjit::jit {

struct GrowthRules {
  std::vector<GrowthCallback> callbacks;  // per vertex type; empty: the type does not grow
  int max_vertices = 4096;                // per sample, the vertices growth may bring it to
  // Added to the sample index a callback sees (GrowthStep::sample_index): a
  // group's first sample in the caller's batch when infer() runs the batch in
  // groups (VJIT_INFER_SHARDS), else 0.
  int first_sample_index = 0;

  bool any() const;
};

// For each sample i of `round` (the samples a round ran: sample samples[i] of
// the caller's batch, pushes at index i, vertex v's at v + push_shift[i], or
// at v when push_shift is empty), calls the callback of every vertex
// from first_new[samples[i]] to the sample's size when the round began whose
// type grows, in vertex order, then moves first_new past them. Leaves in
// `samples` the caller's indices of the samples that grew. A callback that
// throws becomes a UserError naming the sample, vertex and type.
void grow_round(const Program& program, const GrowthRules& rules, const PushedValues<float>& pushes,
                std::span<Sample* const> round, std::vector<int>& samples, std::vector<int>& first_new,
                std::span<const int> push_shift = {});

}  // namespace vjit::jit
