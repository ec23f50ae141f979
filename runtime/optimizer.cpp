#include "vjit/optimizer.h"

#include <algorithm>
#include <cmath>

#include "vjit/error.h"

// The loops below are compiled for several ISAs and the best one for the CPU is
// picked when the library is loaded (GCC function multi-versioning); the build
// has no -march flag, so a plain loop alone would only get SSE2. This file is
// compiled with -fno-math-errno (CMakeLists.txt) so that sqrt vectorises, and
// with -ffp-contract=off so that no clone fuses a multiply and an add: every
// clone computes the same float operations and gives the same results.
// Not under ThreadSanitizer: the clones' resolver runs while the dynamic loader
// relocates the program, before the TSan runtime is set up, and its
// instrumentation crashes there (scripts/build.sh Thread).
#if defined(__SANITIZE_THREAD__)
#define VJIT_VECTOR_CLONES
#elif defined(__x86_64__) && defined(__GNUC__) && __has_attribute(target_clones)
#define VJIT_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define VJIT_VECTOR_CLONES
#endif

namespace vjit {

namespace {

// Elements per chunk of work: large enough that a thread's share pays for
// waking it (about 64 KB of gradient), small enough to balance.
constexpr int64_t kChunkElements = 16384;

void check_hyper(bool ok, const char* optimizer, const char* name, float value, const char* expected) {
  VJIT_USER_CHECK(ok, optimizer << ": " << name << "=" << value << " is not valid; expected " << expected);
}

bool finite(float x) { return std::isfinite(x); }

int64_t rows_per_chunk(int64_t cols) { return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, cols)); }

// --- vectorised kernels over contiguous ranges ---

// Σ g² in double with independent partial sums, so the loop vectorises instead
// of waiting on one long chain of dependent additions; the lanes are fixed by
// the source, so every ISA adds in the same order. Non-finite when any element
// is (float values cannot overflow a double square).
VJIT_VECTOR_CLONES double sum_of_squares(const float* __restrict g, int64_t n) {
  constexpr int64_t kLanes = 8;
  double partial[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) partial[l] += double(g[k + l]) * double(g[k + l]);
  for (; k < n; ++k) partial[0] += double(g[k]) * double(g[k]);
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

// SGD without momentum: w ← w − lr·(g·scale + wd·w); g null: g = 0.
VJIT_VECTOR_CLONES void sgd_plain(float* __restrict w, const float* __restrict g, int64_t n, float lr, float scale,
                                  float weight_decay) {
  if (g) {
    for (int64_t k = 0; k < n; ++k) w[k] -= lr * (g[k] * scale + weight_decay * w[k]);
  } else {
    for (int64_t k = 0; k < n; ++k) w[k] -= lr * (weight_decay * w[k]);
  }
}

// SGD with momentum: d = g·scale + wd·w, v ← μ·v + d, w ← w − lr·v; g null: g = 0.
VJIT_VECTOR_CLONES void sgd_momentum(float* __restrict w, float* __restrict v, const float* __restrict g, int64_t n,
                                     float lr, float scale, float weight_decay, float momentum) {
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const float d = g[k] * scale + weight_decay * w[k];
      v[k] = momentum * v[k] + d;
      w[k] -= lr * v[k];
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      v[k] = momentum * v[k] + weight_decay * w[k];
      w[k] -= lr * v[k];
    }
  }
}

struct AdamConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float correction1, correction2;  // 1 − βᵗ
  float lr, decay, eps, scale;     // decay = 1 − lr·weight_decay
};

// Adam(W) on a range; g null: g = 0 (m and v decay, the weight keeps moving).
VJIT_VECTOR_CLONES void adam_update(float* __restrict w, float* __restrict m, float* __restrict v,
                                    const float* __restrict g, int64_t n, const AdamConstants& c) {
  const float beta1 = c.beta1, beta2 = c.beta2, one_minus_beta1 = c.one_minus_beta1,
              one_minus_beta2 = c.one_minus_beta2, correction1 = c.correction1, correction2 = c.correction2,
              lr = c.lr, decay = c.decay, eps = c.eps, scale = c.scale;
  if (g) {
    for (int64_t k = 0; k < n; ++k) {
      const float gk = g[k] * scale;
      const float mk = beta1 * m[k] + one_minus_beta1 * gk;
      const float vk = beta2 * v[k] + one_minus_beta2 * gk * gk;
      m[k] = mk;
      v[k] = vk;
      w[k] = w[k] * decay - lr * (mk / correction1) / (std::sqrt(vk / correction2) + eps);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const float mk = beta1 * m[k];
      const float vk = beta2 * v[k];
      m[k] = mk;
      v[k] = vk;
      w[k] = w[k] * decay - lr * (mk / correction1) / (std::sqrt(vk / correction2) + eps);
    }
  }
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
  own_state_ = {};
  ++generation_;
}

bool Optimizer::made(const OptimizerState& state) const {
  return state.owner == this && state.generation == generation_ && !state.shapes.empty();
}

void Optimizer::make_state(const Model& model, OptimizerState& state) const {
  state.slots.assign(size_t(model.size()), {});
  state.shapes.clear();
  for (int i = 0; i < model.size(); ++i) {
    state.slots[size_t(i)].assign(size_t(state_slots()), std::vector<float>(size_t(model.param(i).shape.numel()), 0.0f));
    state.shapes.push_back(model.param(i).shape);
  }
  state.steps = 0;
  state.owner = this;
  state.generation = generation_;
}

void Optimizer::validate(const Model& model, const std::vector<std::vector<float>>& grads,
                         const std::vector<GradientRows>& rows, const OptimizerState& state) const {
  VJIT_USER_CHECK(int(grads.size()) == model.size(), "Optimizer::step: got " << grads.size()
                                                                             << " gradients for a model with "
                                                                             << model.size() << " parameters");
  VJIT_USER_CHECK(rows.empty() || int(rows.size()) == model.size(),
                  "Optimizer::step: got " << rows.size() << " GradientRows for a model with " << model.size()
                                          << " parameters (one per parameter, or none for all dense)");
  if (made(state)) {
    bool same = int(state.shapes.size()) == model.size();
    for (int i = 0; same && i < model.size(); ++i) same = state.shapes[size_t(i)] == model.param(i).shape;
    VJIT_USER_CHECK(same, "Optimizer::step: the optimizer state was made for a model with "
                              << state.shapes.size()
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
    if (rows.empty() || rows[size_t(i)].all) continue;
    const std::vector<int32_t>& listed = rows[size_t(i)].rows;
    const int64_t table_rows = p.shape.rows();
    for (size_t k = 0; k < listed.size(); ++k) {
      VJIT_USER_CHECK(listed[k] >= 0 && listed[k] < table_rows,
                      "Optimizer::step: GradientRows of parameter '" << p.name << "' lists row " << listed[k]
                                                                     << ", outside [0, " << table_rows
                                                                     << ") of its shape " << p.shape.str());
      VJIT_USER_CHECK(k == 0 || listed[k - 1] < listed[k],
                      "Optimizer::step: GradientRows of parameter '"
                          << p.name << "' must be sorted and unique, but row " << listed[k] << " follows row "
                          << listed[k - 1]);
    }
  }
}

int64_t Optimizer::plan_chunks(const Model& model, const std::vector<GradientRows>& rows) {
  // The most chunks a model of these shapes can need, so that the vector
  // reaches its final capacity on the first step.
  size_t bound = 0;
  for (int i = 0; i < model.size(); ++i) {
    const Shape& shape = model.param(i).shape;
    const int64_t by_elements = (shape.numel() + kChunkElements - 1) / kChunkElements;
    const int64_t per_chunk = rows_per_chunk(shape.cols());
    const int64_t by_rows = (shape.rows() + per_chunk - 1) / per_chunk;
    bound += size_t(std::max(by_elements, by_rows) + 1);
  }
  chunks_.reserve(bound);
  partial_.reserve(bound);

  chunks_.clear();
  int64_t work = 0;
  for (int i = 0; i < model.size(); ++i) {
    const Shape& shape = model.param(i).shape;
    if (rows.empty() || rows[size_t(i)].all) {
      const int64_t numel = shape.numel();
      for (int64_t begin = 0; begin < numel; begin += kChunkElements) {
        Chunk c;
        c.param = i;
        c.begin = begin;
        c.end = std::min(numel, begin + kChunkElements);
        chunks_.push_back(c);
      }
      work += numel;
      continue;
    }
    const std::vector<int32_t>& listed = rows[size_t(i)].rows;
    const int64_t n = int64_t(listed.size());
    const int64_t cols = shape.cols();
    const int64_t per_chunk = rows_per_chunk(cols);
    if (dense_updates_) {
      // Every row of the table, in row ranges, each with the listed rows it holds.
      const int64_t table_rows = shape.rows();
      int64_t t = 0;
      for (int64_t begin = 0; begin < table_rows; begin += per_chunk) {
        Chunk c;
        c.param = i;
        c.by_rows = true;
        c.begin = begin;
        c.end = std::min(table_rows, begin + per_chunk);
        c.first = t;
        while (t < n && listed[size_t(t)] < c.end) ++t;
        c.last = t;
        chunks_.push_back(c);
      }
      work += shape.numel();
    } else {
      for (int64_t first = 0; first < n; first += per_chunk) {
        Chunk c;
        c.param = i;
        c.by_rows = true;
        c.first = first;
        c.last = std::min(n, first + per_chunk);
        c.begin = listed[size_t(c.first)];
        c.end = int64_t(listed[size_t(c.last - 1)]) + 1;
        chunks_.push_back(c);
      }
      work += n * cols;
    }
  }
  partial_.resize(chunks_.size());
  return work;
}

void Optimizer::for_each_chunk(ParallelFor* parallel, int64_t work, TaskRef fn) {
  const int64_t n = int64_t(chunks_.size());
  if (parallel && n > 1 && work >= 2 * kChunkElements) {
    parallel->run(n, fn);
  } else {
    for (int64_t c = 0; c < n; ++c) fn(c);
  }
}

double Optimizer::chunk_sum_of_squares(const Chunk& chunk, const std::vector<float>& g, const GradientRows* rows,
                                       int64_t cols) const {
  if (!chunk.by_rows) return sum_of_squares(g.data() + chunk.begin, chunk.end - chunk.begin);
  double sum = 0.0;
  for (int64_t t = chunk.first; t < chunk.last; ++t)
    sum += sum_of_squares(g.data() + int64_t(rows->rows[size_t(t)]) * cols, cols);
  return sum;
}

void Optimizer::update_chunk(const Chunk& chunk, float* w, float* const* state, const float* g,
                             const GradientRows* rows, int64_t cols, float grad_scale) {
  const int index = chunk.param;
  if (!chunk.by_rows) {
    update(index, w, state, g, chunk.begin, chunk.end, grad_scale);
    return;
  }
  // Runs of consecutive listed rows are one call; under dense updates the rows
  // between them are updated with a zero gradient.
  const int32_t* listed = rows->rows.data();
  int64_t next = chunk.begin;  // the first row not updated yet
  for (int64_t t = chunk.first; t < chunk.last;) {
    const int64_t run_begin = listed[t];
    int64_t run_end = run_begin + 1;
    for (++t; t < chunk.last && listed[t] == run_end; ++t) ++run_end;
    if (dense_updates_ && next < run_begin)
      update(index, w, state, nullptr, next * cols, run_begin * cols, grad_scale);
    update(index, w, state, g, run_begin * cols, run_end * cols, grad_scale);
    next = run_end;
  }
  if (dense_updates_ && next < chunk.end) update(index, w, state, nullptr, next * cols, chunk.end * cols, grad_scale);
}

void Optimizer::throw_non_finite(const Model& model, const std::vector<std::vector<float>>& grads,
                                 const std::vector<GradientRows>& rows) const {
  for (int i = 0; i < model.size(); ++i) {
    const ParamData& p = model.param(i);
    const std::vector<float>& g = grads[size_t(i)];
    const size_t cols = size_t(p.shape.cols());
    auto check = [&](size_t k) {
      if (finite(g[k])) return;
      detail::Message where;
      if (p.shape.rank == 2)
        where << "[" << k / cols << "," << k % cols << "]";
      else
        where << "[" << k << "]";
      throw UserError((detail::Message() << "Optimizer::step: non-finite gradient " << g[k] << " for parameter '"
                                         << p.name << "' at " << where.str() << "; the model was not updated")
                          .str());
    };
    if (rows.empty() || rows[size_t(i)].all) {
      for (size_t k = 0; k < g.size(); ++k) check(k);
    } else {
      for (int32_t row : rows[size_t(i)].rows)
        for (size_t k = size_t(row) * cols; k < size_t(row + 1) * cols; ++k) check(k);
    }
  }
  VJIT_INTERNAL_CHECK(false, "Optimizer::step: the sum of squares is not finite but every gradient value is");
}

void Optimizer::step(Model& model, const std::vector<std::vector<float>>& grads) {
  static const std::vector<GradientRows> kAllDense;
  step(model, grads, kAllDense, nullptr, nullptr);
}

void Optimizer::step(Model& model, const std::vector<std::vector<float>>& grads,
                     const std::vector<GradientRows>& rows, ParallelFor* parallel, OptimizerState* given) {
  OptimizerState& state = given ? *given : own_state_;
  validate(model, grads, rows, state);  // throws before anything changes
  const int64_t work = plan_chunks(model, rows);
  auto rows_of = [&](int param) { return rows.empty() ? nullptr : &rows[size_t(param)]; };

  // Pass 1: Σ g² of the listed elements per chunk; non-finite iff one of them is.
  auto sum_chunk = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    const int64_t cols = model.param(chunk.param).shape.cols();
    partial_[size_t(c)] = chunk_sum_of_squares(chunk, grads[size_t(chunk.param)], rows_of(chunk.param), cols);
  };
  for_each_chunk(parallel, work, sum_chunk);
  double sum = 0.0;
  for (double p : partial_) sum += p;
  if (!std::isfinite(sum)) throw_non_finite(model, grads, rows);

  const float scale = clip_scale(sum);
  if (!made(state)) make_state(model, state);
  const size_t slots = size_t(state_slots());
  slot_pointers_.resize(size_t(model.size()) * slots);
  for (size_t p = 0; p < size_t(model.size()); ++p)
    for (size_t k = 0; k < slots; ++k) slot_pointers_[p * slots + k] = state.slots[p][k].data();
  last_grad_norm_ = std::sqrt(sum);
  ++steps_;
  begin_update(++state.steps);

  // Pass 2: the updates, each chunk writing only its own elements.
  auto update_one = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    ParamData& param = model.param(chunk.param);
    update_chunk(chunk, param.value.data(), slot_pointers_.data() + size_t(chunk.param) * slots,
                 grads[size_t(chunk.param)].data(), rows_of(chunk.param), param.shape.cols(), scale);
  };
  for_each_chunk(parallel, work, update_one);
}

float Optimizer::clip_scale(double sum_of_squares) const {
  const double norm = std::sqrt(sum_of_squares);
  float scale = 1.0f;
  if (clip_norm_ > 0.0f && norm > double(clip_norm_)) {
    scale = float(double(clip_norm_) / norm);
    // Guard against float rounding pushing the clipped norm just above the bound.
    while (scale > 0.0f && double(scale) * norm > double(clip_norm_)) scale = std::nextafter(scale, 0.0f);
  }
  return scale;
}

DeviceUpdate Optimizer::begin_device_step(const Model& model, OptimizerState& state, double sum_of_squares) {
  VJIT_INTERNAL_CHECK(device_rule().kind != DeviceUpdate::Kind::None && std::isfinite(sum_of_squares),
                      "begin_device_step needs a rule with a device form and a finite norm");
  const float scale = clip_scale(sum_of_squares);
  const bool made_now = !made(state);
  if (made_now) make_state(model, state);
  last_grad_norm_ = std::sqrt(sum_of_squares);
  ++steps_;
  begin_update(++state.steps);
  DeviceUpdate rule = device_rule();
  rule.scale = scale;
  rule.state_made = made_now;
  return rule;
}

// --- SGD ---

DeviceUpdate SGD::device_rule() const {
  DeviceUpdate rule;
  rule.kind = momentum_ > 0.0f ? DeviceUpdate::Kind::SgdMomentum : DeviceUpdate::Kind::Sgd;
  rule.lr = lr();
  rule.weight_decay = weight_decay_;
  rule.momentum = momentum_;
  return rule;
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
  if (momentum_ > 0.0f)
    sgd_momentum(w + begin, state[0] + begin, gb, end - begin, lr(), grad_scale, weight_decay_, momentum_);
  else
    sgd_plain(w + begin, gb, end - begin, lr(), grad_scale, weight_decay_);
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

DeviceUpdate Adam::device_rule() const {
  DeviceUpdate rule;
  rule.kind = DeviceUpdate::Kind::Adam;
  rule.lr = lr();
  rule.weight_decay = weight_decay_;
  rule.beta1 = beta1_;
  rule.beta2 = beta2_;
  rule.correction1 = correction1_;
  rule.correction2 = correction2_;
  rule.eps = eps_;
  rule.decay = 1.0f - lr() * weight_decay_;
  return rule;
}

void Adam::begin_update(int64_t steps) {
  const double t = double(steps);
  correction1_ = float(1.0 - std::pow(double(beta1_), t));
  correction2_ = float(1.0 - std::pow(double(beta2_), t));
}

void Adam::update(int, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                  float grad_scale) {
  const AdamConstants c{beta1_, beta2_,  1.0f - beta1_, 1.0f - beta2_, correction1_, correction2_, lr(),
                        1.0f - lr() * weight_decay_, eps_, grad_scale};
  adam_update(w + begin, state[0] + begin, state[1] + begin, g ? g + begin : nullptr, end - begin, c);
}

}  // namespace vjit
