// Which children-block values may live in child row space (ir/child_rows.h):
// those whose padding rows change no result, decided for F and ∂F together;
// and the engine running them there (VJIT_CHILD_ROWS) against the reference.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "ir/child_rows.h"
#include "ir/ops.h"
#include "jit/pipeline.h"
#include "tests/engine_check.h"
#include "tests/gradcheck.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

constexpr int kWidth = 4;
constexpr int kMaxChildren = 3;

// A program whose "node" type applies `body` to its [kMaxChildren, kWidth]
// block; the analysis of that type's F and ∂F.
struct Analysed {
  Model model{1};
  Param w = model.add("W", Shape::mat(kWidth, kWidth));
  Param b = model.add("b", Shape::vec(kWidth));
  Param per_row = model.add("per_row", Shape::mat(kMaxChildren, kWidth));
  Program program{model};
  int node = -1;
  ir::ChildRowValues values;

  explicit Analysed(const std::function<void(Builder&, Value block, Analysed&)>& body) {
    program.add_type("leaf", [&](Builder& bl) { bl.scatter(bl.tanh(bl.pull(kWidth))); });
    node = program.add_type("node", [&](Builder& bl) { body(bl, bl.gather_all(kMaxChildren, Shape::vec(kWidth)), *this); });
    values = ir::child_row_values(program.forward(node), &program.backward(node));
  }

  // Whether F's gather_all (the block itself) lives in child row space.
  bool block_in_child_rows() const {
    const ir::Function& f = program.forward(node);
    for (ir::ValueId id = 0; id < f.size(); ++id)
      if (f[id].op == ir::Op::GatherAll) return values.forward[size_t(id)];
    ADD_FAILURE() << "no gather_all";
    return false;
  }
};

void loss_of(Builder& b, Value vector) { b.add_loss(b.sum(b.mul(vector, vector))); }

TEST(ChildRows, PaddingTimesZeroIsChildRows) {
  // sum_rows(σ(block W + b) ⊙ block): the σ rows of the padding meet the block's zeros.
  Analysed a([](Builder& b, Value block, Analysed& p) {
    Value f = b.sigmoid(b.add(b.matmul(block, p.w), p.b));
    loss_of(b, b.sum_rows(b.mul(f, block)));
  });
  EXPECT_TRUE(a.block_in_child_rows());
  EXPECT_TRUE(a.values.any());
}

TEST(ChildRows, ASumOfSigmoidsCountsThePaddingRows) {
  Analysed a([](Builder& b, Value block, Analysed&) { loss_of(b, b.sum_rows(b.sigmoid(block))); });
  EXPECT_FALSE(a.block_in_child_rows());  // each padding row adds σ(0) = 0.5
  EXPECT_FALSE(a.values.any());
}

TEST(ChildRows, ZeroKeepingOpsKeepThePaddingZero) {
  Analysed a([](Builder& b, Value block, Analysed& p) {
    Value t = b.tanh(b.scale(b.matmul(b.slice_cols(b.relu(block), 0, kWidth), p.w), 2.0));
    loss_of(b, b.sum_rows(t));
  });
  EXPECT_TRUE(a.block_in_child_rows());
}

TEST(ChildRows, ABiasOverTheBlockMakesThePaddingNonZero) {
  Analysed a([](Builder& b, Value block, Analysed& p) { loss_of(b, b.sum_rows(b.tanh(b.add(block, p.b)))); });
  EXPECT_FALSE(a.block_in_child_rows());
}

TEST(ChildRows, TheMeanReadsTheActualChildren) {
  Analysed mean([](Builder& b, Value block, Analysed&) { loss_of(b, b.mean_children(b.tanh(block))); });
  EXPECT_TRUE(mean.block_in_child_rows());
  // The max over the children and a per-vertex scalar broadcast over the rows stay padded.
  Analysed max([](Builder& b, Value block, Analysed&) { loss_of(b, b.max_children(b.tanh(block))); });
  EXPECT_FALSE(max.block_in_child_rows());
  Analysed scaled([](Builder& b, Value block, Analysed&) {
    loss_of(b, b.sum_rows(b.mul(block, b.child_count())));
  });
  EXPECT_FALSE(scaled.block_in_child_rows());
}

TEST(ChildRows, ReadingTheBlockAsAWholeMatrixKeepsItPadded) {
  const std::vector<std::function<void(Builder&, Value, Analysed&)>> whole = {
      [](Builder& b, Value block, Analysed&) { b.push(block); },
      [](Builder& b, Value block, Analysed&) { loss_of(b, b.sum_rows(b.transpose(block))); },
      [](Builder& b, Value block, Analysed&) { loss_of(b, b.reshape(block, Shape::vec(kMaxChildren * kWidth))); },
      [](Builder& b, Value block, Analysed& p) { loss_of(b, b.sum_rows(b.mul(block, p.per_row))); },
  };
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_FALSE(Analysed(whole[i]).block_in_child_rows()) << "case " << i;
}

// One group decides for all its values: a padded reader anywhere in it
// (here the push of a value made row by row from the block) pads the block.
TEST(ChildRows, ARowGroupIsLaidOutAsAWhole) {
  Analysed a([](Builder& b, Value block, Analysed& p) {
    Value t = b.tanh(b.matmul(block, p.w));
    loss_of(b, b.sum_rows(t));
    b.push(t);
  });
  EXPECT_FALSE(a.block_in_child_rows());
}

// The Child-Sum Tree-LSTM: every block value of F and of ∂F is in child row
// space, ∂F's gradient blocks included (their padding rows are not zero, but
// the gradient into the children reads the actual children's rows only).
TEST(ChildRows, TheChildSumTreeLstmIsInChildRowsForwardAndBackward) {
  models::Config config = testing::small_config(4);
  config.declared_children = 20;
  models::Bundle bundle = models::make_model("child_sum_tree_lstm", config);
  const Program& program = *bundle.program;
  int blocks = 0;
  for (int t = 0; t < program.num_types(); ++t) {
    const ir::Function& f = program.forward(t);
    const ir::Function& df = program.backward(t);
    ir::ChildRowValues values = ir::child_row_values(f, &df);
    ASSERT_EQ(values.forward.size(), size_t(f.size()));
    ASSERT_EQ(values.backward.size(), size_t(df.size()));
    for (const auto& [function, flags] : {std::pair{&f, &values.forward}, std::pair{&df, &values.backward}})
      for (ir::ValueId id = 0; id < function->size(); ++id) {
        const ir::Node& n = (*function)[id];
        const bool block = n.shape.rank == 2 && !n.uniform && n.shape.dims[0] == 20;
        blocks += block;
        EXPECT_EQ((*flags)[size_t(id)], block) << ir::to_string(*function, id);
      }
  }
  EXPECT_GT(blocks, 8);
}

// Lowering records the analysis of the lowered F and ∂F in each type's plans:
// the same answer as the analysis of those functions, present only for a type
// with a value in child row space.
TEST(ChildRows, LoweringRecordsTheAnalysisInThePlan) {
  for (bool sigmoid_sum : {false, true}) {
    Analysed a([&](Builder& b, Value block, Analysed& p) {
      if (sigmoid_sum) return loss_of(b, b.sum_rows(b.sigmoid(block)));
      loss_of(b, b.sum_rows(b.mul(b.tanh(b.matmul(block, p.w)), block)));
    });
    runtime::ExecPlan plan = jit::lower_program(a.program, Options::defaults());
    const runtime::TypePlan& node = plan.types[size_t(a.node)];
    EXPECT_TRUE(plan.types[0].forward.child_rows.empty());  // the leaf type has no block
    if (sigmoid_sum) {
      EXPECT_TRUE(node.forward.child_rows.empty());
      EXPECT_TRUE(node.backward.child_rows.empty());
      continue;
    }
    ir::ChildRowValues expected = ir::child_row_values(*node.forward.function, node.backward.function);
    EXPECT_TRUE(expected.any());
    EXPECT_EQ(node.forward.child_rows, expected.forward);
    EXPECT_EQ(node.backward.child_rows, expected.backward);
  }
}

// A Child-Sum cell over a [K, 2w] block of [h; c] rows, where a node may
// have 0 to `children` children, nodes and leaves mixed, in trees several
// levels deep (so tasks differ in their children), declared with K =
// `declared` ≥ `children`.
struct MixedFanIn {
  static constexpr int w = 4;
  Model model{3};
  Param u_f = model.add("U_f", Shape::mat(w, w), Init::Uniform, 0.6f);
  Param b_f = model.add("b_f", Shape::vec(w), Init::Uniform, 0.6f);
  Param u = model.add("U", Shape::mat(w, w), Init::Uniform, 0.6f);
  Param leaf_c = model.add("leaf_c", Shape::vec(w), Init::Uniform, 0.6f);
  Program program{model};
  GraphBatch batch;

  MixedFanIn(int children, int declared, int samples = 6) {
    int leaf = program.add_type("leaf", [&](Builder& b) {
      Value h = b.tanh(b.pull(w));
      b.scatter(b.concat({h, b.mul(h, leaf_c)}));
    });
    int node = program.add_type("node", [&](Builder& b) {
      Value block = b.gather_all(declared, Shape::vec(2 * w));
      Value h = b.slice_cols(block, 0, w), c = b.slice_cols(block, w, w);
      Value f = b.sigmoid(b.add(b.matmul(h, u_f), b_f));
      Value forget = b.sum_rows(b.mul(f, c));
      Value h_new = b.tanh(b.add(b.matmul(u, b.sum_rows(h)), forget));
      b.add_loss(b.sum(b.mul(h_new, h_new)));
      b.push(h_new);
      b.scatter(b.concat({h_new, b.add(forget, h_new)}));
    });
    std::mt19937 rng(11);
    for (int s = 0; s < samples; ++s) {
      Sample sample;
      std::vector<int> open;  // vertices without a parent yet
      for (int v = 0; v < 4 + s; ++v) {
        int id = sample.add_vertex(leaf);
        for (int i = 0; i < w; ++i) sample.vertices[size_t(id)].features.push_back(float(int(rng() % 17) - 8) / 8.0f);
        open.push_back(id);
      }
      // Nodes take 0..children of the open vertices, the last one all that are left.
      for (int round = 0; open.size() > 1 || round == 0; ++round) {
        const int take = open.size() == 1 ? 1 : std::min<int>(int(open.size()), int(rng() % unsigned(children + 1)));
        std::vector<int> kids(open.end() - take, open.end());
        open.resize(open.size() - size_t(take));
        open.insert(open.begin(), sample.add_vertex(node, kids));
      }
      batch.samples.push_back(sample);
    }
  }
};

TEST(ChildRowsEngine, MatchesTheReferenceUnderEveryPolicyAndPlannerTrainingAndInferring) {
  MixedFanIn m(3, 5);
  std::set<size_t> fan_ins;  // of the nodes: every count from 0 to 3 occurs
  for (const Sample& sample : m.batch.samples)
    for (const Vertex& v : sample.vertices)
      if (v.type == 1) fan_ins.insert(v.children.size());
  EXPECT_EQ(fan_ins, (std::set<size_t>{0, 1, 2, 3}));
  testing::GradcheckResult r = testing::gradcheck(m.program, m.batch, 8);
  EXPECT_GT(r.checked, 0);
  EXPECT_LT(r.max_relative_error, 1e-6) << r.worst;
  for (const char* policy : {"depth", "agenda", "frontier", "ratio", "fsm"})
    for (const char* memplan : {"copy", "padded", "pqtree"})
      for (bool fusion : {true, false}) {
        Options options = Options::defaults();
        apply_flag(options, "policy", policy);
        apply_flag(options, "memplan", memplan);
        options.tuning.fusion = fusion;
        const std::string what = std::string(policy) + " " + memplan + (fusion ? "" : " fusion=off");
        Engine engine(m.program, options);
        testing::expect_matches_reference(engine, m.program, m.batch, 1e-4, what);
        Engine inferring(m.program, options);
        testing::expect_forward_only_matches_reference(inferring, m.program, m.batch, 1e-4, what + " infer");
      }
}

// A vertex pays for the children it has: with child rows, declaring three
// times the children the data has changes neither the results nor the GEMMs
// (calls and multiply-adds); padded, the block products' work grows with K.
TEST(ChildRowsEngine, DeclaringMoreChildrenCostsNoMoreGemmWork) {
  auto gemms = [](int declared, const char* child_rows) {
    MixedFanIn m(3, declared);
    Options options = Options::defaults();
    apply_flag(options, "child_rows", child_rows);
    Engine engine(m.program, options);
    testing::expect_matches_reference(engine, m.program, m.batch, 1e-4,
                                      std::string("declared ") + std::to_string(declared) + " child_rows=" + child_rows);
    return std::pair{engine.stats().gemm_calls, engine.stats().gemm_flops};
  };
  const auto [calls, flops] = gemms(3, "on");
  EXPECT_EQ(gemms(9, "on"), std::pair(calls, flops));
  EXPECT_GT(gemms(9, "off").second, 1.5 * gemms(3, "off").second);
  EXPECT_GT(gemms(3, "off").second, flops);  // even at K = the data's most, padding rows are work
}

}  // namespace
}  // namespace vjit
