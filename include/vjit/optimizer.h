#pragma once
// Optimizers update a Model's parameters from their gradients. grads[i] is the
// gradient of parameter i (Model::param(i)), row-major, numel() floats.
//
// Every step, before anything is updated:
//   1. the gradients are checked: one per parameter, each of the parameter's size,
//      all finite — otherwise UserError naming the parameter, and the model and
//      the optimizer state are left unchanged;
//   2. with clip_norm > 0, all gradients are scaled by min(1, clip_norm / ‖g‖),
//      ‖g‖ the global L2 norm over every parameter, so the norm used is ≤ clip_norm.
// Then each parameter is updated by the rule of the subclass.
//
// State (momentum, Adam moments) is created on the first step for the model it
// sees; a later step with a model of other parameter shapes is a UserError
// (call reset() to start over).
#include <cstdint>
#include <vector>

#include "vjit/model.h"

namespace vjit {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update. Throws UserError (leaving the model untouched) on a mismatch in
  // count or size, or a non-finite gradient.
  virtual void step(Model& model, const std::vector<std::vector<float>>& grads);

  // Forgets the state (moments, step count).
  virtual void reset();

  float lr() const { return lr_; }
  void set_lr(float lr);  // for schedules; must be finite and > 0
  float clip_norm() const { return clip_norm_; }
  int64_t steps() const { return steps_; }
  // The global L2 norm of the last step's gradients, before clipping.
  double last_grad_norm() const { return last_grad_norm_; }

 protected:
  Optimizer(float lr, float clip_norm);

  // Allocates per-parameter state for `model` (called on the first step, after reset()).
  virtual void init_state(const Model& /*model*/) {}
  // Updates parameter `index` with gradient g (already checked) times `grad_scale`
  // (the clipping factor, 1 when not clipped). steps() already counts this step.
  virtual void update(int index, ParamData& param, const std::vector<float>& g, float grad_scale) = 0;

 private:
  // Throws UserError on a wrong count, size or a non-finite value; returns Σ g².
  double check(const Model& model, const std::vector<std::vector<float>>& grads);

  float lr_;
  float clip_norm_;
  int64_t steps_ = 0;
  double last_grad_norm_ = 0.0;
  std::vector<Shape> state_shapes_;  // the parameter shapes the state was made for
};

// Stochastic gradient descent with optional (heavy-ball) momentum:
//   g ← g + weight_decay·w          (classic L2 penalty, coupled to the gradient)
//   v ← momentum·v + g              (v = g when momentum = 0)
//   w ← w − lr·v
class SGD : public Optimizer {
 public:
  explicit SGD(float lr, float momentum = 0.0f, float weight_decay = 0.0f, float clip_norm = 0.0f);

  float momentum() const { return momentum_; }
  float weight_decay() const { return weight_decay_; }
  void reset() override;

 protected:
  void init_state(const Model& model) override;
  void update(int index, ParamData& param, const std::vector<float>& g, float grad_scale) override;

 private:
  float momentum_;
  float weight_decay_;
  std::vector<std::vector<float>> velocity_;
};

// Adam with decoupled weight decay (AdamW, Loshchilov & Hutter): the decay is not
// added to the gradient, so it is not rescaled by the adaptive denominator:
//   w ← w − lr·weight_decay·w
//   m ← β1·m + (1−β1)·g,   v ← β2·v + (1−β2)·g²
//   w ← w − lr·m̂/(√v̂ + eps),  m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ)
// With weight_decay = 0 this is plain Adam. The first step moves every weight with
// a non-zero gradient by lr·|g|/(|g|+eps) ≈ lr.
class Adam : public Optimizer {
 public:
  explicit Adam(float lr = 1e-3f, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f,
                float weight_decay = 0.0f, float clip_norm = 0.0f);

  float beta1() const { return beta1_; }
  float beta2() const { return beta2_; }
  float eps() const { return eps_; }
  float weight_decay() const { return weight_decay_; }
  void reset() override;

 protected:
  void init_state(const Model& model) override;
  void update(int index, ParamData& param, const std::vector<float>& g, float grad_scale) override;

 private:
  float beta1_;
  float beta2_;
  float eps_;
  float weight_decay_;
  std::vector<std::vector<float>> m_;
  std::vector<std::vector<float>> v_;
};

}  // namespace vjit
