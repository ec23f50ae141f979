#pragma once
// Holds an engine's lock — the one every public call of vjit/engine.h holds
// ("Threads") — across several steps that must be one call: a checkpoint's
// save reads the weights, the optimizer state and the step count of one step,
// a load writes them with no train_step or infer in between
// (jit/checkpoint.cpp). The accessors below run under the lock held, so they
// must not call the engine's public members, which would take it again. Tests
// and perf/ read the engine's InternalStats through it.
#include <cstdint>
#include <mutex>

#include "vjit/engine.h"

namespace vjit::jit {

// How the engine's planners and executors ran the batches, beside the
// EngineStats of the same calls (summed alike, zeroed by reset_stats): what
// tests check and vjit-bench reports of the scheduler, the memory planner, the
// executors and the gradient exchange.
struct InternalStats {
  int64_t fsm_fallbacks = 0;     // policy "fsm": scheduling steps its table did not decide
  int64_t param_grad_gemms = 0;  // GEMMs accumulating weight gradients
  // Bytes moved only because of where values lie (VJIT_MEMPLAN decides them):
  // gathers that are not views, their gradients, and Concat arguments not laid
  // out in place. A subset of EngineStats::copy_bytes, except the Concat copies.
  int64_t layout_copy_bytes = 0;
  // Matmul merging (VJIT_MERGE_MATMULS) runs products that share an operand as
  // one GEMM over their weights stacked in one block; on the CPU the weights
  // are copied there once per pass and vertex type that reads them unless the
  // Model holds them so (VJIT_PARAM_LAYOUT). Not in copy_bytes.
  int64_t stacked_weight_bytes = 0;
  int64_t gather_views = 0;  // gathers that read their rows in place (a view) instead of copying them
  // VJIT_PRETRANSPOSE: weights the CPU executor copied transposed, once per
  // forward pass each, so that the GEMMs that multiply many rows by them read
  // an untransposed operand.
  int64_t pretransposed_weights = 0;
  // VJIT_MEMPLAN=pqtree: the alignment constraints it posed (a task's children
  // in one gather slot, consecutive and in the task's order) and how many hold.
  int64_t aligned_batches = 0, aligned_satisfied = 0;
  // Data-parallel training (vjit/distributed.h): the buckets of dense
  // gradients summed over the ranks, and those whose sum started during the
  // backward pass (VJIT_DIST_OVERLAP).
  int64_t dist_buckets = 0, dist_buckets_overlapped = 0;
};

class EngineAccess {
 public:
  // Waits for the call running on the engine, if any, then holds its lock
  // until destroyed. The setters change the engine: use them only on one the
  // caller may change (Engine&).
  explicit EngineAccess(const Engine& engine);

  OptimizerState optimizer_state() const;
  uint64_t train_steps() const;
  void set_optimizer_state(OptimizerState state);
  void set_train_steps(uint64_t steps);
  // Copies the Model's values to where the engine keeps them (Engine::upload_parameters).
  void upload_parameters();
  // Copies the parameters' values into the Model where the engine keeps newer ones (Engine::download_parameters).
  void download_parameters() const;
  // The counters beside Engine::stats() (a copy).
  InternalStats internal_stats() const;

 private:
  Engine::Impl& impl_;
  std::unique_lock<std::mutex> lock_;
};

// The engine's InternalStats, taken under its lock (tests, perf/).
inline InternalStats internal_stats(const Engine& engine) { return EngineAccess(engine).internal_stats(); }

}  // namespace vjit::jit
