// Bitwise determinism across thread counts (issue 12, part 5): the same seed and
// the same data give bitwise-identical parameters and losses after N training
// steps on the CPU, and the same pushed values from inference after them,
// whatever VJIT_THREADS is, for every GEMM back end built here, with the
// default options (Options::deterministic on).
//
// The models are sized so that every source of thread-count dependence is
// exercised: GEMMs large enough to be split over the pool (hidden 64 gives
// task products of ~1-4 MFLOP and weight gradients of ~10 MFLOP), elementwise
// kernels split into row blocks, per-vertex products accumulated into a weight
// gradient over row blocks (MV-RNN), embedding gradients (Tree-LSTM, Var-LSTM)
// and dropout.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/gemm.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

constexpr int kSteps = 6;
constexpr int kBatch = 24;
const int kThreadCounts[] = {1, 2, 3, 4};

// What N steps of training leave behind, and what inference on the first
// batch then pushes (as one more "parameter" to compare).
struct Trace {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
};

models::Config config_for(const std::string& model) {
  models::Config config;
  config.hidden = model == "mv_rnn" ? 24 : 64;  // MV-RNN carries an H x H matrix per vertex
  config.embed = model == "lattice_lstm" ? 40 : 0;
  config.dropout = 0.2;
  config.train_samples = kSteps * kBatch;
  config.test_samples = 0;
  config.seed = 7;
  return config;
}

// Trains a fresh copy of `model` (same seed, same data) for kSteps steps of Adam.
Trace train(const std::string& model, Options options) {
  models::Bundle bundle = models::make_model(model, config_for(model));
  Engine engine(*bundle.program, options);
  Adam adam(0.01f);
  Trace trace;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int> indices;
    for (int i = 0; i < kBatch; ++i) indices.push_back(step * kBatch + i);
    trace.losses.push_back(engine.train_step(models::make_batch(bundle.train, indices), adam));
  }
  for (int p = 0; p < bundle.model->size(); ++p) trace.params.push_back(bundle.model->param(p).value);
  std::vector<int> first(kBatch);
  for (int i = 0; i < kBatch; ++i) first[size_t(i)] = i;
  const Evaluation<float> inferred = engine.infer(models::make_batch(bundle.train, first));
  trace.params.push_back(inferred.pushes.values());
  trace.losses.push_back(inferred.objective);
  return trace;
}

// Every loss and every parameter of `got` equals `want` bit for bit; reports
// the first difference of each kind.
void expect_bitwise_equal(const Trace& got, const Trace& want, const std::string& model, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_EQ(std::bit_cast<uint64_t>(got.losses[s]), std::bit_cast<uint64_t>(want.losses[s]))
        << what << ": loss " << s << " (the last: inference's objective) is " << got.losses[s] << ", want "
        << want.losses[s];
  const models::Bundle names = models::make_model(model, config_for(model));
  auto name = [&](size_t p) {
    return int(p) < names.model->size() ? names.model->param(int(p)).name : std::string("inference's pushed values");
  };
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  int differing = 0;
  for (size_t p = 0; p < want.params.size(); ++p) {
    ASSERT_EQ(got.params[p].size(), want.params[p].size()) << what;
    for (size_t i = 0; i < want.params[p].size(); ++i) {
      if (std::bit_cast<uint32_t>(got.params[p][i]) == std::bit_cast<uint32_t>(want.params[p][i])) continue;
      if (differing++ == 0)
        ADD_FAILURE() << what << ": " << name(p) << "[" << i << "] is "
                      << got.params[p][i] << ", want " << want.params[p][i];
    }
  }
  EXPECT_EQ(differing, 0) << what << ": " << differing << " parameter values differ";
}

struct Case {
  std::string model;
  runtime::GemmBackend backend;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.model + "_" + runtime::gemm_backend_name(info.param.backend);
}

class Determinism : public ::testing::TestWithParam<Case> {
 protected:
  // Options for `threads` threads on the case's back end; skips (saying why)
  // when the back end cannot be used here.
  Options options(int threads) {
    Options o = Options::defaults();
    o.threads = threads;
    apply_flag(o, "gemm", runtime::gemm_backend_name(GetParam().backend));
    return o;
  }
  // Why the case's back end cannot be used here ("" when it can).
  static std::string unavailable() {
    const std::string why = runtime::gemm_backend_unavailable_reason(GetParam().backend);
    return why.empty() ? why
                       : std::string("skipped: GEMM back end ") + runtime::gemm_backend_name(GetParam().backend) +
                             " unavailable here: " + why;
  }
};

TEST_P(Determinism, SameParametersAndLossesForEveryThreadCount) {
  if (const std::string why = unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string& model = GetParam().model;
  ASSERT_TRUE(is_on(Options::defaults().resolve().deterministic)) << "determinism is the default";
  const Trace one = train(model, options(1));
  for (double loss : one.losses) ASSERT_TRUE(std::isfinite(loss)) << model;
  for (int threads : kThreadCounts) {
    if (threads == 1) continue;
    expect_bitwise_equal(train(model, options(threads)), one, model,
                         model + " " + runtime::gemm_backend_name(GetParam().backend) + " threads=" +
                             std::to_string(threads) + " against threads=1");
  }
  // The line scripts/reliability_table.sh reads: what was compared, when all of it matched.
  if (!HasFailure()) {
    std::string counts;
    for (int threads : kThreadCounts) counts += (counts.empty() ? "" : ",") + std::to_string(threads);
    std::cout << "[ determinism ] " << model << " " << runtime::gemm_backend_name(GetParam().backend) << ": threads "
              << counts << " bitwise equal\n";
  }
}

// The streaming thread may not use the pool: its GEMMs run the same fixed
// blocks one after the other, so streaming changes no bit either.
TEST(DeterminismStreaming, SameResultWithTheEagerStepsOnASecondThread) {
  Options plain = Options::defaults();
  plain.threads = 1;
  const Trace want = train("tree_lstm", plain);
  for (int threads : {1, 3}) {
    Options streaming = Options::defaults();
    streaming.threads = threads;
    streaming.tuning.streaming = true;
    expect_bitwise_equal(train("tree_lstm", streaming), want, "tree_lstm",
                         "tree_lstm streaming threads=" + std::to_string(threads) + " against threads=1");
  }
}

// VJIT_DETERMINISTIC=off (the thread-count-dependent blocks) computes the same
// objective and gradients up to float rounding.
TEST(DeterminismOff, SameObjectiveAndGradientsUpToRounding) {
  for (const char* model : {"tree_lstm", "mv_rnn"}) {
    models::Bundle bundle = models::make_model(model, config_for(model));
    std::vector<int> indices;
    for (int i = 0; i < kBatch; ++i) indices.push_back(i);
    const GraphBatch batch = models::make_batch(bundle.train, indices);
    Options on = Options::defaults(), off = Options::defaults();
    on.threads = 1;
    off.threads = 3;
    off.deterministic = vjit::Lever::Off;
    Engine engine_on(*bundle.program, on), engine_off(*bundle.program, off);
    RunOptions run;
    run.seed = 3;
    const double objective_on = engine_on.forward(batch, run);
    engine_on.backward();
    const double objective_off = engine_off.forward(batch, run);
    engine_off.backward();
    EXPECT_NEAR(objective_off, objective_on, 1e-5 * std::abs(objective_on)) << model;
    ASSERT_EQ(engine_off.gradients().size(), engine_on.gradients().size()) << model;
    for (size_t p = 0; p < engine_on.gradients().size(); ++p) {
      const std::vector<float>& want = engine_on.gradients()[p];
      const std::vector<float>& got = engine_off.gradients()[p];
      ASSERT_EQ(got.size(), want.size()) << model;
      double scale = 1e-6, worst = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::abs(double(want[i])));
        worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
      }
      EXPECT_LE(worst / scale, 1e-4) << model << ": gradient of " << bundle.model->param(int(p)).name;
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* model : {"tree_lstm", "var_lstm", "lattice_lstm", "mv_rnn"})
    for (runtime::GemmBackend backend : runtime::kGemmBackends) out.push_back({model, backend});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, Determinism, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace vjit
