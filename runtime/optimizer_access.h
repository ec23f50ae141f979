#pragma once
// What the engine's executors need of an Optimizer (vjit/optimizer.h) beyond
// its public step(): a step on the engine's threads with the state kept in the
// executor's parameter store, and the rule as constants with the bookkeeping
// of a step, for an executor that updates the parameters on a device with a
// kernel of its own (runtime/cuda_executor.cpp).
#include <cstdint>
#include <vector>

#include "runtime/parallel_for.h"
#include "vjit/optimizer.h"

namespace vjit::runtime {

/// An optimizer's update rule as constants: the same float operations as the
/// rule's update() in runtime/optimizer_rules.cpp.
struct DeviceUpdate {
  /// The rule.
  enum class Kind : uint8_t { None, Sgd, SgdMomentum, Adam };
  Kind kind = Kind::None;  ///< None: the rule has no device form (AdaGrad, a rule of the user's, a subclass)
  float lr = 0, weight_decay = 0, momentum = 0;  ///< SGD
  /// Adam (the corrections of this step)
  float beta1 = 0, beta2 = 0, correction1 = 1, correction2 = 1, eps = 0;
  float decay = 1;          ///< Adam: 1 − lr·weight_decay
  float scale = 1;          ///< the clipping factor of this step
  bool state_made = false;  ///< the state was made by this step: the device's slots start at zero
};

class OptimizerAccess {
 public:
  /// Optimizer::step with rows, its chunks run on `parallel` when given (else
  /// on the calling thread), reading and updating `state` when given (else the
  /// optimizer's own).
  static void step(Optimizer& optimizer, Model& model, const std::vector<std::vector<float>>& grads,
                   const std::vector<GradientRows>& rows, ParallelFor* parallel = nullptr,
                   OptimizerState* state = nullptr);

  /// The rule as constants: SGD and Adam themselves (not a subclass, which may
  /// update otherwise); kind None for every other rule.
  static DeviceUpdate device_rule(const Optimizer& optimizer);
  /// One step for an executor that keeps the parameters, gradients and state
  /// slots on a device and has summed the squares of the listed gradients
  /// there (finite: a non-finite gradient goes through step() for its error):
  /// everything step() does but the element loops — the clipping factor, the
  /// state made when needed (its host slots are zeros; the device keeps the
  /// live ones), the steps counted, the per-step constants — returning the
  /// rule to apply. Needs device_rule().kind != None.
  static DeviceUpdate begin_device_step(Optimizer& optimizer, const Model& model, OptimizerState& state,
                                        double sum_of_squares);
  /// Undoes the bookkeeping of the last begin_device_step (steps(), the
  /// state's step count, last_grad_norm(), a state it made), for an executor
  /// that found the update would leave a non-finite value and wrote nothing.
  static void cancel_device_step(Optimizer& optimizer, OptimizerState& state);
};

}  // namespace vjit::runtime
