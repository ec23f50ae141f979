#pragma once
// Holds an engine's lock — the one every public call of vjit/engine.h holds
// ("Threads") — across several steps that must be one call: a checkpoint's
// save reads the weights, the optimizer state and the step count of one step,
// a load writes them with no train_step or infer in between
// (jit/checkpoint.cpp). The accessors below run under the lock held, so they
// must not call the engine's public members, which would take it again.
#include <cstdint>
#include <mutex>

#include "vjit/engine.h"

namespace vjit::jit {

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

 private:
  Engine::Impl& impl_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace vjit::jit
