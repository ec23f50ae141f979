#include "vjit/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ir/ops.h"
#include "runtime/optimizer_access.h"
#include "runtime/parallel_for.h"
#include "runtime/thread_pool.h"
#include "tests/allocation_counter.h"
#include "tests/user_error.h"
#include "vjit/engine.h"
#include "vjit/error.h"
#include "vjit/model.h"
#include "vjit/program.h"
#include "vjit/reference.h"
#include "vjit/train.h"

// Allocation counting: this program's operator new, on every thread.
using vjit::test_util::AllocationCounter;
// Steps on other runners and states than a standalone step's, as the engine's executors take them.
using vjit::runtime::OptimizerAccess;

namespace {

using Grads = std::vector<std::vector<float>>;

// f(w) = ½ Σ_p Σ_k a_pk (w_pk − t_pk)², a separable quadratic with its minimum at t.
struct Quadratic {
  vjit::Model model{7};
  std::vector<std::vector<float>> target;
  std::vector<std::vector<float>> curvature;

  Quadratic() {
    model.add("W", vjit::Shape::mat(2, 3), vjit::Init::Uniform, 1.0f);
    model.add("b", vjit::Shape::vec(2), vjit::Init::Uniform, 1.0f);
    target = {{0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f}, {3.0f, -2.0f}};
    curvature = {{1.0f, 2.0f, 0.5f, 1.5f, 1.0f, 3.0f}, {0.8f, 1.2f}};
  }
  Grads grads() const {
    Grads g(2);
    for (int p = 0; p < 2; ++p)
      for (size_t k = 0; k < target[size_t(p)].size(); ++k)
        g[size_t(p)].push_back(curvature[size_t(p)][k] * (model.param(p).value[k] - target[size_t(p)][k]));
    return g;
  }
  double max_error() const {
    double e = 0.0;
    for (int p = 0; p < 2; ++p)
      for (size_t k = 0; k < target[size_t(p)].size(); ++k)
        e = std::max(e, double(std::fabs(model.param(p).value[k] - target[size_t(p)][k])));
    return e;
  }
};

std::vector<std::vector<float>> values(const vjit::Model& model) {
  std::vector<std::vector<float>> out;
  for (int i = 0; i < model.size(); ++i) out.push_back(model.param(i).value);
  return out;
}

Grads zeros(const vjit::Model& model) {
  Grads g;
  for (int i = 0; i < model.size(); ++i) g.emplace_back(size_t(model.param(i).shape.numel()), 0.0f);
  return g;
}

double global_norm(const Grads& g) {
  double s = 0.0;
  for (const auto& v : g)
    for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

TEST(Optimizer, SgdConvergesOnAQuadratic) {
  Quadratic q;
  vjit::SGD sgd(0.3f);
  for (int i = 0; i < 300; ++i) sgd.step(q.model, q.grads());
  EXPECT_LT(q.max_error(), 1e-4);
  EXPECT_EQ(sgd.steps(), 300);
}

TEST(Optimizer, SgdWithMomentumConverges) {
  Quadratic q;
  vjit::SGD sgd(0.05f, 0.9f);
  for (int i = 0; i < 500; ++i) sgd.step(q.model, q.grads());
  EXPECT_LT(q.max_error(), 1e-4);
}

TEST(Optimizer, AdamConvergesOnAQuadratic) {
  Quadratic q;
  vjit::Adam adam(0.05f);
  for (int i = 0; i < 2000; ++i) adam.step(q.model, q.grads());
  EXPECT_LT(q.max_error(), 1e-3);
}

TEST(Optimizer, SgdWeightDecayShrinks) {
  vjit::Model model(3);
  model.add("W", vjit::Shape::mat(3, 4));
  const auto before = values(model);
  vjit::SGD sgd(0.1f, 0.0f, 0.5f);
  sgd.step(model, zeros(model));
  for (size_t k = 0; k < before[0].size(); ++k) EXPECT_FLOAT_EQ(model.param(0).value[k], before[0][k] * 0.95f);
}

TEST(Optimizer, AdamWeightDecayIsDecoupled) {
  vjit::Model model(3);
  model.add("W", vjit::Shape::mat(3, 4));
  const auto before = values(model);
  vjit::Adam adam(0.01f, 0.9f, 0.999f, 1e-8f, 0.1f);
  // With a zero gradient the adaptive term is zero; only the decay acts: w ← w(1 − lr·wd).
  for (int i = 0; i < 10; ++i) adam.step(model, zeros(model));
  const float factor = std::pow(1.0f - 0.01f * 0.1f, 10.0f);
  double norm_before = 0.0, norm_after = 0.0;
  for (size_t k = 0; k < before[0].size(); ++k) {
    EXPECT_NEAR(model.param(0).value[k], before[0][k] * factor, 1e-6);
    norm_before += std::fabs(before[0][k]);
    norm_after += std::fabs(model.param(0).value[k]);
  }
  EXPECT_LT(norm_after, norm_before);
}

TEST(Optimizer, ClippingBoundsTheGlobalNorm) {
  vjit::Model model(5);
  model.add("A", vjit::Shape::vec(3), vjit::Init::Zeros);
  model.add("B", vjit::Shape::mat(2, 2), vjit::Init::Zeros);
  const Grads g = {{3.0f, -4.0f, 2.0f}, {1.0f, 5.0f, -6.0f, 0.5f}};
  const double norm = global_norm(g);
  ASSERT_GT(norm, 2.0);
  vjit::SGD sgd(1.0f, 0.0f, 0.0f, /*clip_norm=*/2.0f);
  sgd.step(model, g);
  EXPECT_NEAR(sgd.last_grad_norm(), norm, 1e-9);
  // With lr 1 from zero weights, −w is the applied (clipped) gradient.
  const Grads applied = values(model);
  const double applied_norm = global_norm(applied);
  EXPECT_LE(applied_norm, 2.0 + 1e-6);
  EXPECT_NEAR(applied_norm, 2.0, 1e-5);
  // The direction is kept: every component scaled by the same factor.
  for (size_t p = 0; p < g.size(); ++p)
    for (size_t k = 0; k < g[p].size(); ++k) EXPECT_NEAR(-applied[p][k], g[p][k] * 2.0 / norm, 1e-6);
}

TEST(Optimizer, ClippingLeavesSmallGradientsAlone) {
  vjit::Model model(5);
  model.add("A", vjit::Shape::vec(2), vjit::Init::Zeros);
  vjit::SGD sgd(1.0f, 0.0f, 0.0f, 10.0f);
  sgd.step(model, {{0.3f, -0.4f}});
  EXPECT_FLOAT_EQ(model.param(0).value[0], -0.3f);
  EXPECT_FLOAT_EQ(model.param(0).value[1], 0.4f);
}

TEST(Optimizer, AdamFirstStepIsLrTimesSign) {
  vjit::Model model(9);
  model.add("w", vjit::Shape::vec(5), vjit::Init::Zeros);
  const float lr = 0.01f;
  vjit::Adam adam(lr);
  const std::vector<float> g = {1e-3f, 5.0f, -100.0f, 0.25f, 0.0f};
  adam.step(model, {g});
  for (size_t k = 0; k < g.size(); ++k) {
    const float moved = model.param(0).value[k];
    if (g[k] == 0.0f) {
      EXPECT_EQ(moved, 0.0f);
    } else {
      EXPECT_NEAR(std::fabs(moved), lr, lr * 1e-4) << k;
      EXPECT_EQ(std::signbit(moved), !std::signbit(g[k])) << k;  // against the gradient
    }
  }
}

// --- AdaGrad and frozen parameters ---

TEST(Optimizer, AdaGradMatchesAHandComputedUpdate) {
  vjit::Model model(9);
  model.add("w", vjit::Shape::vec(3), vjit::Init::Zeros);
  model.param(0).value = {1.0f, -2.0f, 0.5f};
  vjit::AdaGrad adagrad(0.1f, 1e-10f, 0.5f);  // lr 0.1, weight decay 0.5
  // Step 1, g = (2, 0, -1): d = g + 0.5 w = (2.5, -1, -0.75); G = d²;
  // w − 0.1 d/√G = w − 0.1 sign(d) = (0.9, -1.9, 0.6).
  adagrad.step(model, {{2.0f, 0.0f, -1.0f}});
  EXPECT_NEAR(model.param(0).value[0], 0.9f, 1e-6);
  EXPECT_NEAR(model.param(0).value[1], -1.9f, 1e-6);
  EXPECT_NEAR(model.param(0).value[2], 0.6f, 1e-6);
  // Step 2, g = (1, 1, 1): d = (1.45, 0.05, 1.3); G = (6.25 + 2.1025, 1 + 0.0025, 0.5625 + 1.69).
  adagrad.step(model, {{1.0f, 1.0f, 1.0f}});
  const double expected[3] = {0.9 - 0.1 * 1.45 / std::sqrt(6.25 + 1.45 * 1.45),
                              -1.9 - 0.1 * 0.05 / std::sqrt(1.0 + 0.05 * 0.05),
                              0.6 - 0.1 * 1.3 / std::sqrt(0.5625 + 1.3 * 1.3)};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(model.param(0).value[size_t(k)], expected[k], 1e-6) << k;
  EXPECT_EQ(adagrad.kind(), "adagrad");
  EXPECT_EQ(adagrad.state_slot_names(), std::vector<std::string>{"sum"});
}

TEST(Optimizer, AdaGradConvergesOnAQuadratic) {
  Quadratic q;
  vjit::AdaGrad adagrad(0.5f);
  for (int i = 0; i < 2000; ++i) adagrad.step(q.model, q.grads());
  EXPECT_LT(q.max_error(), 1e-3);
}

TEST(Optimizer, AdaGradRejectsBadHyperParameters) {
  EXPECT_THROW((void)vjit::AdaGrad(0.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::AdaGrad(0.1f, 0.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::AdaGrad(0.1f, 1e-10f, -1.0f), vjit::UserError);
}

TEST(Optimizer, AdaGradOverflowIsNamedAndChangesNothing) {
  vjit::Model model(9);
  model.add("w", vjit::Shape::vec(2), vjit::Init::Zeros);
  vjit::AdaGrad adagrad(0.1f);
  const auto before = values(model);
  try {
    adagrad.step(model, {{1.0f, 3e38f}});  // G = g² overflows
    FAIL() << "no throw";
  } catch (const vjit::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(values(model), before);
}

TEST(Optimizer, FrozenParametersAreNeverUpdatedNorCounted) {
  for (int kind = 0; kind < 3; ++kind) {
    Quadratic q;
    q.model.freeze(vjit::Param{1, q.model.param(1).shape});
    const std::vector<float> frozen_before = q.model.param(1).value;
    std::unique_ptr<vjit::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<vjit::SGD>(0.1f, 0.9f, 0.1f);
    if (kind == 1) opt = std::make_unique<vjit::Adam>(0.1f);
    if (kind == 2) opt = std::make_unique<vjit::AdaGrad>(0.1f);
    Grads g = q.grads();
    g[1][0] = std::numeric_limits<float>::quiet_NaN();  // never read: the parameter is frozen
    const std::vector<float> free_before = q.model.param(0).value;
    opt->step(q.model, g);
    EXPECT_EQ(q.model.param(1).value, frozen_before) << opt->kind();
    EXPECT_NE(q.model.param(0).value, free_before) << opt->kind();
    EXPECT_NEAR(opt->last_grad_norm(), global_norm({g[0]}), 1e-5) << opt->kind();
  }
}

void expect_rejected_untouched(vjit::Optimizer& opt, float bad) {
  Quadratic q;
  opt.step(q.model, q.grads());  // some state exists
  const auto before = values(q.model);
  Grads g = q.grads();
  g[1][1] = bad;  // in the second parameter: the first must not be updated either
  try {
    opt.step(q.model, g);
    FAIL() << "no throw";
  } catch (const vjit::UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'b'"), std::string::npos) << message;
    EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
  }
  EXPECT_EQ(values(q.model), before);
  EXPECT_EQ(opt.steps(), 1);
}

TEST(Optimizer, NonFiniteGradientRaisesAndLeavesModelUntouched) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    vjit::SGD sgd(0.1f, 0.9f);
    expect_rejected_untouched(sgd, bad);
    vjit::Adam adam(0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f);
    expect_rejected_untouched(adam, bad);
  }
}

TEST(Optimizer, AdamStateUnchangedByRejectedStep) {
  Quadratic a, b;
  vjit::Adam first(0.05f), second(0.05f);
  first.step(a.model, a.grads());
  second.step(b.model, b.grads());
  Grads bad = a.grads();
  bad[0][0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(first.step(a.model, bad), vjit::UserError);
  first.step(a.model, a.grads());
  second.step(b.model, b.grads());
  EXPECT_EQ(values(a.model), values(b.model));
}

TEST(Optimizer, ShapeMismatchNamesTheParameter) {
  Quadratic q;
  vjit::SGD sgd(0.1f);
  Grads g = q.grads();
  g[0].pop_back();
  try {
    sgd.step(q.model, g);
    FAIL() << "no throw";
  } catch (const vjit::UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'W'"), std::string::npos) << message;
    EXPECT_NE(message.find("[2,3]"), std::string::npos) << message;
  }
  g = q.grads();
  g.pop_back();
  EXPECT_THROW(sgd.step(q.model, g), vjit::UserError);
  EXPECT_EQ(sgd.steps(), 0);
}

TEST(Optimizer, StateIsTiedToTheModelShapes) {
  Quadratic q;
  vjit::Adam adam;
  adam.step(q.model, q.grads());
  vjit::Model other(1);
  other.add("x", vjit::Shape::vec(4));
  EXPECT_THROW(adam.step(other, zeros(other)), vjit::UserError);
  adam.reset();
  EXPECT_NO_THROW(adam.step(other, zeros(other)));
  EXPECT_EQ(adam.steps(), 1);
}

TEST(Optimizer, BadHyperparametersAreRejected) {
  EXPECT_THROW((void)vjit::SGD(0.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::SGD(-1.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::SGD(0.1f, 1.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::SGD(0.1f, 0.0f, -1.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::SGD(0.1f, 0.0f, 0.0f, -1.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::Adam(std::numeric_limits<float>::quiet_NaN()), vjit::UserError);
  EXPECT_THROW((void)vjit::Adam(1e-3f, 1.0f), vjit::UserError);
  EXPECT_THROW((void)vjit::Adam(1e-3f, 0.9f, 1.5f), vjit::UserError);
  EXPECT_THROW((void)vjit::Adam(1e-3f, 0.9f, 0.999f, 0.0f), vjit::UserError);
  vjit::SGD sgd(0.1f);
  EXPECT_THROW(sgd.set_lr(0.0f), vjit::UserError);
  sgd.set_lr(0.5f);
  EXPECT_EQ(sgd.lr(), 0.5f);
}

// --- train.h ---

TEST(Train, ShuffleIsADeterministicPermutation) {
  for (int n : {0, 1, 2, 10, 1000}) {
    std::vector<int> a = vjit::shuffled_indices(n, 42);
    EXPECT_EQ(a, vjit::shuffled_indices(n, 42));
    std::vector<int> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < n; ++i) EXPECT_EQ(sorted[size_t(i)], i);
  }
  EXPECT_NE(vjit::shuffled_indices(1000, 1), vjit::shuffled_indices(1000, 2));
  EXPECT_THROW(vjit::shuffled_indices(-1, 0), vjit::UserError);
}

TEST(Train, ShuffleIsTheSameOnEveryStandardLibrary) {
  // Fixed by std::mt19937_64 and the hand-written Fisher–Yates; a change here
  // changes every training run's sample order.
  EXPECT_EQ(vjit::shuffled_indices(10, 42), (std::vector<int>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
}

TEST(Train, ShuffleLooksUniform) {
  // Each of the 6 permutations of 3 elements appears about equally often.
  std::vector<int> counts(6, 0);
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    std::vector<int> p = vjit::shuffled_indices(3, seed);
    counts[size_t(p[0] * 2 + (p[1] > p[2] ? 1 : 0))]++;
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
}

TEST(Train, Argmax) {
  const float x[] = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(vjit::argmax(x, 4), 1);
  const float y[] = {std::numeric_limits<float>::quiet_NaN(), -3.0f, -2.0f};
  EXPECT_EQ(vjit::argmax(y, 3), 2);
  EXPECT_EQ(vjit::argmax(x, 1), 0);
  EXPECT_THROW(vjit::argmax(x, 0), vjit::UserError);
}

TEST(Train, Accuracy) {
  vjit::Accuracy acc;
  EXPECT_EQ(acc.value(), 0.0);
  acc.add(true);
  acc.add(false);
  acc.add(true);
  acc.add(true);
  EXPECT_DOUBLE_EQ(acc.value(), 0.75);
  vjit::Accuracy other{1, 4};
  acc += other;
  EXPECT_EQ(acc.correct, 4);
  EXPECT_EQ(acc.total, 8);
}

TEST(Train, TimerAdvances) {
  vjit::Timer t;
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + i;
  EXPECT_GE(t.seconds(), 0.0);
}

TEST(Train, ProgressBarRender) {
  EXPECT_EQ(vjit::ProgressBar::render("", 5, 10, 1.25, 12.34, 10), "[=====>    ] 5/10 loss 1.25 12.3 samples/s");
  EXPECT_EQ(vjit::ProgressBar::render("ep 1", 10, 10, std::nan(""), 3.0, 4), "ep 1 [====] 10/10 3.0 samples/s");
  EXPECT_EQ(vjit::ProgressBar::render("", 7, 0, std::nan(""), std::nan(""), 4), "7");
}

TEST(Train, ProgressBarPlainLinesWhenNotATerminal) {
  std::ostringstream out;
  {
    vjit::ProgressBar bar(100, "train", out, /*interactive=*/false);
    for (int i = 1; i <= 100; ++i) bar.update(i, 1.0 / i);
  }
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 10) << text;  // one per 10 %, no duplicate at the end
  EXPECT_NE(text.find("100/100 loss 0.01"), std::string::npos) << text;
}

TEST(Train, ProgressBarRedrawsInPlaceOnATerminal) {
  std::ostringstream out;
  vjit::ProgressBar bar(3, "", out, /*interactive=*/true);
  bar.update(1, 0.5);
  bar.finish();
  bar.update(2, 0.5);  // ignored after finish
  const std::string text = out.str();
  EXPECT_EQ(text.front(), '\r');
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

// --- row-sparse gradients (GradientRows) ---

using vjit::GradientRows;

// An embedding table "emb" [6,4] with two dense parameters.
vjit::Model table_model() {
  vjit::Model model(11);
  model.add("emb", vjit::Shape::mat(6, 4), vjit::Init::Uniform, 0.5f);
  model.add("W", vjit::Shape::mat(3, 4), vjit::Init::Uniform, 0.5f);
  model.add("b", vjit::Shape::vec(3), vjit::Init::Uniform, 0.5f);
  return model;
}

// GradientRows for a model whose parameter 0 is a table with `listed` rows; the others dense.
std::vector<GradientRows> table_rows(const vjit::Model& model, std::vector<int32_t> listed) {
  std::vector<GradientRows> rows(size_t(model.size()));
  rows[0].all = false;
  rows[0].rows = std::move(listed);
  return rows;
}

bool is_listed(const std::vector<GradientRows>& rows, size_t param, int64_t row) {
  return rows.empty() || rows[param].all ||
         std::binary_search(rows[param].rows.begin(), rows[param].rows.end(), int32_t(row));
}

// Uniform in [-1, 1) where `rows` lists an element, zero elsewhere (what a backward gives).
Grads random_grads(const vjit::Model& model, const std::vector<GradientRows>& rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Grads g = zeros(model);
  for (int p = 0; p < model.size(); ++p) {
    const int64_t cols = model.param(p).shape.cols();
    for (size_t k = 0; k < g[size_t(p)].size(); ++k)
      if (is_listed(rows, size_t(p), int64_t(k) / cols)) g[size_t(p)][k] = uniform(rng);
  }
  return g;
}

struct Config {
  std::string name;
  bool adam = true;
  float lr = 0.05f, momentum = 0.0f, weight_decay = 0.0f, clip = 0.0f;
  bool dense = false;  // set_dense_updates
};

std::unique_ptr<vjit::Optimizer> make_optimizer(const Config& c) {
  std::unique_ptr<vjit::Optimizer> opt;
  if (c.adam) opt = std::make_unique<vjit::Adam>(c.lr, 0.9f, 0.999f, 1e-8f, c.weight_decay, c.clip);
  else opt = std::make_unique<vjit::SGD>(c.lr, c.momentum, c.weight_decay, c.clip);
  opt->set_dense_updates(c.dense);
  return opt;
}

// The update rules of optimizer.h in double, element by element: lazy (rows a
// step does not list keep weights and state) or dense (they get g = 0, as
// torch.optim does on the dense gradient).
class ReferenceOptimizer {
 public:
  ReferenceOptimizer(const Config& c, const vjit::Model& model) : c_(c) {
    for (int p = 0; p < model.size(); ++p) {
      w.emplace_back(model.param(p).value.begin(), model.param(p).value.end());
      cols_.push_back(model.param(p).shape.cols());
    }
    m_.assign(w.size(), {});
    v_.assign(w.size(), {});
    for (size_t p = 0; p < w.size(); ++p) {
      m_[p].assign(w[p].size(), 0.0);
      v_[p].assign(w[p].size(), 0.0);
    }
  }

  void step(const Grads& g, const std::vector<GradientRows>& rows) {
    ++t_;
    double sum = 0.0;
    for (size_t p = 0; p < w.size(); ++p)
      for (size_t k = 0; k < w[p].size(); ++k)
        if (is_listed(rows, p, int64_t(k) / cols_[p])) sum += double(g[p][k]) * g[p][k];
    const double norm = std::sqrt(sum);
    const double scale = c_.clip > 0 && norm > c_.clip ? c_.clip / norm : 1.0;
    const double lr = c_.lr, wd = c_.weight_decay, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (size_t p = 0; p < w.size(); ++p)
      for (size_t k = 0; k < w[p].size(); ++k) {
        const bool listed = is_listed(rows, p, int64_t(k) / cols_[p]);
        if (!listed && !c_.dense) continue;
        const double gk = listed ? g[p][k] * scale : 0.0;
        double& wk = w[p][k];
        double& m = m_[p][k];
        double& v = v_[p][k];
        if (c_.adam) {
          m = b1 * m + (1 - b1) * gk;
          v = b2 * v + (1 - b2) * gk * gk;
          const double m_hat = m / (1 - std::pow(b1, t_)), v_hat = v / (1 - std::pow(b2, t_));
          wk = wk - lr * wd * wk - lr * m_hat / (std::sqrt(v_hat) + eps);
        } else {
          double d = gk + wd * wk;
          if (c_.momentum > 0) d = m = c_.momentum * m + d;
          wk -= lr * d;
        }
      }
  }

  std::vector<std::vector<double>> w;

 private:
  Config c_;
  std::vector<int64_t> cols_;
  std::vector<std::vector<double>> m_, v_;
  int t_ = 0;
};

std::vector<Config> sparse_configs() {
  std::vector<Config> configs;
  for (bool dense : {false, true}) {
    const std::string mode = dense ? " dense" : " lazy";
    configs.push_back({"Adam" + mode, true, 0.05f, 0.0f, 0.0f, 0.0f, dense});
    configs.push_back({"AdamW clipped" + mode, true, 0.05f, 0.0f, 0.02f, 1.5f, dense});
    configs.push_back({"SGD momentum" + mode, false, 0.1f, 0.9f, 0.01f, 0.0f, dense});
    configs.push_back({"SGD clipped" + mode, false, 0.1f, 0.0f, 0.05f, 1.5f, dense});
  }
  return configs;
}

// The table's rows listed per step: some rows come back after steps without
// them (their state must have waited, or decayed), one step lists none.
const std::vector<std::vector<int32_t>> kListedPerStep = {{1, 4}, {1}, {}, {0, 4, 5}, {2, 3, 4}, {1, 2, 3, 4, 5}};

void expect_matches_reference(const vjit::Model& initial, const std::vector<std::vector<int32_t>>& listed_per_step,
                              const std::string& what) {
  for (const Config& c : sparse_configs()) {
    vjit::Model model = initial;
    std::unique_ptr<vjit::Optimizer> opt = make_optimizer(c);
    ReferenceOptimizer ref(c, model);
    for (size_t s = 0; s < listed_per_step.size(); ++s) {
      const std::vector<GradientRows> rows = table_rows(model, listed_per_step[s]);
      const Grads g = random_grads(model, rows, 100 + s);
      opt->step(model, g, rows);
      ref.step(g, rows);
      for (int p = 0; p < model.size(); ++p)
        for (size_t k = 0; k < ref.w[size_t(p)].size(); ++k)
          ASSERT_NEAR(model.param(p).value[k], ref.w[size_t(p)][k], 1e-5)
              << what << ", " << c.name << ", step " << s << ", " << model.param(p).name << "[" << k << "]";
    }
    EXPECT_EQ(opt->steps(), int64_t(listed_per_step.size())) << c.name;
  }
}

TEST(GradientRows, LazyAndDenseUpdatesMatchAReferenceOverSteps) {
  expect_matches_reference(table_model(), kListedPerStep, "a small table");
  // A table of many chunks (32 rows of 512 each) with runs of listed rows and
  // gaps, and a dense matrix of several chunks.
  vjit::Model chunked(13);
  chunked.add("emb", vjit::Shape::mat(200, 512), vjit::Init::Uniform, 0.5f);
  chunked.add("W", vjit::Shape::mat(150, 256), vjit::Init::Uniform, 0.5f);
  std::vector<std::vector<int32_t>> listed_per_step;
  std::mt19937_64 rng(3);
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> listed;
    for (int32_t row = 0; row < 200; ++row)
      if (rng() % 3 != 0) listed.push_back(row);
    listed_per_step.push_back(listed);
  }
  expect_matches_reference(chunked, listed_per_step, "a table of several chunks");
}

TEST(GradientRows, LazyUpdatesLeaveUnlistedRowsExactlyAlone) {
  for (const Config& c : sparse_configs()) {
    vjit::Model model = table_model();
    std::unique_ptr<vjit::Optimizer> opt = make_optimizer(c);
    for (size_t s = 0; s < kListedPerStep.size(); ++s) {
      const std::vector<GradientRows> rows = table_rows(model, kListedPerStep[s]);
      const std::vector<float> before = model.param(0).value;
      opt->step(model, random_grads(model, rows, 100 + s), rows);
      const std::vector<float>& after = model.param(0).value;
      for (int64_t row = 0; row < 6; ++row) {
        const bool listed = is_listed(rows, 0, row);
        bool changed = false;
        for (int64_t col = 0; col < 4; ++col) changed |= after[size_t(row * 4 + col)] != before[size_t(row * 4 + col)];
        if (listed) {
          EXPECT_TRUE(changed) << c.name << ", step " << s << ": listed row " << row;
        } else if (!c.dense) {
          EXPECT_FALSE(changed) << c.name << ", step " << s << ": unlisted row " << row;
        } else if (s == 1 && row == 4) {
          // Listed in step 0, so its state (or decay) moves it under dense updates.
          EXPECT_TRUE(changed) << c.name << ": dense updates move unlisted row 4";
        }
      }
    }
  }
}

TEST(GradientRows, DenseUpdatesEqualADenseStepOnTheZeroFilledGradient) {
  for (const Config& c : sparse_configs()) {
    if (!c.dense || c.clip > 0) continue;  // with clipping the norm's summation order differs
    vjit::Model with_rows = table_model(), dense = table_model();
    std::unique_ptr<vjit::Optimizer> a = make_optimizer(c), b = make_optimizer(c);
    for (size_t s = 0; s < kListedPerStep.size(); ++s) {
      const std::vector<GradientRows> rows = table_rows(with_rows, kListedPerStep[s]);
      const Grads g = random_grads(with_rows, rows, 100 + s);
      a->step(with_rows, g, rows);
      b->step(dense, g);
      EXPECT_EQ(values(with_rows), values(dense)) << c.name << ", step " << s;
    }
  }
}

TEST(GradientRows, NonFiniteInAListedRowNamesParameterAndElement) {
  for (bool dense : {false, true}) {
    vjit::Model model = table_model(), twin = table_model();
    vjit::Adam adam(0.05f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f), twin_adam(0.05f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f);
    adam.set_dense_updates(dense);
    twin_adam.set_dense_updates(dense);
    const std::vector<GradientRows> rows = table_rows(model, {1, 4});
    adam.step(model, random_grads(model, rows, 1), rows);
    twin_adam.step(twin, random_grads(twin, rows, 1), rows);
    const auto before = values(model);
    Grads bad = random_grads(model, rows, 2);
    bad[0][4 * 4 + 2] = std::numeric_limits<float>::infinity();
    const std::string message = vjit::test_util::user_error_of([&] { adam.step(model, bad, rows); });
    EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
    EXPECT_NE(message.find("'emb'"), std::string::npos) << message;
    EXPECT_NE(message.find("[4,2]"), std::string::npos) << message;
    EXPECT_EQ(values(model), before);
    EXPECT_EQ(adam.steps(), 1);
    // The state did not move either: the next step equals the twin's.
    adam.step(model, random_grads(model, rows, 3), rows);
    twin_adam.step(twin, random_grads(twin, rows, 3), rows);
    EXPECT_EQ(values(model), values(twin));
  }
}

TEST(GradientRows, UnlistedRowsAreNeverRead) {
  for (bool dense : {false, true}) {
    vjit::Model model = table_model();
    vjit::SGD sgd(0.1f, 0.9f, 0.01f);
    sgd.set_dense_updates(dense);
    const std::vector<GradientRows> rows = table_rows(model, {1, 4});
    Grads g = random_grads(model, rows, 1);
    g[0][2 * 4 + 1] = std::numeric_limits<float>::quiet_NaN();  // row 2: not listed
    const std::vector<float> before = model.param(0).value;
    sgd.step(model, g, rows);
    for (int col = 0; col < 4; ++col) {
      const float after = model.param(0).value[size_t(2 * 4 + col)];
      EXPECT_TRUE(std::isfinite(after)) << col;
      // Lazy: untouched. Dense: only the weight decay, g taken as 0.
      const float expected = dense ? before[size_t(2 * 4 + col)] - 0.1f * (0.01f * before[size_t(2 * 4 + col)])
                                   : before[size_t(2 * 4 + col)];
      EXPECT_EQ(after, expected) << col;
    }
    EXPECT_NEAR(sgd.last_grad_norm(), global_norm(random_grads(model, rows, 1)), 1e-6);
  }
}

TEST(GradientRows, BadRowsAreRejectedNamingTheParameter) {
  vjit::Model model = table_model();
  vjit::Adam adam(0.05f);
  const Grads g = zeros(model);
  const auto before = values(model);
  auto error = [&](std::vector<GradientRows> rows) {
    return vjit::test_util::user_error_of([&] { adam.step(model, g, rows); });
  };
  for (const std::vector<int32_t>& listed : std::vector<std::vector<int32_t>>{{4, 1}, {1, 1}}) {
    const std::string message = error(table_rows(model, listed));
    EXPECT_NE(message.find("'emb'"), std::string::npos) << message;
    EXPECT_NE(message.find("sorted and unique"), std::string::npos) << message;
  }
  for (int32_t row : {6, -1}) {
    const std::string message = error(table_rows(model, {0, row}));
    EXPECT_NE(message.find("'emb'"), std::string::npos) << message;
    EXPECT_NE(message.find("row " + std::to_string(row)), std::string::npos) << message;
    EXPECT_NE(message.find("[6,4]"), std::string::npos) << message;
  }
  const std::string message = error(std::vector<GradientRows>(2));
  EXPECT_NE(message.find("2 GradientRows"), std::string::npos) << message;
  EXPECT_EQ(values(model), before);
  EXPECT_EQ(adam.steps(), 0);
}

// --- threads ---

// Runs the tasks on the calling thread, last first, and counts them.
class ReversedParallelFor : public vjit::runtime::ParallelFor {
 public:
  void run(int64_t n, vjit::runtime::TaskRef fn) override {
    ++runs;
    tasks += n;
    for (int64_t i = n; i-- > 0;) fn(i);
  }
  int64_t runs = 0, tasks = 0;
};

// A pool that counts what it is given.
class CountingPool : public vjit::runtime::ParallelFor {
 public:
  explicit CountingPool(int threads) : pool_(threads), parallel_(pool_) {}
  void run(int64_t n, vjit::runtime::TaskRef fn) override {
    ++runs;
    parallel_.run(n, fn);
  }
  int64_t runs = 0;

 private:
  vjit::runtime::ThreadPool pool_;
  vjit::runtime::PoolParallelFor parallel_;
};

// A table of many chunks, and dense parameters of several chunks and of one.
vjit::Model large_model() {
  vjit::Model model(5);
  model.add("emb", vjit::Shape::mat(1000, 128), vjit::Init::Uniform, 0.1f);
  model.add("W", vjit::Shape::mat(128, 384));
  model.add("b", vjit::Shape::vec(384), vjit::Init::Zeros);
  return model;
}

std::vector<int32_t> random_rows(int32_t table_rows, int count, uint64_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(table_rows));
  for (int32_t r = 0; r < table_rows; ++r) all[size_t(r)] = r;
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(size_t(count));
  std::sort(all.begin(), all.end());
  return all;
}

// Steps of large_model() with `listed[s]` rows of the table listed in step s
// (or, without use_rows, the same gradients as dense ones).
struct Steps {
  std::vector<std::vector<GradientRows>> rows;
  std::vector<Grads> grads;
};

Steps large_steps(const vjit::Model& model, const std::vector<int>& listed, bool use_rows) {
  Steps steps;
  for (size_t s = 0; s < listed.size(); ++s) {
    steps.rows.push_back(table_rows(model, random_rows(1000, listed[s], s)));
    steps.grads.push_back(random_grads(model, steps.rows.back(), 7 + s));
    if (!use_rows) steps.rows.back().clear();
  }
  return steps;
}

TEST(OptimizerThreads, ResultsDoNotDependOnTheThreads) {
  ReversedParallelFor reversed;
  CountingPool two(2), three(3);
  const std::vector<vjit::runtime::ParallelFor*> runners = {nullptr, &reversed, &two, &three};
  for (bool use_rows : {true, false}) {
    const Steps steps = large_steps(large_model(), {300, 450, 1000}, use_rows);
    for (const Config& c : sparse_configs()) {
      reversed.runs = reversed.tasks = two.runs = three.runs = 0;
      std::vector<std::vector<float>> first_values;
      double first_norm = 0.0;
      for (size_t r = 0; r < runners.size(); ++r) {
        vjit::Model model = large_model();
        std::unique_ptr<vjit::Optimizer> opt = make_optimizer(c);
        for (size_t s = 0; s < steps.grads.size(); ++s) OptimizerAccess::step(*opt, model, steps.grads[s], steps.rows[s], runners[r]);
        if (r == 0) {
          first_values = values(model);
          first_norm = opt->last_grad_norm();
        } else {
          EXPECT_TRUE(values(model) == first_values) << c.name << (use_rows ? " rows" : " dense") << ", runner " << r;
          EXPECT_EQ(opt->last_grad_norm(), first_norm) << c.name << ", runner " << r;
        }
      }
      // Each step ran its gradient check, its preview and its update as several tasks.
      EXPECT_EQ(reversed.runs, 9) << c.name;
      EXPECT_GT(reversed.tasks, 9 * 4) << c.name;
      EXPECT_EQ(two.runs, 9) << c.name;
      EXPECT_EQ(three.runs, 9) << c.name;
    }
  }
}

TEST(OptimizerThreads, SmallModelsStayOnTheCallingThread) {
  Quadratic q;
  ReversedParallelFor parallel;
  vjit::Adam adam(0.05f);
  OptimizerAccess::step(adam, q.model, q.grads(), {}, &parallel);
  EXPECT_EQ(parallel.runs, 0);
  EXPECT_EQ(adam.steps(), 1);
}

// --- allocations ---

TEST(OptimizerAllocations, TheCounterSeesAllocations) {
  static std::vector<std::vector<float>> keep;
  AllocationCounter counter;
  keep.emplace_back(100, 1.0f);
  EXPECT_GE(counter.count(), 1);
}

TEST(OptimizerAllocations, NoneAfterTheFirstStep) {
  CountingPool pool(2);
  for (bool use_rows : {true, false}) {
    // The listed rows vary, growing past the first step's.
    const Steps steps = large_steps(large_model(), {50, 10, 700, 0, 999, 1000}, use_rows);
    for (const Config& c : sparse_configs()) {
      vjit::Model model = large_model();
      std::unique_ptr<vjit::Optimizer> opt = make_optimizer(c);
      OptimizerAccess::step(*opt, model, steps.grads[0], steps.rows[0], &pool);
      int64_t allocations = 0;
      {
        AllocationCounter counter;
        for (size_t s = 1; s < steps.grads.size(); ++s)
          OptimizerAccess::step(*opt, model, steps.grads[s], steps.rows[s], s % 2 ? &pool : nullptr);
        allocations = counter.count();
      }
      EXPECT_EQ(allocations, 0) << c.name << (use_rows ? " with rows" : " dense");
      // The plain overload allocates nothing either.
      {
        AllocationCounter counter;
        opt->step(model, steps.grads[1]);
        allocations = counter.count();
      }
      EXPECT_EQ(allocations, 0) << c.name << ", step(model, grads)";
    }
  }
}

// --- updates that would leave non-finite values ---

constexpr float kHuge = 3e38f;  // FLT_MAX is 3.4e38: twice this overflows

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What a step may change: the weights, the state, steps() and last_grad_norm().
struct Snapshot {
  std::vector<std::vector<float>> values;
  vjit::OptimizerState state;
  int64_t steps = 0;
  double grad_norm = 0;

  Snapshot(const vjit::Model& model, const vjit::Optimizer& opt, const vjit::OptimizerState& s)
      : values(::values(model)), state(s), steps(opt.steps()), grad_norm(opt.last_grad_norm()) {}

  // Bit for bit, so that a NaN or a -0 left behind would count.
  void expect_same(const Snapshot& after, const std::string& what) const {
    ASSERT_EQ(after.values.size(), values.size());
    for (size_t p = 0; p < values.size(); ++p) EXPECT_TRUE(same_bits(after.values[p], values[p])) << what << ", param " << p;
    ASSERT_EQ(after.state.slots.size(), state.slots.size()) << what;
    for (size_t p = 0; p < state.slots.size(); ++p) {
      ASSERT_EQ(after.state.slots[p].size(), state.slots[p].size()) << what;
      for (size_t k = 0; k < state.slots[p].size(); ++k)
        EXPECT_TRUE(same_bits(after.state.slots[p][k], state.slots[p][k])) << what << ", param " << p << " slot " << k;
    }
    EXPECT_EQ(after.state.shapes, state.shapes) << what;
    EXPECT_EQ(after.state.steps, state.steps) << what;
    EXPECT_EQ(after.state.owner, state.owner) << what;
    EXPECT_EQ(after.state.generation, state.generation) << what;
    EXPECT_EQ(after.steps, steps) << what;
    EXPECT_EQ(std::memcmp(&after.grad_norm, &grad_norm, sizeof grad_norm), 0) << what;
  }
};

// Runs a step that must fail on a non-finite update: returns its message and
// checks that the model, the state and the counters are bitwise as before.
std::string expect_step_undone(vjit::Optimizer& opt, vjit::Model& model, const Grads& grads,
                               const std::vector<GradientRows>& rows, vjit::OptimizerState& state,
                               vjit::runtime::ParallelFor* parallel = nullptr) {
  const Snapshot before(model, opt, state);
  const std::string message =
      vjit::test_util::user_error_of([&] { OptimizerAccess::step(opt, model, grads, rows, parallel, &state); });
  EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
  EXPECT_NE(message.find("nothing was changed"), std::string::npos) << message;
  before.expect_same(Snapshot(model, opt, state), message);
  return message;
}

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
}

TEST(NonFiniteUpdates, SgdOverflowNamesTheWeightAndStepAndChangesNothing) {
  for (float momentum : {0.0f, 0.9f}) {
    Quadratic q;
    vjit::SGD sgd(1.0f, momentum);
    vjit::OptimizerState state;
    OptimizerAccess::step(sgd, q.model, q.grads(), {}, nullptr, &state);  // step 1 succeeds
    q.model.param(0).value[5] = -kHuge;                  // W[1,2]
    Grads g = q.grads();
    g[0][5] = kHuge;  // finite, and so is Σ g² (in double): −3e38 − 3e38 is not
    const std::string message = expect_step_undone(sgd, q.model, g, {}, state);
    expect_contains(message, {"step 2", "parameter 'W' at [1,2]", "-inf", "-3e+38"});
    EXPECT_EQ(message.find("velocity"), std::string::npos) << message;  // the weight comes first
    EXPECT_EQ(state.steps, 1);
  }
}

TEST(NonFiniteUpdates, AdamOverflowOfTheSecondMomentIsNamed) {
  Quadratic q;
  vjit::Adam adam(0.01f);
  vjit::OptimizerState state;
  for (int i = 0; i < 3; ++i) OptimizerAccess::step(adam, q.model, q.grads(), {}, nullptr, &state);
  Grads g = q.grads();
  g[1][1] = 1e30f;  // g² overflows a float: v = inf while the weight stays finite
  const std::string message = expect_step_undone(adam, q.model, g, {}, state);
  expect_contains(message, {"step 4", "the second moment v of parameter 'b' at [1]", "inf"});
}

TEST(NonFiniteUpdates, AdamOverflowOfAWeightIsNamed) {
  Quadratic q;
  vjit::Adam adam(1e38f);  // a step of about lr on every weight with a gradient
  vjit::OptimizerState state;
  q.model.param(0).value[4] = -kHuge;  // W[1,1]
  Grads g = zeros(q.model);
  g[0][4] = 1.0f;  // moves W[1,1] by −1e38
  const std::string message = expect_step_undone(adam, q.model, g, {}, state);
  expect_contains(message, {"step 1", "parameter 'W' at [1,1]", "-inf"});
  // The first step made the state; undone, the state is as it was (never made).
  EXPECT_TRUE(state.slots.empty());
  EXPECT_EQ(adam.steps(), 0);
}

TEST(NonFiniteUpdates, AStateLeftByAnotherOptimizerIsGivenBack) {
  Quadratic q;
  vjit::Adam first(0.01f), second(1e38f);
  vjit::OptimizerState state;
  OptimizerAccess::step(first, q.model, q.grads(), {}, nullptr, &state);
  q.model.param(1).value[0] = -kHuge;
  Grads g = zeros(q.model);
  g[1][0] = 1.0f;
  // `second` would make the state again (it is first's); the failed step must give first's back.
  expect_step_undone(second, q.model, g, {}, state);
  EXPECT_EQ(state.owner, &first);
  EXPECT_EQ(state.steps, 1);
}

TEST(NonFiniteUpdates, RowSparseStepsNameTheRowAndChangeNothing) {
  for (bool dense : {false, true}) {
    vjit::Model model = table_model();
    vjit::SGD sgd(1.0f, 0.5f);
    sgd.set_dense_updates(dense);
    vjit::OptimizerState state;
    const std::vector<GradientRows> rows = table_rows(model, {1, 4});
    OptimizerAccess::step(sgd, model, random_grads(model, rows, 3), rows, nullptr, &state);
    model.param(0).value[4 * 4 + 2] = -kHuge;  // emb[4,2], a listed row
    Grads g = random_grads(model, rows, 4);
    g[0][4 * 4 + 2] = kHuge;
    const std::string message = expect_step_undone(sgd, model, g, rows, state);
    expect_contains(message, {"step 2", "parameter 'emb' at [4,2]"});
  }
}

TEST(NonFiniteUpdates, DenseUpdatesCheckTheRowsUpdatedWithAZeroGradient) {
  // Weight decay on a huge weight in a row the step does not list: lazy
  // updates leave the row alone; dense updates decay it, and overflow.
  vjit::Model model = table_model();
  model.param(0).value[2 * 4 + 3] = kHuge;  // emb[2,3], not listed
  const std::vector<GradientRows> rows = table_rows(model, {1, 4});
  const Grads g = random_grads(model, rows, 5);
  vjit::SGD lazy(1e30f, 0.0f, 1e10f);
  vjit::Model lazy_model = model;
  // The listed rows hold weights of about 0.5: lr·wd·w = 5e39 overflows there too, so use a tiny lr.
  vjit::SGD lazy_small(1e-3f, 0.0f, 1e10f);
  lazy_small.step(lazy_model, g, rows);
  EXPECT_EQ(lazy_model.param(0).value[2 * 4 + 3], kHuge);  // untouched
  vjit::SGD dense(1e-3f, 0.0f, 1e10f);
  dense.set_dense_updates(true);
  vjit::OptimizerState state;
  const std::string message = expect_step_undone(dense, model, g, rows, state);
  expect_contains(message, {"step 1", "parameter 'emb' at [2,3]", "-inf"});
}

// The configurations without clipping: clipping bounds the step, so a huge
// gradient cannot overflow them.
std::vector<Config> unclipped_configs() {
  std::vector<Config> configs;
  for (const Config& c : sparse_configs())
    if (c.clip == 0.0f) configs.push_back(c);
  return configs;
}

// Makes element `k` of parameter `p` overflow on the next step of an
// unclipped configuration (after a first step, so that the state exists):
// Adam's second moment (g² overflows), SGD's velocity (μ·v + g overflows).
void plant_overflow(const Config& c, vjit::OptimizerState& state, Grads& g, int p, size_t k) {
  ASSERT_EQ(c.clip, 0.0f);
  ASSERT_TRUE(c.adam || c.momentum > 0.0f) << c.name;
  g[size_t(p)][k] = c.adam ? 1e30f : kHuge;
  if (!c.adam) state.slots[size_t(p)][0][k] = kHuge;
}

TEST(NonFiniteUpdates, ALaterValidStepGoesOnAsIfTheFailedOneNeverHappened) {
  for (const Config& c : unclipped_configs()) {
    vjit::Model a = table_model(), b = table_model();
    std::unique_ptr<vjit::Optimizer> failing = make_optimizer(c), clean = make_optimizer(c);
    vjit::OptimizerState state_a, state_b;
    const std::vector<GradientRows> rows = table_rows(a, {0, 4, 5});
    for (uint64_t s = 0; s < 2; ++s) {
      OptimizerAccess::step(*failing, a, random_grads(a, rows, s), rows, nullptr, &state_a);
      OptimizerAccess::step(*clean, b, random_grads(b, rows, s), rows, nullptr, &state_b);
    }
    Grads bad = random_grads(a, rows, 9);
    const float saved = c.adam ? 0.0f : state_a.slots[1][0][0];
    plant_overflow(c, state_a, bad, 1, 0);  // W[0,0]
    const std::string message = expect_step_undone(*failing, a, bad, rows, state_a);
    expect_contains(message, {"step 3", "parameter 'W' at [0,0]"});
    if (!c.adam) state_a.slots[1][0][0] = saved;
    for (uint64_t s = 2; s < 4; ++s) {
      OptimizerAccess::step(*failing, a, random_grads(a, rows, s), rows, nullptr, &state_a);
      OptimizerAccess::step(*clean, b, random_grads(b, rows, s), rows, nullptr, &state_b);
    }
    EXPECT_EQ(values(a), values(b)) << c.name;
    EXPECT_EQ(failing->steps(), clean->steps()) << c.name;
    EXPECT_EQ(state_a.steps, 4) << c.name;
  }
}

TEST(NonFiniteUpdates, TheFirstFailureIsNamedWhateverTheThreads) {
  ReversedParallelFor reversed;
  CountingPool two(2);
  for (bool use_rows : {true, false}) {
    const Steps steps = large_steps(large_model(), {300, 450}, use_rows);
    for (const Config& c : unclipped_configs()) {
      std::string first_message;
      for (vjit::runtime::ParallelFor* runner : std::vector<vjit::runtime::ParallelFor*>{nullptr, &reversed, &two}) {
        vjit::Model model = large_model();
        std::unique_ptr<vjit::Optimizer> opt = make_optimizer(c);
        vjit::OptimizerState state;
        OptimizerAccess::step(*opt, model, steps.grads[0], steps.rows[0], runner, &state);
        // Two failures, in the table's last listed row and in W: W comes later in parameter order.
        Grads g = steps.grads[1];
        const int32_t row = steps.rows[1].empty() ? 999 : steps.rows[1][0].rows.back();
        plant_overflow(c, state, g, 0, size_t(row) * 128 + 5);
        plant_overflow(c, state, g, 1, 7);
        const std::string message = expect_step_undone(*opt, model, g, steps.rows[1], state, runner);
        expect_contains(message, {"parameter 'emb' at [" + std::to_string(row) + ",5]"});
        if (first_message.empty()) first_message = message;
        else EXPECT_EQ(message, first_message) << c.name;
      }
    }
  }
}

// Random weights, moments, gradients and hyperparameters from tiny to near
// FLT_MAX: a step either throws and changes nothing, or leaves every weight and
// moment finite (which also checks that Adam's division-free bound never
// proves a value finite that is not). Both outcomes must occur.
TEST(NonFiniteUpdates, RandomExtremeStepsNeverLeaveANonFiniteValue) {
  std::mt19937_64 rng(17);
  auto magnitude = [&](double lo, double hi) {
    return std::pow(10.0, std::uniform_real_distribution<double>(lo, hi)(rng));
  };
  double top = 38.6;  // each trial's largest decimal exponent, up to FLT_MAX
  auto extreme = [&] {
    const double x = std::min(magnitude(-3.0, top), 3.4e38);
    return float(rng() % 2 ? x : -x);
  };
  int failed = 0, succeeded = 0;
  for (int trial = 0; trial < 400; ++trial) {
    top = std::uniform_real_distribution<double>(0.0, 38.6)(rng);
    vjit::Model model(1);
    model.add("x", vjit::Shape::vec(8), vjit::Init::Zeros);
    const float lr = float(magnitude(-4.0, rng() % 4 == 0 ? 38.0 : 2.0));
    const float eps = std::vector<float>{1e-8f, 1e-30f, 1.0f}[rng() % 3];
    const float weight_decay = std::vector<float>{0.0f, 0.01f, 1e30f}[rng() % 3];
    std::unique_ptr<vjit::Optimizer> opt;
    if (rng() % 4 == 0) opt = std::make_unique<vjit::SGD>(lr, rng() % 2 ? 0.9f : 0.0f, weight_decay);
    else opt = std::make_unique<vjit::Adam>(lr, 0.9f, rng() % 2 ? 0.999f : 0.5f, eps, weight_decay);
    vjit::OptimizerState state;
    // Makes the state. Zero weights stay zero unless lr·weight_decay overflows (0·−inf).
    if (vjit::test_util::user_error_of([&] { OptimizerAccess::step(*opt, model, zeros(model), {}, nullptr, &state); }) !=
        "(no UserError)")
      continue;
    for (float& w : model.param(0).value) w = extreme();
    for (auto& slots : state.slots)
      for (auto& slot : slots)
        for (size_t k = 0; k < slot.size(); ++k) slot[k] = k % 5 == 0 ? 0.0f : std::fabs(extreme());
    Grads g = zeros(model);
    for (float& x : g[0]) x = extreme();
    const Snapshot before(model, *opt, state);
    try {
      OptimizerAccess::step(*opt, model, g, {}, nullptr, &state);
    } catch (const vjit::UserError& e) {
      ++failed;
      before.expect_same(Snapshot(model, *opt, state), e.what());
      continue;
    }
    ++succeeded;
    for (float w : model.param(0).value) ASSERT_TRUE(std::isfinite(w)) << "trial " << trial;
    for (const auto& slots : state.slots)
      for (const auto& slot : slots)
        for (float x : slot) ASSERT_TRUE(std::isfinite(x)) << "trial " << trial;
  }
  EXPECT_GT(failed, 10);
  EXPECT_GT(succeeded, 10);
}

// A rule of the user's own, with no preview: checked after its update against
// the undo log. w ← w − lr·a, a ← a + g·scale (the gradients summed in its slot).
class AccumulatingRule : public vjit::Optimizer {
 public:
  explicit AccumulatingRule(float lr) : Optimizer(lr, 0.0f) {}

 protected:
  int state_slots() const override { return 1; }
  void update(int, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
              float grad_scale) override {
    for (int64_t k = begin; k < end; ++k) {
      state[0][k] += g ? g[k] * grad_scale : 0.0f;
      w[k] -= lr() * state[0][k];
    }
  }
};

// The device form (runtime/optimizer_access.h) is SGD's and Adam's own: a
// subclass, which may update otherwise, AdaGrad and a rule of the user's have
// none, and the CUDA executor steps them on the host.
class RenamedAdam : public vjit::Adam {
 public:
  using Adam::Adam;
  std::string kind() const override { return "renamed"; }
};

TEST(DeviceRule, OnlySgdAndAdamThemselvesHaveOne) {
  using Kind = vjit::runtime::DeviceUpdate::Kind;
  const vjit::runtime::DeviceUpdate adam = OptimizerAccess::device_rule(vjit::Adam(0.01f, 0.8f, 0.99f, 1e-6f, 0.5f));
  EXPECT_EQ(adam.kind, Kind::Adam);
  EXPECT_EQ(adam.beta1, 0.8f);
  EXPECT_EQ(adam.beta2, 0.99f);
  EXPECT_EQ(adam.eps, 1e-6f);
  EXPECT_EQ(adam.decay, 1.0f - 0.01f * 0.5f);
  EXPECT_EQ(OptimizerAccess::device_rule(vjit::SGD(0.1f)).kind, Kind::Sgd);
  const vjit::runtime::DeviceUpdate sgd = OptimizerAccess::device_rule(vjit::SGD(0.1f, 0.9f, 0.01f));
  EXPECT_EQ(sgd.kind, Kind::SgdMomentum);
  EXPECT_EQ(sgd.momentum, 0.9f);
  EXPECT_EQ(sgd.weight_decay, 0.01f);
  EXPECT_EQ(OptimizerAccess::device_rule(RenamedAdam(0.01f)).kind, Kind::None);
  EXPECT_EQ(OptimizerAccess::device_rule(vjit::AdaGrad()).kind, Kind::None);
  EXPECT_EQ(OptimizerAccess::device_rule(AccumulatingRule(1.0f)).kind, Kind::None);
}

TEST(NonFiniteUpdates, ARuleWithoutAPreviewIsUndoneFromTheLog) {
  CountingPool two(2);
  for (bool use_rows : {true, false}) {
    for (bool dense : {false, true}) {
      const Steps steps = large_steps(large_model(), {300, 450, 200}, use_rows);
      vjit::Model model = large_model();
      AccumulatingRule rule(1.0f);
      rule.set_dense_updates(dense);
      vjit::OptimizerState state;
      OptimizerAccess::step(rule, model, steps.grads[0], steps.rows[0], &two, &state);
      // The failure is in W's last element: every chunk before it was updated, then copied back.
      Grads g = steps.grads[1];
      g[1].back() = kHuge;
      model.param(1).value.back() = -kHuge;  // −3e38 − 1·(a + 3e38) overflows
      const std::string message = expect_step_undone(rule, model, g, steps.rows[1], state, &two);
      expect_contains(message, {"step 2", "parameter 'W' at [127,383]", "-inf", "-3e+38"});
      // The undo log keeps later steps allocation-free.
      model.param(1).value.back() = 0.0f;
      AllocationCounter counter;
      OptimizerAccess::step(rule, model, steps.grads[2], steps.rows[2], &two, &state);
      EXPECT_EQ(counter.count(), 0);
      EXPECT_EQ(state.steps, 2);
    }
  }
}

TEST(NonFiniteUpdates, NoAllocationsOnAFailedPreviewOrAfter) {
  CountingPool two(2);
  for (const Config& c : unclipped_configs()) {
    const Steps steps = large_steps(large_model(), {300, 450, 200}, true);
    vjit::Model model = large_model();
    std::unique_ptr<vjit::Optimizer> opt = make_optimizer(c);
    vjit::OptimizerState state;
    OptimizerAccess::step(*opt, model, steps.grads[0], steps.rows[0], &two, &state);
    Grads bad = steps.grads[1];
    plant_overflow(c, state, bad, 2, 3);
    int64_t allocations = 0;
    {
      AllocationCounter counter;
      EXPECT_THROW(OptimizerAccess::step(*opt, model, bad, steps.rows[1], &two, &state), vjit::UserError);
      allocations = counter.count();  // the exception and its message only
    }
    EXPECT_LE(allocations, 8) << c.name;
    if (!c.adam) state.slots[2][0][3] = 0.0f;
    AllocationCounter counter;
    OptimizerAccess::step(*opt, model, steps.grads[2], steps.rows[2], &two, &state);
    EXPECT_EQ(counter.count(), 0) << c.name;
  }
}

// Through the Engine: a train_step whose update overflows throws and leaves
// the model as it was, so infer gives the result it gave before the step.
// A frozen parameter and a constant tensor through an Engine: the executor
// matches the reference, and training never moves either.
TEST(Frozen, EngineTrainingLeavesFrozenParametersAndConstantsAlone) {
  vjit::Model model(3);
  auto W = model.add("W", vjit::Shape::mat(2, 2), vjit::Init::Uniform, 0.5f);
  auto F = model.add("F", vjit::Shape::mat(2, 2), vjit::Init::Uniform, 0.5f);
  model.freeze(F);
  vjit::Program program(model);
  program.add_type("leaf", [&](vjit::Builder& f) {
    auto x = f.pull(2);
    auto shift = f.constant(vjit::Shape::vec(2), std::vector<float>{0.25f, -1.5f});
    auto y = f.add(f.add(f.matmul(W, x), f.matmul(F, x)), shift);
    f.add_loss(f.sum(f.mul(y, y)));
    f.push(y);
  });
  ASSERT_EQ(model.size(), 3);
  EXPECT_EQ(model.param(2).name, "leaf.constant0");
  EXPECT_TRUE(model.param(2).frozen);
  // ∂F computes no gradient for either.
  for (const vjit::ir::Node& n : program.backward(0).nodes)
    if (n.op == vjit::ir::Op::ParamGrad) {
      EXPECT_EQ(n.param, W.id);
    }
  vjit::GraphBatch batch;
  for (int s = 0; s < 3; ++s) {
    vjit::Sample sample;
    sample.add_vertex(0);
    sample.vertices[0].features = {1.0f + float(s), -2.0f};
    batch.samples.push_back(sample);
  }
  vjit::Engine engine(program);
  const vjit::Evaluation<float> reference = vjit::reference_evaluate(program, batch);
  const vjit::Evaluation<float> executed = engine.infer(batch);
  ASSERT_EQ(executed.pushes.values().size(), reference.pushes.values().size());
  for (size_t k = 0; k < reference.pushes.values().size(); ++k)
    EXPECT_NEAR(executed.pushes.values()[k], reference.pushes.values()[k], 1e-5) << k;
  // y = W x + F x + (0.25, -1.5) for the first sample, x = (1, -2).
  const auto& f = model.param(F).value;
  const auto& w = model.param(W).value;
  EXPECT_NEAR(executed.pushes.values()[0], (w[0] + f[0]) - 2 * (w[1] + f[1]) + 0.25f, 1e-5);
  const auto before = values(model);
  for (int kind = 0; kind < 3; ++kind) {
    std::unique_ptr<vjit::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<vjit::SGD>(0.01f);
    if (kind == 1) opt = std::make_unique<vjit::Adam>(0.01f);
    if (kind == 2) opt = std::make_unique<vjit::AdaGrad>(0.01f);
    engine.train_step(batch, *opt);
  }
  EXPECT_NE(model.param(W).value, before[0]);
  EXPECT_EQ(model.param(F).value, before[1]);
  EXPECT_EQ(model.param(2).value, before[2]);
}

TEST(Frozen, BadConstantsAreUserErrorsAndLeaveTheModelAlone) {
  vjit::Model model(3);
  vjit::Program program(model);
  const std::string wrong_size = vjit::test_util::user_error_of([&] {
    program.add_type("leaf", [&](vjit::Builder& f) {
      auto a = f.constant(vjit::Shape::vec(2), std::vector<float>{1.0f, 2.0f});  // fine: added, then undone
      auto b = f.constant(vjit::Shape::vec(3), std::vector<float>{1.0f});
      f.push(f.add(f.add(f.pull(2), a), f.slice(f.add(f.pull(2), a), 0, 2)));
      (void)b;
    });
  });
  expect_contains(wrong_size, {"vertex type 'leaf'", "constant", "needs 3 values, got 1"});
  EXPECT_EQ(model.size(), 0);
  EXPECT_EQ(program.num_types(), 0);
  vjit::Model const_model(3);
  vjit::Builder builder(std::as_const(const_model), "t");
  expect_contains(vjit::test_util::user_error_of([&] { builder.constant(vjit::Shape::vec(1), std::vector<float>{1.0f}); }),
                  {"constant", "const"});
}

TEST(NonFiniteUpdates, AnEngineStepThatOverflowsChangesNothing) {
  vjit::Model model(3);
  auto W = model.add("W", vjit::Shape::mat(2, 2), vjit::Init::Uniform, 0.5f);
  vjit::Program program(model);
  program.add_type("leaf", [&](vjit::Builder& f) {
    auto y = f.matmul(W, f.pull(2));
    f.add_loss(f.sum(f.mul(y, y)));
    f.push(y);
  });
  vjit::GraphBatch batch;
  for (int s = 0; s < 3; ++s) {
    vjit::Sample sample;
    sample.add_vertex(0);
    sample.vertices[0].features = {1.0f + float(s), -2.0f};
    batch.samples.push_back(sample);
  }
  vjit::Options options = vjit::Options::defaults();
  options.threads = 2;
  vjit::Engine engine(program, options);
  const std::vector<float> before = engine.infer(batch).pushes.values();
  const std::vector<std::vector<float>> weights = values(model);
  vjit::SGD huge(1e38f);  // gradients of a few units move the weights by ~1e38·g: −inf or inf
  const std::string message = vjit::test_util::user_error_of([&] { engine.train_step(batch, huge); });
  expect_contains(message, {"step 1", "parameter 'W' at [", "non-finite", "nothing was changed"});
  EXPECT_EQ(huge.steps(), 0);
  for (size_t p = 0; p < weights.size(); ++p) EXPECT_TRUE(same_bits(model.param(int(p)).value, weights[p]));
  const vjit::Evaluation<float> after = engine.infer(batch);
  EXPECT_TRUE(same_bits(after.pushes.values(), before));
  // The engine goes on: a sane step trains.
  vjit::SGD sane(0.01f);
  const double loss = engine.train_step(batch, sane);
  EXPECT_GT(engine.train_step(batch, sane), 0.0);
  EXPECT_LT(engine.forward(batch, vjit::RunOptions{}), loss);
  EXPECT_EQ(sane.steps(), 2);
}

}  // namespace
