// The update rules vjit provides (SGD, Adam, AdaGrad): their vectorised
// loops and previews; how a step runs them is runtime/optimizer.cpp.
#include "vjit/optimizer.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "ir/vector_clones.h"
#include "runtime/optimizer_checks.h"
#include "vjit/error.h"

// The loops below carry VJIT_VECTOR_CLONES (ir/vector_clones.h); this
// file is also compiled with -fno-math-errno (CMakeLists.txt) so that sqrt
// vectorises.

namespace vjit {

using runtime::bias_correction;
using runtime::check_hyper;
using runtime::finite;

namespace {

// Each rule's arithmetic on one element, written once for the update loops
// and for the previews (the same loops without stores, checking every value
// they would write): so a preview computes exactly the values the update
// writes. kHasG false: the element has no gradient (a row GradientRows leaves
// out, under dense updates), and the gradient term is left out, not added as 0.

// A float is NaN or ±Inf exactly when its exponent bits are all ones.
[[gnu::always_inline]] inline uint32_t non_finite_bit(float x) {
  return uint32_t((std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u);
}

struct SgdConstants {
  float lr, scale, weight_decay, momentum;
};

// SGD without momentum: w ← w − lr·(g·scale + wd·w).
template <bool kHasG>
[[gnu::always_inline]] inline float sgd_plain_element(float w, float g, const SgdConstants& c) {
  if constexpr (kHasG) return w - c.lr * (g * c.scale + c.weight_decay * w);
  else return w - c.lr * (c.weight_decay * w);
}

// SGD with momentum: d = g·scale + wd·w, v ← μ·v + d, w ← w − lr·v.
struct WeightAndVelocity {
  float w, v;
};
template <bool kHasG>
[[gnu::always_inline]] inline WeightAndVelocity sgd_momentum_element(float w, float v, float g, const SgdConstants& c) {
  float d;
  if constexpr (kHasG) d = g * c.scale + c.weight_decay * w;
  else d = c.weight_decay * w;
  const float vk = c.momentum * v + d;
  return {w - c.lr * vk, vk};
}

struct AdamConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float correction1, correction2;  // 1 − βᵗ
  float lr, decay, eps, scale;     // decay = 1 − lr·weight_decay
};

// Adam(W): without a gradient m and v decay and the weight keeps moving.
struct AdamValues {
  float w, m, v;
};
template <bool kHasG>
[[gnu::always_inline]] inline AdamValues adam_element(float w, float m, float v, float g, const AdamConstants& c) {
  float mk, vk;
  if constexpr (kHasG) {
    const float gk = g * c.scale;
    mk = c.beta1 * m + c.one_minus_beta1 * gk;
    vk = c.beta2 * v + c.one_minus_beta2 * gk * gk;
  } else {
    mk = c.beta1 * m;
    vk = c.beta2 * v;
  }
  return {w * c.decay - c.lr * (mk / c.correction1) / (std::sqrt(vk / c.correction2) + c.eps), mk, vk};
}

// --- the update loops (g null: no gradient) ---

VJIT_VECTOR_CLONES void sgd_plain(float* __restrict w, const float* __restrict g, int64_t n, SgdConstants c) {
  if (g) {
    for (int64_t k = 0; k < n; ++k) w[k] = sgd_plain_element<true>(w[k], g[k], c);
  } else {
    for (int64_t k = 0; k < n; ++k) w[k] = sgd_plain_element<false>(w[k], 0.0f, c);
  }
}

VJIT_VECTOR_CLONES void sgd_momentum(float* __restrict w, float* __restrict v, const float* __restrict g, int64_t n,
                                     SgdConstants c) {
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const WeightAndVelocity x = sgd_momentum_element<true>(w[k], v[k], g[k], c);
      w[k] = x.w;
      v[k] = x.v;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const WeightAndVelocity x = sgd_momentum_element<false>(w[k], v[k], 0.0f, c);
      w[k] = x.w;
      v[k] = x.v;
    }
  }
}

VJIT_VECTOR_CLONES void adam_update(float* __restrict w, float* __restrict m, float* __restrict v,
                                    const float* __restrict g, int64_t n, AdamConstants c) {
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const AdamValues x = adam_element<true>(w[k], m[k], v[k], g[k], c);
      m[k] = x.m;
      v[k] = x.v;
      w[k] = x.w;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const AdamValues x = adam_element<false>(w[k], m[k], v[k], 0.0f, c);
      m[k] = x.m;
      v[k] = x.v;
      w[k] = x.w;
    }
  }
}

// --- the previews: whether every value the loop above would write is finite ---

VJIT_VECTOR_CLONES bool sgd_plain_finite(const float* __restrict w, const float* __restrict g, int64_t n,
                                         SgdConstants c) {
  uint32_t bad = 0;
  if (g) {
    for (int64_t k = 0; k < n; ++k) bad |= non_finite_bit(sgd_plain_element<true>(w[k], g[k], c));
  } else {
    for (int64_t k = 0; k < n; ++k) bad |= non_finite_bit(sgd_plain_element<false>(w[k], 0.0f, c));
  }
  return bad == 0;
}

VJIT_VECTOR_CLONES bool sgd_momentum_finite(const float* __restrict w, const float* __restrict v,
                                            const float* __restrict g, int64_t n, SgdConstants c) {
  uint32_t bad = 0;
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const WeightAndVelocity x = sgd_momentum_element<true>(w[k], v[k], g[k], c);
      bad |= non_finite_bit(x.w) | non_finite_bit(x.v);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const WeightAndVelocity x = sgd_momentum_element<false>(w[k], v[k], 0.0f, c);
      bad |= non_finite_bit(x.w) | non_finite_bit(x.v);
    }
  }
  return bad == 0;
}

VJIT_VECTOR_CLONES bool adam_finite(const float* __restrict w, const float* __restrict m, const float* __restrict v,
                                    const float* __restrict g, int64_t n, AdamConstants c) {
  uint32_t bad = 0;
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const AdamValues x = adam_element<true>(w[k], m[k], v[k], g[k], c);
      bad |= non_finite_bit(x.w) | non_finite_bit(x.m) | non_finite_bit(x.v);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const AdamValues x = adam_element<false>(w[k], m[k], v[k], 0.0f, c);
      bad |= non_finite_bit(x.w) | non_finite_bit(x.m) | non_finite_bit(x.v);
    }
  }
  return bad == 0;
}

// A sufficient condition, without the divisions and the square root (the
// preview's cost), for adam_finite: m and v stay finite, v̂ = v/c2 is in
// [0, L], and |w·decay| + lr·|m|/(c1·eps) ≤ L — since √v̂ + eps ≥ eps, that
// bounds |m̂/(√v̂ + eps)| and |w'|. L = 1e38 leaves a factor of 3 below
// FLT_MAX for the rounding of the few operations between the bound and the
// values. False (NaN compares false) says nothing: adam_finite then decides.
VJIT_VECTOR_CLONES bool adam_surely_finite(const float* __restrict w, const float* __restrict m,
                                           const float* __restrict v, const float* __restrict g, int64_t n,
                                           AdamConstants c) {
  constexpr float kLimit = 1e38f;
  const float step_per_m = 1.0f / (c.correction1 * c.eps);  // inf or NaN: nothing is proven, as it should
  const float v_hat_per_v = 1.0f / c.correction2;
  uint32_t ok = 1;
  auto check = [&](float wk, float mk, float vk) {
    const float step = std::fabs(mk) * step_per_m;
    const float v_hat = vk * v_hat_per_v;
    const float bound = std::fabs(wk * c.decay) + c.lr * step;
    return uint32_t(step <= kLimit) & uint32_t(v_hat >= 0.0f) & uint32_t(v_hat <= kLimit) & uint32_t(bound <= kLimit);
  };
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const float gk = g[k] * c.scale;
      ok &= check(w[k], c.beta1 * m[k] + c.one_minus_beta1 * gk, c.beta2 * v[k] + c.one_minus_beta2 * gk * gk);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) ok &= check(w[k], c.beta1 * m[k], c.beta2 * v[k]);
  }
  return ok != 0;
}

// The first element a preview found, found again element by element (the
// rare path: the step is about to fail). `values(k)` gives element k's new
// values, the weight first, then the state slots.
template <size_t kArrays, typename Values>
NonFiniteUpdate first_non_finite_value(int64_t n, Values&& values) {
  for (int64_t k = 0; k < n; ++k) {
    const std::array<float, kArrays> x = values(k);
    for (size_t a = 0; a < kArrays; ++a)
      if (non_finite_bit(x[a])) return {k, int(a), x[a]};
  }
  VJIT_INTERNAL_CHECK(false, "a preview found a non-finite value that the element loop does not");
}

}  // namespace

// --- SGD ---

std::vector<std::string> SGD::state_slot_names() const {
  if (state_slots() == 0) return {};
  return {"momentum_buffer"};  // torch.optim.SGD's name for the velocity
}

std::vector<std::pair<std::string, double>> SGD::hyper_parameters() const {
  std::vector<std::pair<std::string, double>> all = Optimizer::hyper_parameters();
  all.insert(all.end(), {{"momentum", momentum_}, {"weight_decay", weight_decay_}});
  return all;
}

SGD::SGD(float lr, float momentum, float weight_decay, float clip_norm)
    : Optimizer(lr, clip_norm), momentum_(momentum), weight_decay_(weight_decay) {
  check_hyper(finite(momentum) && momentum >= 0.0f && momentum < 1.0f, "SGD", "momentum", momentum,
              "a value in [0, 1)");
  check_hyper(finite(weight_decay) && weight_decay >= 0.0f, "SGD", "weight_decay", weight_decay,
              "a finite value >= 0");
}

void SGD::update(int, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                 float grad_scale) {
  const float* gb = g ? g + begin : nullptr;
  if (momentum_ > 0.0f) sgd_momentum(w + begin, state[0] + begin, gb, end - begin, SgdConstants{lr(), grad_scale, weight_decay_, momentum_});
  else sgd_plain(w + begin, gb, end - begin, SgdConstants{lr(), grad_scale, weight_decay_, momentum_});
}

NonFiniteUpdate SGD::preview(int, const float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                             float grad_scale) const {
  const SgdConstants c{lr(), grad_scale, weight_decay_, momentum_};
  const float* wb = w + begin;
  const float* gb = g ? g + begin : nullptr;
  const int64_t n = end - begin;
  NonFiniteUpdate found;
  if (momentum_ > 0.0f) {
    const float* vb = state[0] + begin;
    if (sgd_momentum_finite(wb, vb, gb, n, c)) return {};
    found = first_non_finite_value<2>(n, [&](int64_t k) {
      const WeightAndVelocity x = gb ? sgd_momentum_element<true>(wb[k], vb[k], gb[k], c)
                                     : sgd_momentum_element<false>(wb[k], vb[k], 0.0f, c);
      return std::array<float, 2>{x.w, x.v};
    });
  } else {
    if (sgd_plain_finite(wb, gb, n, c)) return {};
    found = first_non_finite_value<1>(n, [&](int64_t k) {
      return std::array<float, 1>{gb ? sgd_plain_element<true>(wb[k], gb[k], c)
                                     : sgd_plain_element<false>(wb[k], 0.0f, c)};
    });
  }
  found.element += begin;
  return found;
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

std::vector<std::string> Adam::state_slot_names() const {
  return {"exp_avg", "exp_avg_sq"};  // torch.optim.Adam's names for m and v
}

std::vector<std::pair<std::string, double>> Adam::hyper_parameters() const {
  std::vector<std::pair<std::string, double>> all = Optimizer::hyper_parameters();
  all.insert(all.end(),
             {{"beta1", beta1_}, {"beta2", beta2_}, {"eps", eps_}, {"weight_decay", weight_decay_}});
  return all;
}

void Adam::begin_update(int64_t steps) {
  correction1_ = bias_correction(beta1_, steps);
  correction2_ = bias_correction(beta2_, steps);
}

void Adam::update(int, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                  float grad_scale) {
  const AdamConstants c{beta1_, beta2_,  1.0f - beta1_, 1.0f - beta2_, correction1_, correction2_, lr(),
                        1.0f - lr() * weight_decay_, eps_, grad_scale};
  adam_update(w + begin, state[0] + begin, state[1] + begin, g ? g + begin : nullptr, end - begin, c);
}

NonFiniteUpdate Adam::preview(int, const float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                              float grad_scale) const {
  const AdamConstants c{beta1_, beta2_,  1.0f - beta1_, 1.0f - beta2_, correction1_, correction2_, lr(),
                        1.0f - lr() * weight_decay_, eps_, grad_scale};
  const float *wb = w + begin, *mb = state[0] + begin, *vb = state[1] + begin;
  const float* gb = g ? g + begin : nullptr;
  const int64_t n = end - begin;
  if (adam_surely_finite(wb, mb, vb, gb, n, c) || adam_finite(wb, mb, vb, gb, n, c)) return {};
  NonFiniteUpdate found = first_non_finite_value<3>(n, [&](int64_t k) {
    const AdamValues x = gb ? adam_element<true>(wb[k], mb[k], vb[k], gb[k], c)
                            : adam_element<false>(wb[k], mb[k], vb[k], 0.0f, c);
    return std::array<float, 3>{x.w, x.m, x.v};
  });
  found.element += begin;
  return found;
}

// --- AdaGrad ---

namespace {

struct AdaGradConstants {
  float lr, scale, weight_decay, eps;
};

// d = g·scale + wd·w, G ← G + d², w ← w − lr·d/(√G + eps).
struct WeightAndSum {
  float w, sum;
};
template <bool kHasG>
[[gnu::always_inline]] inline WeightAndSum adagrad_element(float w, float sum, float g, const AdaGradConstants& c) {
  float d;
  if constexpr (kHasG) d = g * c.scale + c.weight_decay * w;
  else d = c.weight_decay * w;
  const float s = sum + d * d;
  return {w - c.lr * d / (std::sqrt(s) + c.eps), s};
}

VJIT_VECTOR_CLONES void adagrad_update(float* __restrict w, float* __restrict sum, const float* __restrict g,
                                       int64_t n, AdaGradConstants c) {
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const WeightAndSum x = adagrad_element<true>(w[k], sum[k], g[k], c);
      w[k] = x.w;
      sum[k] = x.sum;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const WeightAndSum x = adagrad_element<false>(w[k], sum[k], 0.0f, c);
      w[k] = x.w;
      sum[k] = x.sum;
    }
  }
}

}  // namespace

AdaGrad::AdaGrad(float lr, float eps, float weight_decay, float clip_norm)
    : Optimizer(lr, clip_norm), eps_(eps), weight_decay_(weight_decay) {
  check_hyper(finite(eps) && eps > 0.0f, "AdaGrad", "eps", eps, "a finite value > 0");
  check_hyper(finite(weight_decay) && weight_decay >= 0.0f, "AdaGrad", "weight_decay", weight_decay,
              "a finite value >= 0");
}

std::vector<std::string> AdaGrad::state_slot_names() const {
  return {"sum"};  // torch.optim.Adagrad's name for the accumulated squares
}

std::vector<std::pair<std::string, double>> AdaGrad::hyper_parameters() const {
  std::vector<std::pair<std::string, double>> all = Optimizer::hyper_parameters();
  all.insert(all.end(), {{"eps", eps_}, {"weight_decay", weight_decay_}});
  return all;
}

void AdaGrad::update(int, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                     float grad_scale) {
  adagrad_update(w + begin, state[0] + begin, g ? g + begin : nullptr, end - begin,
                 AdaGradConstants{lr(), grad_scale, weight_decay_, eps_});
}

NonFiniteUpdate AdaGrad::preview(int, const float* w, float* const* state, const float* g, int64_t begin,
                                 int64_t end, float grad_scale) const {
  const AdaGradConstants c{lr(), grad_scale, weight_decay_, eps_};
  const float *wb = w + begin, *sb = state[0] + begin;
  const float* gb = g ? g + begin : nullptr;
  NonFiniteUpdate found = {};
  for (int64_t k = 0; k < end - begin; ++k) {
    const WeightAndSum x = gb ? adagrad_element<true>(wb[k], sb[k], gb[k], c)
                              : adagrad_element<false>(wb[k], sb[k], 0.0f, c);
    if (non_finite_bit(x.w) | non_finite_bit(x.sum)) {
      found = non_finite_bit(x.w) ? NonFiniteUpdate{k, 0, x.w} : NonFiniteUpdate{k, 1, x.sum};
      found.element += begin;
      return found;
    }
  }
  return found;
}

}  // namespace vjit
