// Per-program parameter layout (issue 11): the Model's one block of parameter
// memory (ParamValues, Model::arrange), the run planner (layout/param_runs.h)
// against brute force, and engines that read merged products' stacked weights
// in place (VJIT_PARAM_LAYOUT) with results equal to the reference and to the
// copying executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/model_layout.h"
#include "layout/param_runs.h"
#include "jit/engine_access.h"
#include "tests/engine_check.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using test_util::user_error_of;

std::vector<std::vector<float>> values_of(const Model& model) {
  std::vector<std::vector<float>> out;
  for (int p = 0; p < model.size(); ++p) out.push_back(model.param(p).value);
  return out;
}

// --- the Model's block ---

TEST(ParamValues, AssigningCopiesValuesInAndRefusesAnotherCount) {
  Model model;
  Param w = model.add("W", Shape::mat(2, 3));
  ParamValues& values = model.param(w).value;
  values = std::vector<float>{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(values.front(), 1.0f);
  EXPECT_EQ(values.back(), 6.0f);
  const std::string message = user_error_of([&] { values = std::vector<float>(5, 0.0f); });
  EXPECT_NE(message.find("holding 6 values"), std::string::npos) << message;
  EXPECT_NE(message.find("assigned 5"), std::string::npos) << message;
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4, 5, 6})) << "a refused assignment changed the values";
}

TEST(ModelBlock, ParametersKeepTheirValuesAsTheBlockGrows) {
  Model model(7);
  std::vector<std::vector<float>> first;
  for (int p = 0; p < 40; ++p) {
    model.add("p" + std::to_string(p), Shape::mat(p % 5 + 1, 7));
    first.push_back(model.param(p).value);
  }
  EXPECT_EQ(values_of(model), first);
  for (int p = 0; p < model.size(); ++p) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(model.param(p).value.data()) % 64,
              reinterpret_cast<uintptr_t>(model.param(0).value.data()) % 64)
        << "parameter " << p << " does not start at a multiple of 16 floats";
    if (p > 0) {
      EXPECT_FALSE(ir::ModelLayout::consecutive(model, std::vector<int>{p - 1, p}))
          << "7 floats a row: never a multiple of 16";
    }
  }
  // The same seed gives the same values whatever else was added before.
  Model other(7);
  other.add("p0", Shape::mat(1, 7));
  EXPECT_EQ(other.param(0).value, model.param(0).value);
}

TEST(ModelBlock, ArrangeLaysRunsOutConsecutivelyAndKeepsEveryValue) {
  Model model(3);
  for (int p = 0; p < 6; ++p) model.add("p" + std::to_string(p), Shape::mat(3, 5));
  const std::vector<std::vector<float>> before = values_of(model);
  ir::ModelLayout::arrange(model, {{4, 1}, {0, 5, 2}});
  EXPECT_EQ(values_of(model), before);
  EXPECT_TRUE(ir::ModelLayout::consecutive(model, std::vector<int>{4, 1}));
  EXPECT_TRUE(ir::ModelLayout::consecutive(model, std::vector<int>{0, 5, 2}));
  EXPECT_FALSE(ir::ModelLayout::consecutive(model, std::vector<int>{1, 4})) << "a run is consecutive in its order only";
  // A copy has a block of its own, laid out the same.
  Model copy = model;
  EXPECT_TRUE(ir::ModelLayout::consecutive(copy, std::vector<int>{0, 5, 2}));
  copy.param(0).value[0] = 42.0f;
  EXPECT_EQ(model.param(0).value, before[0]) << "a copy shares memory with its original";
  // Adding and truncating after arranging keep the rest.
  model.add("late", Shape::vec(9));
  EXPECT_EQ(model.param(6).value.size(), 9u);
  ir::ModelLayout::truncate(model, 6);
  EXPECT_EQ(values_of(model), before);
  EXPECT_TRUE(ir::ModelLayout::consecutive(model, std::vector<int>{4, 1}));
}

TEST(ModelBlock, ArrangeRefusesBadRunsAndChangesNothing) {
  Model model;
  for (int p = 0; p < 3; ++p) model.add("p" + std::to_string(p), Shape::vec(4));
  const std::vector<std::vector<float>> before = values_of(model);
  const float* first = model.param(0).value.data();
  EXPECT_NE(user_error_of([&] { ir::ModelLayout::arrange(model, {{0, 1}, {1, 2}}); }).find("'p1'"), std::string::npos);
  EXPECT_NE(user_error_of([&] { ir::ModelLayout::arrange(model, {{2, 2}}); }).find("'p2'"), std::string::npos);
  EXPECT_NE(user_error_of([&] { ir::ModelLayout::arrange(model, {{0, 3}}); }).find("parameter 3"), std::string::npos);
  EXPECT_EQ(values_of(model), before);
  EXPECT_EQ(model.param(0).value.data(), first) << "a refused arrange moved the block";
}

// --- the run planner ---

// Whether some order of n parameters holds every sequence consecutively, in order.
bool satisfiable(int n, const std::vector<std::vector<int>>& sequences) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  do {
    std::vector<int> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pos[size_t(order[size_t(i)])] = i;
    bool all = true;
    for (const std::vector<int>& s : sequences)
      for (size_t i = 0; all && i + 1 < s.size(); ++i) all = pos[size_t(s[i + 1])] == pos[size_t(s[i])] + 1;
    if (all) return true;
  } while (std::next_permutation(order.begin(), order.end()));
  return false;
}

TEST(ParamRuns, KeepsEverySequenceThatFitsThoseBeforeItAndLaysItOutInOrder) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 2 + int(rng() % 5);
    std::vector<std::vector<int>> sequences(1 + rng() % 5);
    for (std::vector<int>& s : sequences) {
      std::vector<int> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(2 + rng() % size_t(n - 1));
      s = all;
    }
    const layout::ParamRuns runs = layout::plan_param_runs(n, sequences);
    ASSERT_EQ(runs.kept.size(), sequences.size());
    std::vector<int> position(static_cast<size_t>(n), -1), run_of(static_cast<size_t>(n), -1);
    for (size_t r = 0; r < runs.runs.size(); ++r) {
      EXPECT_GE(runs.runs[r].size(), 2u);
      for (size_t i = 0; i < runs.runs[r].size(); ++i) {
        const int p = runs.runs[r][i];
        ASSERT_EQ(run_of[size_t(p)], -1) << "parameter " << p << " in two runs";
        run_of[size_t(p)] = int(r);
        position[size_t(p)] = int(i);
      }
    }
    std::vector<std::vector<int>> kept;
    for (size_t s = 0; s < sequences.size(); ++s) {
      const std::vector<int>& seq = sequences[s];
      std::vector<std::vector<int>> with = kept;
      with.push_back(seq);
      EXPECT_EQ(runs.kept[s], satisfiable(n, with)) << "trial " << trial << " sequence " << s;
      if (!runs.kept[s]) continue;
      kept.push_back(seq);
      for (size_t i = 0; i + 1 < seq.size(); ++i) {
        EXPECT_EQ(run_of[size_t(seq[i])], run_of[size_t(seq[i + 1])]);
        EXPECT_EQ(position[size_t(seq[i + 1])], position[size_t(seq[i])] + 1) << "trial " << trial;
      }
    }
  }
}

TEST(ParamRuns, MalformedSequencesAreNotKept) {
  const std::vector<std::vector<int>> sequences = {{0}, {1, 1}, {2, 9}, {-1, 0}, {0, 1}};
  const layout::ParamRuns runs = layout::plan_param_runs(3, sequences);
  EXPECT_EQ(runs.kept, (std::vector<bool>{false, false, false, false, true}));
  EXPECT_EQ(runs.runs, (std::vector<std::vector<int>>{{0, 1}}));
}

// --- engines ---

// W1·x and W2·x merge into one product over [W1; W2] (and, in ∂F, its
// transpose for the child's gradient). W1 and W2 are added apart, so only a
// laid-out Model holds them as one block.
struct StackedProgram {
  StackedProgram() {
    w1 = model.add("W1", Shape::mat(3, 4));
    model.add("between", Shape::vec(5));
    w2 = model.add("W2", Shape::mat(5, 4));
    leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.tanh(b.pull(4))); });
    node = program.add_type("node", [&](Builder& b) {
      Value x = b.gather(0, Shape::vec(4));
      Value y = b.concat({b.matmul(w1, x), b.matmul(w2, x)});
      b.add_loss(b.sum(b.mul(y, y)));
    });
  }
  GraphBatch batch(int samples) const {
    GraphBatch out;
    for (int i = 0; i < samples; ++i) {
      Sample sample;
      sample.name = "sample " + std::to_string(i);
      const int child = sample.add_vertex(leaf);
      sample.vertices[size_t(child)].features = {0.1f * float(i), -0.2f, 0.3f, 0.4f};
      sample.vertices[size_t(sample.add_vertex(node))].children = {child};
      out.samples.push_back(sample);
    }
    return out;
  }
  Model model;
  Param w1, w2;
  Program program{model};
  int leaf = -1, node = -1;
};

TEST(ParamLayout, StackedWeightsAreReadInPlaceNotCopied) {
  const int64_t stacked = (3 + 5) * 4 * int64_t(sizeof(float));
  for (bool laid_out : {false, true}) {
    StackedProgram p;
    const std::vector<std::vector<float>> before = values_of(p.model);
    Options options = Options::defaults();
    options.tuning.param_layout = vjit::to_lever(laid_out);
    Engine engine(p.program, options);
    const std::string what = laid_out ? "laid out" : "copied";
    EXPECT_EQ(values_of(p.model), before) << what;
    EXPECT_EQ(ir::ModelLayout::consecutive(p.model, std::vector<int>{p.w1.id, p.w2.id}), laid_out) << what;
    EXPECT_EQ(engine.compile_info().stacked_weights, 1) << what;
    EXPECT_EQ(engine.compile_info().stacked_in_place, laid_out ? 1 : 0) << what;
    const GraphBatch batch = p.batch(3);
    testing::expect_matches_reference(engine, p.program, batch, 1e-5, what);
    // Once per pass, F and ∂F, where copied.
    EXPECT_EQ(jit::internal_stats(engine).stacked_weight_bytes, laid_out ? 0 : 2 * stacked) << what;
    // New values (as an optimizer step writes them) are what the next pass reads.
    for (float& v : p.model.param(p.w2).value) v = 0.5f - v;
    testing::expect_matches_reference(engine, p.program, batch, 1e-5, what + ", W2 changed");
  }
}

// A pointer into a parameter's values goes stale when the values move:
// Model::value_moves() says when, as the block grows and when an engine lays
// it out for its stacked weights. It changes exactly when the values moved.
TEST(ModelBlock, ValueMovesCountsEveryMoveOfTheValues) {
  Model model(5);
  model.add("p0", Shape::mat(3, 7));
  for (int p = 1; p < 60; ++p) {
    const float* held = model.param(0).value.data();
    const uint64_t moves = model.value_moves();
    model.add("p" + std::to_string(p), Shape::mat(p % 4 + 1, 7));
    EXPECT_EQ(model.param(0).value.data() != held, model.value_moves() != moves) << "adding parameter " << p;
  }
  EXPECT_GT(model.value_moves(), 0u) << "60 parameters never outgrew the first block";
  Model other;
  other.add("q", Shape::vec(3));
  const uint64_t before = other.value_moves();
  other = model;
  EXPECT_NE(other.value_moves(), before) << "assigning a Model replaces the block";
}

TEST(ParamLayout, BuildingAnEngineThatMovesTheValuesSaysSo) {
  for (bool laid_out : {false, true}) {
    StackedProgram p;
    const float* held = p.model.param(p.w2).value.data();
    const uint64_t moves = p.model.value_moves();
    Options options = Options::defaults();
    options.tuning.param_layout = vjit::to_lever(laid_out);
    Engine engine(p.program, options);
    const std::string what = laid_out ? "laid out" : "copied";
    const bool moved = p.model.param(p.w2).value.data() != held;
    EXPECT_EQ(moved, laid_out) << what << ": this program's two weights are stacked, not yet consecutive";
    EXPECT_EQ(p.model.value_moves() != moves, moved) << what;
    // A second engine finds the block laid out already: nothing moves.
    const uint64_t after_first = p.model.value_moves();
    const float* now = p.model.param(p.w2).value.data();
    Engine second(p.program, options);
    EXPECT_EQ(p.model.value_moves(), after_first) << what;
    EXPECT_EQ(p.model.param(p.w2).value.data(), now) << what;
  }
}

// The block moved from under a built engine (another layout): the engine
// notices, copies the weights again, and stays equal to the reference.
TEST(ParamLayout, AnEngineCopiesWhereTheModelNoLongerHoldsTheBlock) {
  StackedProgram p;
  Engine engine(p.program, Options::defaults());
  ASSERT_TRUE(ir::ModelLayout::consecutive(p.model, std::vector<int>{p.w1.id, p.w2.id}));
  ir::ModelLayout::arrange(p.model, {{p.w2.id, p.w1.id}});
  const GraphBatch batch = p.batch(2);
  testing::expect_matches_reference(engine, p.program, batch, 1e-5, "W2 before W1");
  EXPECT_GT(jit::internal_stats(engine).stacked_weight_bytes, 0);
}

// Two types stack the same weights in opposite orders: one order is laid out
// and read in place, the other copied; both equal the reference.
TEST(ParamLayout, ConflictingStacksKeepOneAndCopyTheOther) {
  StackedProgram p;
  const int reversed = p.program.add_type("reversed", [&](Builder& b) {
    Value x = b.gather(0, Shape::vec(4));
    Value y = b.concat({b.matmul(p.w2, x), b.matmul(p.w1, x)});
    b.add_loss(b.sum(b.mul(y, y)));
  });
  Engine engine(p.program, Options::defaults());
  EXPECT_EQ(engine.compile_info().stacked_weights, 2);
  EXPECT_EQ(engine.compile_info().stacked_in_place, 1);
  GraphBatch batch = p.batch(3);
  for (Sample& sample : batch.samples) sample.vertices[size_t(sample.add_vertex(reversed))].children = {0};
  testing::expect_matches_reference(engine, p.program, batch, 1e-5, "both orders");
  EXPECT_EQ(jit::internal_stats(engine).stacked_weight_bytes, 2 * (3 + 5) * 4 * int64_t(sizeof(float)));
}

// Training with the weights read in place takes the same steps, bit for bit,
// as training with them copied (the same values reach the same GEMMs), on an
// example model whose LSTM gates merge.
TEST(ParamLayout, TrainingInPlaceEqualsTrainingWithCopiesBitForBit) {
  std::vector<std::vector<std::vector<float>>> trained;
  for (bool laid_out : {false, true}) {
    models::Bundle bundle = models::make_model("var_lstm_gates", testing::small_config(16));
    Options options = Options::defaults();
    options.tuning.param_layout = vjit::to_lever(laid_out);
    Engine engine(*bundle.program, options);
    EXPECT_EQ(engine.compile_info().stacked_in_place, laid_out ? engine.compile_info().stacked_weights : 0);
    EXPECT_GT(engine.compile_info().stacked_weights, 0);
    Adam adam(0.01);
    for (int step = 0; step < 3; ++step) {
      GraphBatch batch = models::make_batch(bundle.train, {4 * step, 4 * step + 1, 4 * step + 2, 4 * step + 3});
      engine.train_step(batch, adam);
    }
    EXPECT_EQ(jit::internal_stats(engine).stacked_weight_bytes > 0, !laid_out);
    trained.push_back(values_of(bundle.program->model()));
  }
  EXPECT_EQ(trained[0], trained[1]);
}

// A parameter's shape is fixed by Model::add: its values, every plan and the
// reference interpreter are sized by it, so it can be read but not assigned.
TEST(ParamData, ShapeIsReadOnlyAfterAdd) {
  Model model;
  Param w = model.add("W", Shape::mat(2, 3));
  EXPECT_FALSE((std::is_assignable_v<decltype((model.param(w).shape)), Shape>))
      << "ParamData::shape can be assigned after Model::add";
  EXPECT_EQ(model.param(w).shape, Shape::mat(2, 3));
  Model copy = model;  // copies keep the shapes
  EXPECT_EQ(copy.param(w).shape, Shape::mat(2, 3));
}

}  // namespace
}  // namespace vjit
