#pragma once
// Graphs that grow while they run: greedy decoding that stops at an end token,
// a parser choosing its next action from what it computed so far.
//
// A vertex type is made "growing" on an Engine with Engine::set_growth(type,
// callback). Its forward pass then runs in rounds: every vertex known so far
// is evaluated (batched across all samples with the engine's policy), then
// the callback is called once for each vertex of a growing type evaluated for
// the first time in that round, in (sample, vertex) order. It reads that
// vertex's pushed values and may add vertices to the vertex's own sample
// (their children: vertices that already exist in it). The rounds repeat
// until a round adds nothing; after the first, a round runs only the samples
// the round before added to. Inference (Engine::infer, or forward without
// gradients or dropout) on the CPU keeps the values of earlier rounds: a
// round evaluates only the vertices added since the last one, reading what
// their earlier children scattered from stand-ins, so every vertex is
// evaluated once. Otherwise (training, the CUDA executor, VJIT_POLICY=fsm) a
// round evaluates each growing sample's whole graph so far again, and a final
// round the whole grown batch when some sample sat out the last one.
// The result, the objective and the backward pass are those of the final
// (grown) graph, which Engine::grown_batch() returns:
// the reference interpreter run on it gives the same values and gradients.
//
//   engine.set_growth(decoder, [&](vjit::GrowthStep& step) {
//     std::span<const float> logits = step.push(0);
//     int next = argmax(logits);
//     if (next != end_token) step.add_vertex(decoder, {step.vertex()}, next);
//   });
//   engine.infer(prompts);                       // grows, then returns the pushes
//   const vjit::GraphBatch& decoded = engine.grown_batch();
//
// A callback sees its own sample only, so a batch grows exactly as each of
// its samples grows alone. A callback that throws, an addition that names an
// unknown type or a child that does not exist, and a sample that grows past
// Engine::set_growth_limit() are UserErrors naming the sample and vertex; the
// engine stays usable.
#include <functional>
#include <span>
#include <vector>

#include "vjit/graph.h"
#include "vjit/run.h"

namespace vjit {

/// What a growth callback sees of one just-evaluated vertex, and how it adds
/// vertices to that vertex's sample.
class GrowthStep {
 public:
  /// `pushes` holds the vertex's values at (pushed_sample, pushed_vertex): the
  /// batch a round ran may hold only the samples still growing, and only the
  /// vertices it evaluated.
  GrowthStep(Sample& sample, int sample_index, int pushed_sample, int vertex, int pushed_vertex,
             const PushedValues<float>& pushes, int num_types, int max_vertices)
      : sample_(sample), sample_index_(sample_index), pushed_sample_(pushed_sample), vertex_(vertex),
        pushed_vertex_(pushed_vertex), pushes_(pushes), num_types_(num_types), max_vertices_(max_vertices) {}

  int sample_index() const { return sample_index_; }  ///< in the batch passed to the engine
  int vertex() const { return vertex_; }    ///< its index in the sample
  const Sample& sample() const { return sample_; }  ///< as grown so far
  int num_pushes() const { return pushes_.count(pushed_sample_, pushed_vertex_); }  ///< how many values the vertex pushed
  std::span<const float> push(int k) const { return pushes_.at(pushed_sample_, pushed_vertex_, k); }  ///< its k-th pushed value, flattened row-major

  /// Adds a vertex to this sample and returns its index. Throws UserError for a
  /// type outside the program, a child index that does not exist yet, or a
  /// sample already at the engine's growth limit. The rest (arity, shapes,
  /// tokens, labels) is checked with the next round's batch.
  int add_vertex(int type, std::vector<int> children = {}, int token = -1, int label = -1);
  int add_vertex(Vertex vertex);  ///< the same, for a whole Vertex (features included)

 private:
  Sample& sample_;
  int sample_index_;
  int pushed_sample_;
  int vertex_;
  int pushed_vertex_;
  const PushedValues<float>& pushes_;
  int num_types_;
  int max_vertices_;
};

using GrowthCallback = std::function<void(GrowthStep&)>;

}  // namespace vjit
