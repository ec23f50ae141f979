// The ops over a vertex's [K, d] children block (gather_all): column slices,
// transpose, per-row products with a weight, mean and max over the actual
// children and the child count. Each against finite differences, the engine
// against the reference, the reference's semantics on hand-computed values,
// the batching of block · W into GEMMs over all the task's rows, and the
// Builder's errors.
#include <gtest/gtest.h>

#include <functional>
#include <span>

#include "tests/children_block_cases.h"
#include "tests/engine_check.h"
#include "tests/gradcheck.h"
#include "tests/user_error.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using testing::block_cases;
using testing::BlockCase;
using testing::BlockProgram;
using testing::kMaxChildren;

class BlockOpGradient : public ::testing::TestWithParam<BlockCase> {};

TEST_P(BlockOpGradient, MatchesFiniteDifferences) {
  BlockProgram p(GetParam().body);
  testing::GradcheckResult r = testing::gradcheck(p.program, p.batch, 1000);
  EXPECT_GT(r.checked, 0);
  EXPECT_LT(r.max_relative_error, 1e-6) << GetParam().name << ": worst " << r.worst;
}

// Padded rows make the block's rows unpacked (the GEMMs per block row), the
// default plan packs them (one GEMM); fusion off runs every op alone.
TEST_P(BlockOpGradient, EngineMatchesTheReference) {
  BlockProgram p(GetParam().body);
  for (const char* memplan : {"copy", "padded"})
    for (bool fusion : {true, false}) {
      Options options = Options::defaults();
      apply_flag(options, "memplan", memplan);
      options.tuning.fusion = fusion;
      Engine engine(p.program, options);
      testing::expect_matches_reference(engine, p.program, p.batch, 1e-4,
                                        GetParam().name + " memplan=" + memplan + (fusion ? "" : " fusion=off"));
    }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, BlockOpGradient, ::testing::ValuesIn(block_cases()),
                         [](const ::testing::TestParamInfo<BlockCase>& info) { return info.param.name; });

// Two children with their own leaf types (and parameters), so the gradient
// each receives is visible: the max's gradient goes to the arg-max row, the
// first on a tie; padding rows are not children (the max of negative rows is
// negative, not the padding's 0).
struct TwoChildren {
  Model model{1};
  Param p0 = model.add("P0", Shape::vec(2), Init::Zeros);
  Param p1 = model.add("P1", Shape::vec(2), Init::Zeros);
  Program program{model};
  GraphBatch batch;

  TwoChildren(std::vector<float> first, std::vector<float> second, const std::function<Value(Builder&, Value)>& body) {
    int leaf0 = program.add_type("leaf0", [&](Builder& b) { b.scatter(b.add(b.pull(2), p0)); });
    int leaf1 = program.add_type("leaf1", [&](Builder& b) { b.scatter(b.add(b.pull(2), p1)); });
    int node = program.add_type("node", [&](Builder& b) {
      Value out = body(b, b.gather_all(3, Shape::vec(2)));
      b.push(out);
      b.add_loss(b.sum(out));
    });
    Sample sample;
    int a = sample.add_vertex(leaf0), c = sample.add_vertex(leaf1);
    sample.vertices[size_t(a)].features = std::move(first);
    sample.vertices[size_t(c)].features = std::move(second);
    sample.add_vertex(node, {a, c});
    batch.samples.push_back(sample);
  }

  // The node's pushed value.
  static std::vector<double> pushed(const Evaluation<double>& e) {
    std::span<const double> v = e.pushes.at(0, 2, 0);
    return {v.begin(), v.end()};
  }

  Evaluation<double> reference() const {
    RunOptions run;
    return reference_evaluate(program, parameter_values<double>(model), batch, run);
  }
};

TEST(BlockOpSemantics, MaxIsOverTheActualChildrenAndItsGradientGoesToTheFirstArgMax) {
  TwoChildren t({1.0f, 0.0f}, {1.0f, 2.0f}, [](Builder& b, Value block) { return b.max_children(block); });
  Evaluation<double> ref = t.reference();
  EXPECT_EQ(TwoChildren::pushed(ref), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(ref.param_grads[0], (std::vector<double>{1.0, 0.0}));  // column 0 ties: the first child
  EXPECT_EQ(ref.param_grads[1], (std::vector<double>{0.0, 1.0}));
  Engine engine(t.program, Options::defaults());
  testing::expect_matches_reference(engine, t.program, t.batch, 1e-6, "max_children ties");

  TwoChildren negative({-3.0f, -1.0f}, {-2.0f, -5.0f}, [](Builder& b, Value block) { return b.max_children(block); });
  EXPECT_EQ(TwoChildren::pushed(negative.reference()), (std::vector<double>{-2.0, -1.0}));
}

TEST(BlockOpSemantics, MeanAndCountAreOverTheActualChildren) {
  TwoChildren mean({-3.0f, -1.0f}, {-2.0f, -5.0f}, [](Builder& b, Value block) { return b.mean_children(block); });
  Evaluation<double> ref = mean.reference();
  EXPECT_EQ(TwoChildren::pushed(ref), (std::vector<double>{-2.5, -3.0}));
  EXPECT_EQ(ref.param_grads[0], (std::vector<double>{0.5, 0.5}));
  TwoChildren count({0.0f, 0.0f}, {0.0f, 0.0f}, [](Builder& b, Value block) {
    return b.add(b.sum_rows(block), b.child_count());
  });
  EXPECT_EQ(TwoChildren::pushed(count.reference()), (std::vector<double>{2.0, 2.0}));
  TwoChildren cols({1.0f, 2.0f}, {3.0f, 4.0f}, [](Builder& b, Value block) {
    return b.reshape(b.transpose(b.slice_cols(block, 1, 1)), Shape::vec(3));
  });
  EXPECT_EQ(TwoChildren::pushed(cols.reference()), (std::vector<double>{2.0, 4.0, 0.0}));
}

// block · W over every vertex of a task is batched GEMMs over all their rows:
// one when the rows are packed, one per block row otherwise, never one per
// vertex.
TEST(BlockOpBatching, BlockTimesWeightIsBatchedGemmsNotOnePerVertex) {
  Model model(2);
  const int width = 16, vertices = 32;
  Param w = model.add("W", Shape::mat(width, width));
  Program program(model);
  int leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.tanh(b.pull(width))); });
  int node = program.add_type("node", [&](Builder& b) {
    Value block = b.gather_all(kMaxChildren, Shape::vec(width));
    b.add_loss(b.sum(b.sum_rows(b.tanh(b.matmul(block, w)))));
  });
  GraphBatch batch;
  for (int s = 0; s < vertices; ++s) {
    Sample sample;
    std::vector<int> leaves;
    for (int k = 0; k <= s % kMaxChildren; ++k) {
      leaves.push_back(sample.add_vertex(leaf));
      sample.vertices.back().features.assign(size_t(width), 0.01f * float(s + k));
    }
    sample.add_vertex(node, leaves);
    batch.samples.push_back(sample);
  }
  for (const char* memplan : {"copy", "padded"}) {
    Options options = Options::defaults();
    apply_flag(options, "memplan", memplan);
    Engine engine(program, options);
    engine.forward(batch);
    EngineStats forward = engine.stats();
    EXPECT_GE(forward.gemm_calls, 1) << memplan;
    EXPECT_LE(forward.gemm_calls, kMaxChildren) << memplan << ": " << vertices << " vertices in one task";
    engine.backward();
    EngineStats both = engine.stats();
    // ∂block = G Wᵀ and ∂W = Σ blockᵀ G: each batched the same way.
    EXPECT_LE(both.gemm_calls - forward.gemm_calls, 2 * kMaxChildren) << memplan;
    testing::expect_matches_reference(engine, program, batch, 1e-4, std::string("batched block product ") + memplan);
  }
}

TEST(BlockOpErrors, TheBuilderNamesTheOpAndTheShapes) {
  Model model(1);
  Program program(model);
  auto error_of = [&](const std::function<void(Builder&)>& body) {
    static int n = 0;
    return test_util::user_error_of([&] { program.add_type("t" + std::to_string(n++), body); });
  };
  std::string msg = error_of([](Builder& b) { b.slice_cols(b.gather_all(2, Shape::vec(4)), 3, 2); });
  EXPECT_NE(msg.find("slice_cols: columns [3, 5) are out of range for [2,4]"), std::string::npos) << msg;
  msg = error_of([](Builder& b) { b.slice_cols(b.pull(4), 0, 2); });
  EXPECT_NE(msg.find("slice_cols: needs a matrix, got [4]"), std::string::npos) << msg;
  msg = error_of([](Builder& b) { b.transpose(b.pull(4)); });
  EXPECT_NE(msg.find("transpose: needs a matrix"), std::string::npos) << msg;
  msg = error_of([](Builder& b) { b.child_count(); });
  EXPECT_NE(msg.find("child_count: the vertex has no variadic children"), std::string::npos) << msg;
  msg = error_of([](Builder& b) { b.max_children(b.gather_sum(Shape::vec(4))); });
  EXPECT_NE(msg.find("max_children: needs a [K, d] children block, got [4]"), std::string::npos) << msg;
  msg = error_of([](Builder& b) { b.mean_children(b.reshape(b.pull(4), Shape::mat(2, 2))); });
  EXPECT_NE(msg.find("mean_children: the vertex has no variadic children"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vjit
