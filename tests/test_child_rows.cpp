// Which children-block values may live in child row space (ir/child_rows.h):
// those whose padding rows change no result, decided for F and ∂F together.
#include <gtest/gtest.h>

#include <functional>

#include "ir/child_rows.h"
#include "ir/ops.h"
#include "jit/pipeline.h"
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

TEST(ChildRows, MaxMeanAndCountReadTheActualChildren) {
  Analysed max([](Builder& b, Value block, Analysed& p) {
    loss_of(b, b.max_children(b.sigmoid(b.add(block, p.b))));
  });
  EXPECT_TRUE(max.block_in_child_rows());
  Analysed mean([](Builder& b, Value block, Analysed&) { loss_of(b, b.mean_children(b.tanh(block))); });
  EXPECT_TRUE(mean.block_in_child_rows());
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
  models::Config config;
  config.hidden = 8;
  config.train_samples = 4;
  config.test_samples = 0;
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

}  // namespace
}  // namespace vjit
