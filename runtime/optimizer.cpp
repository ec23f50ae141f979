#include "vjit/optimizer.h"

#include <cmath>

#include "vjit/error.h"

namespace vjit {

namespace {

void check_hyper(bool ok, const char* optimizer, const char* name, float value, const char* expected) {
  VJIT_USER_CHECK(ok, optimizer << ": " << name << "=" << value << " is not valid; expected " << expected);
}

bool finite(float x) { return std::isfinite(x); }

// Calls update(begin, end) for the element ranges a step changes: the whole
// parameter, or for an embedding table only its rows with a non-zero gradient.
template <typename Update>
void for_each_updated_range(const ParamData& param, const std::vector<float>& g, Update update) {
  if (!param.sparse_rows || param.shape.rank != 2) {
    update(size_t(0), g.size());
    return;
  }
  size_t cols = size_t(param.shape.cols());
  for (size_t row = 0; row < g.size(); row += cols) {
    bool touched = false;
    for (size_t k = row; k < row + cols && !touched; ++k) touched = g[k] != 0.0f;
    if (touched) update(row, row + cols);
  }
}

// Σ g² in double with independent partial sums, so the loop vectorises instead
// of waiting on one long chain of dependent additions. Non-finite when any
// element is (float values cannot overflow a double square).
double sum_of_squares(const std::vector<float>& g) {
  constexpr size_t kLanes = 8;
  double partial[kLanes] = {};
  size_t k = 0;
  for (; k + kLanes <= g.size(); k += kLanes)
    for (size_t l = 0; l < kLanes; ++l) partial[l] += double(g[k + l]) * double(g[k + l]);
  for (; k < g.size(); ++k) partial[0] += double(g[k]) * double(g[k]);
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

// --- Optimizer ---

Optimizer::Optimizer(float lr, float clip_norm) : lr_(lr), clip_norm_(clip_norm) {
  check_hyper(finite(lr) && lr > 0.0f, "Optimizer", "lr", lr, "a finite value > 0");
  check_hyper(finite(clip_norm) && clip_norm >= 0.0f, "Optimizer", "clip_norm", clip_norm,
              "a finite value >= 0 (0 = no clipping)");
}

void Optimizer::set_lr(float lr) {
  check_hyper(finite(lr) && lr > 0.0f, "Optimizer", "lr", lr, "a finite value > 0");
  lr_ = lr;
}

void Optimizer::reset() {
  steps_ = 0;
  last_grad_norm_ = 0.0;
  state_shapes_.clear();
}

double Optimizer::check(const Model& model, const std::vector<std::vector<float>>& grads) {
  double total_sum_of_squares = 0.0;
  VJIT_USER_CHECK(int(grads.size()) == model.size(), "Optimizer::step: got " << grads.size()
                                                                             << " gradients for a model with "
                                                                             << model.size() << " parameters");
  if (!state_shapes_.empty()) {
    bool same = int(state_shapes_.size()) == model.size();
    for (int i = 0; same && i < model.size(); ++i) same = state_shapes_[size_t(i)] == model.param(i).shape;
    VJIT_USER_CHECK(same, "Optimizer::step: the optimizer state was made for a model with "
                              << state_shapes_.size()
                              << " parameters of other shapes; use one optimizer per model or call reset()");
  }
  for (int i = 0; i < model.size(); ++i) {
    const ParamData& p = model.param(i);
    const std::vector<float>& g = grads[size_t(i)];
    VJIT_USER_CHECK(int64_t(g.size()) == p.shape.numel(),
                    "Optimizer::step: gradient of parameter '" << p.name << "' has " << g.size()
                                                               << " values, the parameter has shape "
                                                               << p.shape.str() << " (" << p.shape.numel()
                                                               << " values)");
    const double sum = sum_of_squares(g);
    total_sum_of_squares += sum;
    if (std::isfinite(sum)) continue;  // the common case, one vectorised pass
    for (size_t k = 0; k < g.size(); ++k) {
      if (!finite(g[k])) {
        const int cols = p.shape.cols();
        detail::Message where;
        if (p.shape.rank == 2)
          where << "[" << k / size_t(cols) << "," << k % size_t(cols) << "]";
        else
          where << "[" << k << "]";
        throw UserError((detail::Message() << "Optimizer::step: non-finite gradient " << g[k] << " for parameter '"
                                           << p.name << "' at " << where.str() << "; the model was not updated")
                            .str());
      }
    }
  }
  return total_sum_of_squares;
}

void Optimizer::step(Model& model, const std::vector<std::vector<float>>& grads) {
  const double norm = std::sqrt(check(model, grads));  // throws before anything changes
  float scale = 1.0f;
  if (clip_norm_ > 0.0f && norm > double(clip_norm_)) {
    scale = float(double(clip_norm_) / norm);
    // Guard against float rounding pushing the clipped norm just above the bound.
    while (scale > 0.0f && double(scale) * norm > double(clip_norm_)) scale = std::nextafter(scale, 0.0f);
  }

  if (state_shapes_.empty()) {
    init_state(model);
    state_shapes_.clear();
    for (int i = 0; i < model.size(); ++i) state_shapes_.push_back(model.param(i).shape);
  }
  last_grad_norm_ = norm;
  ++steps_;
  for (int i = 0; i < model.size(); ++i) update(i, model.param(i), grads[size_t(i)], scale);
}

// --- SGD ---

SGD::SGD(float lr, float momentum, float weight_decay, float clip_norm)
    : Optimizer(lr, clip_norm), momentum_(momentum), weight_decay_(weight_decay) {
  check_hyper(finite(momentum) && momentum >= 0.0f && momentum < 1.0f, "SGD", "momentum", momentum,
              "a value in [0, 1)");
  check_hyper(finite(weight_decay) && weight_decay >= 0.0f, "SGD", "weight_decay", weight_decay,
              "a finite value >= 0");
}

void SGD::reset() {
  Optimizer::reset();
  velocity_.clear();
}

void SGD::init_state(const Model& model) {
  velocity_.assign(size_t(model.size()), {});
  if (momentum_ > 0.0f)
    for (int i = 0; i < model.size(); ++i) velocity_[size_t(i)].assign(size_t(model.param(i).shape.numel()), 0.0f);
}

void SGD::update(int index, ParamData& param, const std::vector<float>& g, float grad_scale) {
  std::vector<float>& w = param.value;
  const float lr = this->lr();
  for_each_updated_range(param, g, [&](size_t begin, size_t end) {
    if (momentum_ > 0.0f) {
      std::vector<float>& v = velocity_[size_t(index)];
      for (size_t k = begin; k < end; ++k) {
        const float d = g[k] * grad_scale + weight_decay_ * w[k];
        v[k] = momentum_ * v[k] + d;
        w[k] -= lr * v[k];
      }
    } else {
      for (size_t k = begin; k < end; ++k) w[k] -= lr * (g[k] * grad_scale + weight_decay_ * w[k]);
    }
  });
}

// --- Adam ---

Adam::Adam(float lr, float beta1, float beta2, float eps, float weight_decay, float clip_norm)
    : Optimizer(lr, clip_norm), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {
  check_hyper(finite(beta1) && beta1 >= 0.0f && beta1 < 1.0f, "Adam", "beta1", beta1, "a value in [0, 1)");
  check_hyper(finite(beta2) && beta2 >= 0.0f && beta2 < 1.0f, "Adam", "beta2", beta2, "a value in [0, 1)");
  check_hyper(finite(eps) && eps > 0.0f, "Adam", "eps", eps, "a finite value > 0");
  check_hyper(finite(weight_decay) && weight_decay >= 0.0f, "Adam", "weight_decay", weight_decay,
              "a finite value >= 0");
}

void Adam::reset() {
  Optimizer::reset();
  m_.clear();
  v_.clear();
}

void Adam::init_state(const Model& model) {
  m_.assign(size_t(model.size()), {});
  v_.assign(size_t(model.size()), {});
  for (int i = 0; i < model.size(); ++i) {
    m_[size_t(i)].assign(size_t(model.param(i).shape.numel()), 0.0f);
    v_[size_t(i)].assign(size_t(model.param(i).shape.numel()), 0.0f);
  }
}

void Adam::update(int index, ParamData& param, const std::vector<float>& g, float grad_scale) {
  std::vector<float>& w = param.value;
  std::vector<float>& m = m_[size_t(index)];
  std::vector<float>& v = v_[size_t(index)];
  const double t = double(steps());
  const float correction1 = float(1.0 - std::pow(double(beta1_), t));
  const float correction2 = float(1.0 - std::pow(double(beta2_), t));
  const float lr = this->lr();
  const float decay = 1.0f - lr * weight_decay_;
  for_each_updated_range(param, g, [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      const float gk = g[k] * grad_scale;
      m[k] = beta1_ * m[k] + (1.0f - beta1_) * gk;
      v[k] = beta2_ * v[k] + (1.0f - beta2_) * gk * gk;
      const float m_hat = m[k] / correction1;
      const float v_hat = v[k] / correction2;
      w[k] = w[k] * decay - lr * m_hat / (std::sqrt(v_hat) + eps_);
    }
  });
}

}  // namespace vjit
