#include "vjit/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "vjit/error.h"
#include "vjit/model.h"
#include "vjit/program.h"
#include "vjit/train.h"

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

TEST(SparseRows, AnEmbeddingTableUpdatesOnlyTheRowsWithAGradient) {
  using namespace vjit;
  for (int use_adam = 0; use_adam < 2; ++use_adam) {
    Model model(3);
    Param table = model.add("table", Shape::mat(4, 3), Init::Uniform, 0.5f);
    model.param(table).sparse_rows = true;
    std::vector<float> before = model.param(table).value;
    std::vector<std::vector<float>> grads{std::vector<float>(12, 0.0f)};
    grads[0][4] = 0.5f;  // row 1 only
    std::unique_ptr<Optimizer> opt;
    if (use_adam) opt = std::make_unique<Adam>(0.1f, 0.9f, 0.999f, 1e-8f, 0.01f);
    else opt = std::make_unique<SGD>(0.1f, 0.9f, 0.01f);
    opt->step(model, grads);
    const std::vector<float>& after = model.param(table).value;
    for (int k = 0; k < 12; ++k) {
      if (k / 3 == 1) EXPECT_NE(after[size_t(k)], before[size_t(k)]) << "row 1 changes, element " << k;
      else EXPECT_EQ(after[size_t(k)], before[size_t(k)]) << "untouched rows stay, element " << k;
    }
  }
}

TEST(SparseRows, ProgramMarksTablesReadByPullEmbedding) {
  using namespace vjit;
  Model model(1);
  Param table = model.add("table", Shape::mat(5, 2));
  Param w = model.add("w", Shape::mat(2, 2));
  Program program(model);
  program.add_type("leaf", [&](Builder& b) { b.scatter(b.matmul(w, b.pull_embedding(table))); });
  EXPECT_TRUE(model.param(table).sparse_rows);
  EXPECT_FALSE(model.param(w).sparse_rows);
}

}  // namespace
