// The Builder's shape checks and their messages, the op table, the verifier,
// the printer, DCE and CSE, matmul merging and the slice simplifications, the
// eager/core/lazy classification and fusion grouping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "ir/autodiff.h"
#include "ir/classify.h"
#include "ir/flops.h"
#include "ir/fusion.h"
#include "ir/merge_matmuls.h"
#include "ir/op_semantics.h"
#include "ir/passes.h"
#include "ir/row_op.h"
#include "tests/user_error.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

// The message of the UserError that building `body` as vertex type "cell" throws.
std::string build_error(Model& model, const std::function<void(Builder&)>& body) {
  Program program(model);
  return test_util::user_error_of([&] { program.add_type("cell", body); });
}

TEST(BuilderErrors, MatmulShapeMismatchNamesTypeOpAndShapes) {
  Model model;
  Param w = model.add("W", Shape::mat(4, 3));
  std::string msg = build_error(model, [&](Builder& b) { b.scatter(b.matmul(w, b.pull(5))); });
  EXPECT_CONTAINS(msg, "vertex type 'cell'");
  EXPECT_CONTAINS(msg, "matmul");
  EXPECT_CONTAINS(msg, "[4,3] · [5]");
}

TEST(BuilderErrors, ElementwiseShapesThatDoNotBroadcast) {
  Model model;
  std::string msg = build_error(model, [&](Builder& b) { b.scatter(b.add(b.pull(3), b.constant(Shape::vec(4), 1.0))); });
  EXPECT_CONTAINS(msg, "vertex type 'cell', op Add: shapes [3] and [4] do not broadcast");
}

TEST(BuilderErrors, OpsOnParametersOnlyAreRejected) {
  Model model;
  Param p = model.add("p", Shape::vec(3));
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.scatter(b.add(p, p)); }), "both operands are parameters");
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.scatter(b.tanh(b.param(p))); }), "operand is a parameter");
}

TEST(BuilderErrors, GatherSlotsMustAgreeAndBeContiguous) {
  Model model;
  EXPECT_CONTAINS(build_error(model,
                              [&](Builder& b) {
                                b.gather(0, Shape::vec(3));
                                b.scatter(b.gather(0, Shape::vec(4)));
                              }),
                  "slot 0 gathered as [4] and as [3]");
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.scatter(b.gather(1, Shape::vec(3))); }),
                  "gathers slot 1 but never slot 0");
}

TEST(BuilderErrors, SliceConcatLossAndScatterChecks) {
  Model model;
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.scatter(b.slice(b.pull(4), 2, 3)); }),
                  "op slice: [2, 5) is out of range for [4]");
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.add_loss(b.pull(2)); }), "loss must be a scalar, got [2]");
  EXPECT_CONTAINS(build_error(model,
                              [&](Builder& b) {
                                b.scatter(b.pull(2));
                                b.scatter(b.pull(2));
                              }),
                  "a vertex function scatters once");
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.softmax_cross_entropy(b.pull(3), b.label(4)); }),
                  "logits [3] do not match 4 classes");
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.pull(3); }), "computes nothing");
  EXPECT_CONTAINS(build_error(model, [&](Builder& b) { b.scatter(b.dropout(b.pull(3), 1.5)); }),
                  "rate must be in [0, 1)");
}

TEST(Program, DuplicateTypeNamesAndUnknownNames) {
  Model model;
  Program program(model);
  program.add_type("a", [](Builder& b) { b.scatter(b.pull(1)); });
  EXPECT_THROW(program.add_type("a", [](Builder& b) { b.scatter(b.pull(1)); }), UserError);
  EXPECT_THROW(program.type_index("nope"), UserError);
  model.add("W", Shape::vec(2));
  EXPECT_THROW(model.add("W", Shape::vec(2)), UserError);
}

TEST(Printer, ShowsOpsOperandsAttributesAndShapes) {
  Model model;
  Param w = model.add("W", Shape::mat(2, 3));
  Program program(model);
  int t = program.add_type("cell", [&](Builder& b) { b.scatter(b.tanh(b.matmul(w, b.pull(3)))); });
  std::string text = ir::to_string(program.forward(t));
  EXPECT_CONTAINS(text, "function cell {");
  EXPECT_CONTAINS(text, "param() param=0 : [2,3] uniform");
  EXPECT_CONTAINS(text, "matmul(%");
  EXPECT_CONTAINS(text, "tanh(%");
  EXPECT_CONTAINS(text, "scatter(%");
}

TEST(Passes, DeadCodeIsRemovedAndCommonSubexpressionsMerged) {
  ir::Function f;
  f.name = "f";
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(2)));
  ir::ValueId a = f.add(ir::Node::make(ir::Op::Tanh, Shape::vec(2), {x}));
  ir::ValueId b = f.add(ir::Node::make(ir::Op::Tanh, Shape::vec(2), {x}));  // same as a
  f.add(ir::Node::make(ir::Op::Exp, Shape::vec(2), {x}));                  // dead
  ir::ValueId sum = f.add(ir::Node::make(ir::Op::Add, Shape::vec(2), {a, b}));
  f.add(ir::Node::make(ir::Op::Scatter, Shape::scalar(), {sum}));
  ir::verify(f);
  ir::Function g = ir::simplify(f);
  ir::verify(g);
  ASSERT_EQ(g.size(), 4) << ir::to_string(g);
  EXPECT_EQ(g[1].op, ir::Op::Tanh);
  EXPECT_EQ(g[2].args[0], 1);
  EXPECT_EQ(g[2].args[1], 1);
}

TEST(Verifier, RejectsOperandsThatDoNotPrecedeTheirUse) {
  ir::Function f;
  f.name = "bad";
  f.add(ir::Node::make(ir::Op::Tanh, Shape::vec(2), {1}));
  f.add(ir::Node::make(ir::Op::Pull, Shape::vec(2)));
  EXPECT_THROW(ir::verify(f), InternalError);
}

TEST(Autodiff, GatherGradientIsAScatterAddIntoTheChildSlot) {
  Model model;
  Param w = model.add("W", Shape::mat(3, 6));
  Program program(model);
  program.add_type("leaf", [&](Builder& b) { b.scatter(b.pull(3)); });
  int node = program.add_type("node", [&](Builder& b) {
    Value h = b.tanh(b.matmul(w, b.concat({b.gather(0, Shape::vec(3)), b.gather(1, Shape::vec(3))})));
    b.add_loss(b.sum(h));
    b.scatter(h);
  });
  std::string text = ir::to_string(program.backward(node));
  EXPECT_CONTAINS(text, "gathergrad(%");
  EXPECT_CONTAINS(text, "slot=0");
  EXPECT_CONTAINS(text, "slot=1");
  EXPECT_CONTAINS(text, "scattergrad()");
  EXPECT_CONTAINS(text, "paramgrad(%");
  EXPECT_CONTAINS(text, "outer(%");
}

// --- matmul merging ---

int count_ops(const ir::Function& f, ir::Op op) {
  int n = 0;
  for (const ir::Node& node : f.nodes) n += node.op == op;
  return n;
}

// An LSTM-like cell written one weight per gate: W_k·x for k = i, f, o, u, plus
// V·y, the only product of its operand, which stays as it is.
struct GateCell {
  Model model{1};
  std::vector<Param> w;
  Param v;
  Program program{model};
  int type = -1;
  GateCell() {
    for (const char* gate : {"W_i", "W_f", "W_o", "W_u"}) w.push_back(model.add(gate, Shape::mat(3, 5)));
    v = model.add("V", Shape::mat(3, 4));
    type = program.add_type("cell", [&](Builder& b) {
      Value x = b.gather_sum(Shape::vec(5));
      Value h = b.matmul(v, b.pull(4));
      for (Param p : w) h = b.mul(h, b.sigmoid(b.matmul(p, x)));
      b.add_loss(b.sum(h));
      b.scatter(b.concat({h, b.slice(x, 0, 2)}));
    });
  }
};

TEST(MergeMatmuls, ProductsOfOneOperandBecomeOneOverStackedWeights) {
  GateCell cell;
  const ir::Function& f = cell.program.forward(cell.type);
  ASSERT_EQ(count_ops(f, ir::Op::MatMul), 5) << ir::to_string(f);
  ir::Function merged = ir::simplify(ir::merge_matmuls(f));
  ir::verify(merged);
  EXPECT_EQ(count_ops(merged, ir::Op::MatMul), 2) << ir::to_string(merged);
  ir::ValueId stacked = -1;
  for (ir::ValueId id = 0; id < merged.size(); ++id)
    if (merged[id].op == ir::Op::Concat && merged[id].uniform) stacked = id;
  ASSERT_GE(stacked, 0) << ir::to_string(merged);
  EXPECT_EQ(merged[stacked].shape, Shape::mat(12, 5));
  ASSERT_EQ(merged[stacked].args.size(), 4u);
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(merged[merged[stacked].args[k]].param, cell.w[k].id) << k;
  std::vector<int> starts;
  for (const ir::Node& n : merged.nodes) {
    if (n.op == ir::Op::MatMul && merged[n.args[0]].op == ir::Op::Param) {
      EXPECT_EQ(merged[n.args[0]].param, cell.v.id) << "V·y is the only product of its operand";
    }
    if (n.op == ir::Op::Slice && merged[n.args[0]].op == ir::Op::MatMul) starts.push_back(n.start);
  }
  EXPECT_EQ(starts, (std::vector<int>{0, 3, 6, 9}));
}

TEST(MergeMatmuls, StackedGradientSplitsBackIntoOneFoldedGemmPerParameter) {
  GateCell cell;
  ir::Function forward = ir::simplify(ir::merge_matmuls(cell.program.forward(cell.type)));
  ir::Function raw = ir::differentiate(forward);
  ir::verify(raw);
  ir::Function backward = ir::simplify(ir::simplify_slices(raw));
  ir::verify(backward);
  std::vector<bool> folded = ir::fold_outer_products(backward);
  std::vector<int> weights_seen;
  for (const ir::Node& n : raw.nodes)
    if (n.op == ir::Op::ParamGrad && n.param != cell.v.id) {
      EXPECT_EQ(raw[n.args[0]].op, ir::Op::Slice) << "without simplify_slices each part reads a slice";
    }
  for (const ir::Node& n : backward.nodes) {
    if (n.op != ir::Op::ParamGrad) continue;
    weights_seen.push_back(n.param);
    EXPECT_EQ(backward[n.args[0]].op, ir::Op::Outer) << ir::to_string(backward);
    EXPECT_TRUE(folded[size_t(n.args[0])]) << "param " << n.param << ": " << ir::to_string(backward);
  }
  std::sort(weights_seen.begin(), weights_seen.end());
  EXPECT_EQ(weights_seen, (std::vector<int>{0, 1, 2, 3, 4}));
  // The input gradient is one GEMM by the stacked weights, transposed.
  int stacked_products = 0;
  for (const ir::Node& n : backward.nodes)
    if (n.op == ir::Op::MatMul && backward[n.args[0]].uniform && backward[n.args[0]].op == ir::Op::Concat) {
      ++stacked_products;
      EXPECT_TRUE(n.trans_a);
      EXPECT_EQ(backward[n.args[1]].op, ir::Op::Concat) << "the gate gradients, concatenated";
    }
  EXPECT_EQ(stacked_products, 1) << ir::to_string(backward);
}

TEST(Verifier, UniformOnlyForParametersAndTheirConcatenation) {
  ir::Function f;
  f.name = "f";
  ir::Node p = ir::Node::make(ir::Op::Param, Shape::mat(2, 3));
  p.param = 0;
  p.uniform = true;
  ir::ValueId a = f.add(p);
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::mat(2, 3)));
  ir::Node stacked = ir::Node::make(ir::Op::Concat, Shape::mat(4, 3), {a, a});
  stacked.uniform = true;
  f.add(stacked);
  EXPECT_NO_THROW(ir::verify(f));
  ir::Node mixed = ir::Node::make(ir::Op::Concat, Shape::mat(4, 3), {a, x});
  mixed.uniform = true;
  f.add(mixed);
  EXPECT_THROW(ir::verify(f), InternalError);
}

// --- slice simplification ---

TEST(SimplifySlices, AdjacentPadsBecomeAConcatSlicesOfConcatsAndOuters) {
  ir::Function f;
  f.name = "f";
  ir::ValueId a = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(2)));
  ir::ValueId b = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(2)));
  ir::Node pa = ir::Node::make(ir::Op::Pad, Shape::vec(4), {a});
  ir::Node pb = ir::Node::make(ir::Op::Pad, Shape::vec(4), {b});
  pb.start = 2;
  ir::ValueId sum = f.add(ir::Node::make(ir::Op::Add, Shape::vec(4), {f.add(pb), f.add(pa)}));
  f.add(ir::Node::make(ir::Op::Push, Shape::scalar(), {sum}));
  ir::ValueId cat = f.add(ir::Node::make(ir::Op::Concat, Shape::vec(4), {a, b}));
  ir::Node second = ir::Node::make(ir::Op::Slice, Shape::vec(2), {cat});
  second.start = 2;
  f.add(ir::Node::make(ir::Op::Push, Shape::scalar(), {f.add(second)}));
  ir::ValueId outer = f.add(ir::Node::make(ir::Op::Outer, Shape::mat(4, 2), {cat, a}));
  ir::Node rows = ir::Node::make(ir::Op::Slice, Shape::mat(2, 2), {outer});
  rows.start = 4;  // rows 2..3
  f.add(ir::Node::make(ir::Op::Push, Shape::scalar(), {f.add(rows)}));
  ir::Node unaligned = ir::Node::make(ir::Op::Slice, Shape::vec(3), {outer});
  unaligned.start = 1;
  f.add(ir::Node::make(ir::Op::Push, Shape::scalar(), {f.add(unaligned)}));
  ir::verify(f);

  ir::Function g = ir::simplify(ir::simplify_slices(f));
  ir::verify(g);
  std::vector<const ir::Node*> pushed;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::Push) pushed.push_back(&g[n.args[0]]);
  ASSERT_EQ(pushed.size(), 4u) << ir::to_string(g);
  // pad(a) + pad(b) → concat(a, b), whatever the order of the operands.
  EXPECT_EQ(pushed[0]->op, ir::Op::Concat) << ir::to_string(g);
  EXPECT_EQ(g[pushed[0]->args[0]].op, ir::Op::Pull);
  EXPECT_EQ(count_ops(g, ir::Op::Pad), 0) << ir::to_string(g);
  // slice(concat(a, b)) at b → b.
  EXPECT_EQ(pushed[1]->op, ir::Op::Pull);
  // slice of rows 2..3 of cat·aᵀ → outer(slice(cat) start=2, a), which is outer(b, a).
  ASSERT_EQ(pushed[2]->op, ir::Op::Outer) << ir::to_string(g);
  EXPECT_EQ(g[pushed[2]->args[0]].op, ir::Op::Pull) << ir::to_string(g);
  EXPECT_EQ(pushed[2]->shape, Shape::mat(2, 2));
  // Not whole rows: left as it was.
  EXPECT_EQ(pushed[3]->op, ir::Op::Slice);
}

// --- gathers of slices ---

TEST(GatherSlices, SlicesOfAGatherBecomeGathersAndTheirGradientsJoinAgain) {
  ir::Function f;
  f.name = "f";
  ir::Node whole = ir::Node::make(ir::Op::Gather, Shape::vec(6));
  whole.child_slot = 1;
  ir::ValueId state = f.add(whole);
  ir::Node h = ir::Node::make(ir::Op::Slice, Shape::vec(2), {state});
  ir::Node c = ir::Node::make(ir::Op::Slice, Shape::mat(2, 2), {state});
  c.start = 2;
  ir::ValueId hv = f.add(h), cv = f.add(c);
  // Slot 0 is read whole as well as sliced: it stays one gather.
  ir::ValueId other = f.add(ir::Node::make(ir::Op::Gather, Shape::vec(4)));
  ir::ValueId other_part = f.add(ir::Node::make(ir::Op::Slice, Shape::vec(2), {other}));
  ir::ValueId sum = f.add(ir::Node::make(ir::Op::Add, Shape::vec(2), {hv, other_part}));
  ir::ValueId flat_c = f.add(ir::Node::make(ir::Op::Reshape, Shape::vec(4), {cv}));
  ir::ValueId both = f.add(ir::Node::make(ir::Op::Concat, Shape::vec(6), {sum, flat_c}));
  auto add_loss = [&](ir::ValueId x) {
    f.add(ir::Node::make(ir::Op::Loss, Shape::scalar(), {f.add(ir::Node::make(ir::Op::Sum, Shape::scalar(), {x}))}));
  };
  add_loss(both);
  add_loss(other);
  ir::verify(f);

  ir::Function g = ir::gather_slices(f);
  ir::verify(g);
  std::vector<std::pair<int, int>> gathers;  // (slot, start) of each gather
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::Gather) gathers.emplace_back(n.child_slot, n.start);
  std::sort(gathers.begin(), gathers.end());
  EXPECT_EQ(gathers, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {1, 2}})) << ir::to_string(g);
  EXPECT_EQ(count_ops(g, ir::Op::Slice), 1) << "the slice of the gather read whole stays\n" << ir::to_string(g);
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::Gather && n.child_slot == 1) {
      EXPECT_EQ(n.shape, n.start == 0 ? Shape::vec(2) : Shape::mat(2, 2)) << ir::to_string(g);
    }

  // The gradients of slot 1's two gathers follow one another: one GatherGrad
  // of their concatenation, as for the whole gather; slot 0's stays alone.
  ir::Function d = ir::join_gather_grads(ir::differentiate(g));
  ir::verify(d);
  std::vector<const ir::Node*> grads;
  for (const ir::Node& n : d.nodes)
    if (n.op == ir::Op::GatherGrad) grads.push_back(&n);
  ASSERT_EQ(grads.size(), 2u) << ir::to_string(d);
  for (const ir::Node* n : grads) {
    EXPECT_EQ(n->start, 0);
    EXPECT_EQ(d[n->args[0]].shape.numel(), n->child_slot == 1 ? 6 : 4) << ir::to_string(d);
    if (n->child_slot == 1) {
      EXPECT_EQ(d[n->args[0]].op, ir::Op::Concat) << ir::to_string(d);
    }
  }
}

TEST(GatherSlices, GradientsThatLeaveAGapStayApart) {
  ir::Function f;
  f.name = "f";
  ir::ValueId state = f.add(ir::Node::make(ir::Op::Gather, Shape::vec(6)));
  ir::Node first = ir::Node::make(ir::Op::Slice, Shape::vec(2), {state});
  ir::Node last = ir::Node::make(ir::Op::Slice, Shape::vec(2), {state});
  last.start = 4;
  ir::ValueId a = f.add(first), b = f.add(last);
  ir::ValueId product = f.add(ir::Node::make(ir::Op::Mul, Shape::vec(2), {a, b}));
  f.add(ir::Node::make(ir::Op::Loss, Shape::scalar(), {f.add(ir::Node::make(ir::Op::Sum, Shape::scalar(), {product}))}));
  ir::verify(f);
  ir::Function d = ir::join_gather_grads(ir::differentiate(ir::gather_slices(f)));
  ir::verify(d);
  std::vector<int> starts;
  for (const ir::Node& n : d.nodes)
    if (n.op == ir::Op::GatherGrad) starts.push_back(n.start);
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(starts, (std::vector<int>{0, 4})) << ir::to_string(d);
}

// --- a product whose rows the adds after it compute ---

// P = Wᵀ·B (uniform W, per-vertex B) read only as two blocks of whole rows,
// each plus an outer product: the adds take the outer products and compute
// their rows of P themselves (P folded). A third reader of P's rows, or a
// slice that cuts a row, leaves P a product of its own.
TEST(FoldBiasAdds, AProductReadAsWholeRowsByRankOneAddsIsFoldedIntoThem) {
  auto build = [](int second_start, bool third_reader) {
    ir::Function f;
    f.name = "f";
    ir::Node w = ir::Node::make(ir::Op::Param, Shape::mat(2, 4));
    w.uniform = true;
    ir::ValueId wv = f.add(w);
    ir::ValueId flat = f.add(ir::Node::make(ir::Op::Gather, Shape::vec(6)));
    ir::ValueId b = f.add(ir::Node::make(ir::Op::Reshape, Shape::mat(2, 3), {flat}));
    ir::Node product = ir::Node::make(ir::Op::MatMul, Shape::mat(4, 3), {wv, b});
    product.trans_a = true;
    ir::ValueId pv = f.add(product);
    ir::Node u = ir::Node::make(ir::Op::Gather, Shape::vec(2));
    u.child_slot = 1;
    ir::ValueId uv = f.add(u);
    ir::ValueId vv = f.add(ir::Node::make(ir::Op::Slice, Shape::vec(3), {flat}));
    for (int start : {0, second_start}) {
      ir::Node rows = ir::Node::make(ir::Op::Slice, Shape::mat(2, 3), {pv});
      rows.start = start;
      ir::ValueId rv = f.add(rows);
      ir::ValueId outer = f.add(ir::Node::make(ir::Op::Outer, Shape::mat(2, 3), {uv, vv}));
      ir::ValueId sum = f.add(ir::Node::make(ir::Op::Add, Shape::mat(2, 3), {rv, outer}));
      f.add(ir::Node::make(ir::Op::Loss, Shape::scalar(), {f.add(ir::Node::make(ir::Op::Sum, Shape::scalar(), {sum}))}));
      if (third_reader && start != 0)
        f.add(ir::Node::make(ir::Op::Loss, Shape::scalar(), {f.add(ir::Node::make(ir::Op::Sum, Shape::scalar(), {rv}))}));
    }
    ir::verify(f);
    return f;
  };
  auto product_folded = [](const ir::Function& f, bool block_products) {
    const size_t n = f.nodes.size();
    std::vector<bool> folded = ir::fold_bias_adds(f, std::vector<ir::Phase>(n, ir::Phase::Core),
                                                  std::vector<int>(n, -1), std::vector<bool>(n, false), block_products);
    int outers = 0;
    bool product = false;
    for (ir::ValueId id = 0; id < f.size(); ++id) {
      outers += folded[size_t(id)] && f[id].op == ir::Op::Outer;
      product = product || (folded[size_t(id)] && f[id].op == ir::Op::MatMul);
    }
    return std::pair{outers, product};
  };
  EXPECT_EQ(product_folded(build(6, false), true), std::pair(2, true));
  EXPECT_EQ(product_folded(build(6, false), false), std::pair(0, false)) << "only the CPU executor's adds";
  EXPECT_EQ(product_folded(build(6, true), true), std::pair(2, false)) << "a second reader of the rows";
  EXPECT_EQ(product_folded(build(5, false), true), std::pair(2, false)) << "a slice that cuts a row";
}

TEST(Classify, InputProjectionIsEagerRecurrenceIsCoreGradientsAreLazy) {
  Model model;
  Param w = model.add("W", Shape::mat(2, 3));
  Param u = model.add("U", Shape::mat(2, 2));
  Program program(model);
  int cell = program.add_type("cell", [&](Builder& b) {
    Value h = b.tanh(b.add(b.matmul(w, b.pull(3)), b.matmul(u, b.gather_sum(Shape::vec(2)))));
    b.add_loss(b.sum(h));
    b.scatter(h);
  });
  const ir::Function& f = program.forward(cell);
  std::vector<ir::Phase> phases = ir::classify_phases(f);
  for (ir::ValueId id = 0; id < f.size(); ++id) {
    const ir::Node& n = f[id];
    if (n.op == ir::Op::MatMul && f[n.args[1]].op == ir::Op::Pull) {
      EXPECT_EQ(phases[size_t(id)], ir::Phase::Eager);
    }
    if (n.op == ir::Op::Tanh) {
      EXPECT_EQ(phases[size_t(id)], ir::Phase::Core);
    }
    if (n.op == ir::Op::Loss) {
      EXPECT_EQ(phases[size_t(id)], ir::Phase::Lazy);
    }
  }
  const ir::Function& df = program.backward(cell);
  std::vector<ir::Phase> back = ir::classify_phases(df);
  for (ir::ValueId id = 0; id < df.size(); ++id) {
    if (df[id].op == ir::Op::ParamGrad) {
      EXPECT_EQ(back[size_t(id)], ir::Phase::Lazy);
    }
  }
  for (ir::Phase p : ir::classify_phases(f, false)) EXPECT_EQ(p, ir::Phase::Core);
}

TEST(Fusion, LstmGatesFormOneGroupWithSeveralOutputs) {
  Model model;
  Param u = model.add("U", Shape::mat(8, 2));
  Param bias = model.add("b", Shape::vec(8), Init::Zeros);
  Program program(model);
  int cell = program.add_type("cell", [&](Builder& b) {
    Value state = b.gather_sum(Shape::vec(4));
    Value h = b.slice(state, 0, 2), c = b.slice(state, 2, 2);
    Value gates = b.add(b.matmul(u, h), bias);
    Value i = b.sigmoid(b.slice(gates, 0, 2)), f = b.sigmoid(b.slice(gates, 2, 2));
    Value o = b.sigmoid(b.slice(gates, 4, 2)), g = b.tanh(b.slice(gates, 6, 2));
    Value c2 = b.add(b.mul(f, c), b.mul(i, g));
    Value h2 = b.mul(o, b.tanh(c2));
    b.scatter(b.concat({h2, c2}));
  });
  const ir::Function& f = program.forward(cell);
  std::vector<ir::FusionGroup> groups =
      ir::find_fusion_groups(f, ir::classify_phases(f), std::vector<bool>(f.nodes.size(), false));
  ASSERT_EQ(groups.size(), 1u) << ir::to_string(f, groups);
  EXPECT_GE(groups[0].nodes.size(), 9u);
  EXPECT_EQ(groups[0].outputs.size(), 2u) << "h and c leave the group";
  EXPECT_CONTAINS(ir::to_string(f, groups), "group 0:");
}

// The fusion groups of `f` with every node in the core phase and none kept for ∂F.
std::vector<ir::FusionGroup> fuse_as_core(const ir::Function& f) {
  return ir::find_fusion_groups(f, std::vector<ir::Phase>(f.nodes.size(), ir::Phase::Core),
                                std::vector<bool>(f.nodes.size(), false));
}

TEST(Fusion, NeverJoinsTwoNodesLinkedThroughAnOutsideNode) {
  // a = tanh(x); s = sum(a) (not fusable); b = a * s: a and b must not fuse,
  // or the group would need s, which needs the group.
  ir::Function f;
  f.name = "f";
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  ir::ValueId a = f.add(ir::Node::make(ir::Op::Tanh, Shape::vec(4), {x}));
  ir::ValueId s = f.add(ir::Node::make(ir::Op::Sum, Shape::scalar(), {a}));
  ir::ValueId b = f.add(ir::Node::make(ir::Op::Mul, Shape::vec(4), {a, s}));
  ir::ValueId c = f.add(ir::Node::make(ir::Op::Exp, Shape::vec(4), {b}));
  f.add(ir::Node::make(ir::Op::Scatter, Shape::scalar(), {c}));
  std::vector<ir::FusionGroup> groups = fuse_as_core(f);
  for (const ir::FusionGroup& g : groups) {
    bool has_a = std::find(g.nodes.begin(), g.nodes.end(), a) != g.nodes.end();
    bool has_b = std::find(g.nodes.begin(), g.nodes.end(), b) != g.nodes.end();
    EXPECT_FALSE(has_a && has_b) << ir::to_string(f, groups);
  }
  ASSERT_EQ(groups.size(), 1u) << "b and exp(b) still fuse";
}

// The group of `id`, or nullptr.
const ir::FusionGroup* group_of(const std::vector<ir::FusionGroup>& groups, ir::ValueId id) {
  for (const ir::FusionGroup& g : groups)
    if (std::find(g.nodes.begin(), g.nodes.end(), id) != g.nodes.end()) return &g;
  return nullptr;
}

TEST(Fusion, ALoneNodeJoinsAGroupThatReadsAllItsOperands) {
  // Group {a, t} reads x and y. lone = x - y has no fusable operand, but the
  // group loads both: it joins as one more output. other = x * z needs z,
  // which the group does not read: it stays alone.
  ir::Function f;
  f.name = "f";
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  ir::ValueId y = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  ir::ValueId z = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  ir::ValueId a = f.add(ir::Node::make(ir::Op::Mul, Shape::vec(4), {x, y}));
  ir::ValueId t = f.add(ir::Node::make(ir::Op::Tanh, Shape::vec(4), {a}));
  ir::ValueId lone = f.add(ir::Node::make(ir::Op::Sub, Shape::vec(4), {x, y}));
  ir::ValueId other = f.add(ir::Node::make(ir::Op::Mul, Shape::vec(4), {x, z}));
  ir::ValueId all = f.add(ir::Node::make(ir::Op::Concat, Shape::vec(12), {t, lone, other}));
  f.add(ir::Node::make(ir::Op::Scatter, Shape::scalar(), {all}));
  std::vector<ir::FusionGroup> groups = fuse_as_core(f);
  ASSERT_EQ(groups.size(), 1u) << ir::to_string(f, groups);
  EXPECT_EQ(groups[0].nodes, (std::vector<ir::ValueId>{a, t, lone})) << ir::to_string(f, groups);
  EXPECT_EQ(groups[0].outputs, (std::vector<ir::ValueId>{t, lone})) << ir::to_string(f, groups);
  EXPECT_EQ(group_of(groups, other), nullptr);
}

TEST(Fusion, ALoneNodeStaysAloneWhereJoiningWouldMakeACycle) {
  // The group {a, t} reads x and s = sum(lone): lone, though the group reads
  // its operand x, cannot join it (the group would need s, which needs lone).
  ir::Function f;
  f.name = "f";
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  ir::ValueId lone = f.add(ir::Node::make(ir::Op::Neg, Shape::vec(4), {x}));
  ir::ValueId s = f.add(ir::Node::make(ir::Op::Sum, Shape::scalar(), {lone}));
  ir::ValueId a = f.add(ir::Node::make(ir::Op::Mul, Shape::vec(4), {x, s}));
  ir::ValueId t = f.add(ir::Node::make(ir::Op::Tanh, Shape::vec(4), {a}));
  f.add(ir::Node::make(ir::Op::Scatter, Shape::scalar(), {t}));
  std::vector<ir::FusionGroup> groups = fuse_as_core(f);
  ASSERT_EQ(groups.size(), 1u) << ir::to_string(f, groups);
  EXPECT_EQ(groups[0].nodes, (std::vector<ir::ValueId>{a, t})) << ir::to_string(f, groups);
  EXPECT_EQ(group_of(groups, lone), nullptr);
}

// --- the op table ---

// Every op of the table, in enum order.
std::vector<ir::Op> all_ops() {
  return {
#define VJIT_X(name, ...) ir::Op::name,
      VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
  };
}

std::set<ir::Op> ops_where(bool (*property)(ir::Op)) {
  std::set<ir::Op> out;
  for (ir::Op op : all_ops())
    if (property(op)) out.insert(op);
  return out;
}

TEST(OpTable, EveryOpHasItsOwnName) {
  std::vector<ir::Op> ops = all_ops();
  ASSERT_EQ(int(ops.size()), ir::kNumOps);
  std::set<std::string> names;
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(size_t(ops[i]), i);
    std::string name = ir::op_name(ops[i]);
    EXPECT_NE(name, "?");
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "two ops named " << name;
  }
  EXPECT_STREQ(ir::op_name(ir::Op::GatherGrad), "GatherGrad");
  EXPECT_EQ(ir::op_kind(ir::Op::MatMul), ir::OpKind::Contract);
}

// The executor runs views without a kernel and copies as data movement
// (runtime/cpu_executor.cpp); the fusion pass joins exactly the fusable ops.
TEST(OpTable, ExecutionClassesAndFusableSetAreWhatTheBackEndsExpect) {
  using ir::Op;
  EXPECT_EQ(ops_where(ir::is_view), (std::set<Op>{Op::Param, Op::Slice, Op::Reshape, Op::Fwd, Op::ScatterGrad}));
  EXPECT_EQ(ops_where(ir::is_copy), (std::set<Op>{Op::Gather, Op::GatherSum, Op::GatherAll, Op::Pull, Op::PullEmbedding,
                                                  Op::Push, Op::GatherGrad, Op::EmbeddingGrad}));
  for (Op op : all_ops())
    EXPECT_EQ(ir::exec_class(op) == ir::ExecClass::Compute, !ir::is_view(op) && !ir::is_copy(op)) << ir::op_name(op);
  EXPECT_EQ(ops_where(ir::is_fusable_op), (std::set<Op>{Op::Neg, Op::Sigmoid, Op::Tanh, Op::Relu, Op::Exp, Op::Log,
                                                        Op::Sqrt, Op::Step, Op::Scale, Op::AddScalar, Op::Add, Op::Sub,
                                                        Op::Mul, Op::Div}));
  // Every elementwise op but Dropout (whose mask depends on the vertex) is fusable.
  for (Op op : all_ops())
    EXPECT_EQ(ir::is_fusable_op(op), ir::is_elementwise(op) && op != Op::Dropout) << ir::op_name(op);
}

TEST(OpTable, AttributesOfEachOp) {
  using ir::Attr;
  using ir::AttrSet;
  using ir::Op;
  EXPECT_EQ(ir::op_info(Op::Gather).attributes, (AttrSet{Attr::ChildSlot, Attr::Start}));
  EXPECT_EQ(ir::op_info(Op::GatherAll).attributes, AttrSet{Attr::MaxChildren});
  EXPECT_EQ(ir::op_info(Op::Dropout).attributes, (AttrSet{Attr::DropoutKey, Attr::Rate}));
  EXPECT_EQ(ir::op_info(Op::MatMul).attributes, (AttrSet{Attr::TransA, Attr::TransB}));
  EXPECT_EQ(ir::op_info(Op::Tanh).attributes, AttrSet{});
  // A GatherGrad reads child_slot only when its target is one slot.
  ir::Node g = ir::Node::make(Op::GatherGrad, Shape::scalar(), {0});
  EXPECT_TRUE(ir::used_attributes(g).has(Attr::ChildSlot));
  EXPECT_TRUE(ir::used_attributes(g).has(Attr::Start));
  g.target = ir::GatherGradTarget::VariadicRows;
  EXPECT_FALSE(ir::used_attributes(g).has(Attr::ChildSlot));
  EXPECT_FALSE(ir::used_attributes(g).has(Attr::Start));
  EXPECT_TRUE(ir::used_attributes(g).has(Attr::Target));
}

// The ops of kind Row, and only those, have a definition (ir/row_op.h) with
// every part the Builder, verify, the interpreter, autodiff, the FLOP count and
// both devices read; an operand count the table and the CUDA kernel agree on.
TEST(OpTable, RowOpsAndOnlyThoseHaveACompleteDefinition) {
  int row_ops = 0;
  for (ir::Op op : all_ops()) {
    const ir::RowOp* row = ir::row_op(op);
    ASSERT_EQ(row != nullptr, ir::op_kind(op) == ir::OpKind::Row) << ir::op_name(op);
    if (row == nullptr) continue;
    ++row_ops;
    EXPECT_TRUE(row->accepts && row->expects && row->result_shape && row->reference_double && row->reference_float &&
                row->flops && row->cpu_rows && row->cuda_kernel)
        << ir::op_name(op);
    const int arity = ir::op_info(op).arity;
    EXPECT_TRUE(arity >= 1 && arity <= ir::kMaxRowOperands) << ir::op_name(op);
    EXPECT_EQ(ir::exec_class(op), ir::ExecClass::Compute) << ir::op_name(op);
    EXPECT_FALSE(ir::is_fusable_op(op)) << ir::op_name(op);
    EXPECT_NE(row->cuda.find(std::string(row->cuda_kernel) +
                             (row->cuda_form == ir::CudaRowForm::Element ? "_element(" : "_row(")),
              std::string_view::npos)
        << ir::op_name(op) << ": the CUDA source defines no device function the kernel calls";
  }
  EXPECT_GE(row_ops, 2);
  // A forward row op has a gradient rule; SymOuter's gradient op itself has none.
  EXPECT_NE(ir::row_op(ir::Op::SymOuter)->gradient, nullptr);
  EXPECT_EQ(ir::row_op(ir::Op::SymOuterGrad)->gradient, nullptr);
}

// LayerNorm in the reference interpreter, in double and in float, against the
// formula computed here in float64; and a Builder error naming the op.
TEST(LayerNorm, ReferenceEqualsTheFormulaInFloat64) {
  Model model;
  Program program(model);
  const int type = program.add_type("norm", [](Builder& b) { b.push(b.layer_norm(b.pull(5))); });
  const std::vector<std::vector<float>> inputs = {{0.5f, -1.25f, 3.0f, 0.0f, 2.75f}, {2.0f, 2.0f, 2.0f, 2.0f, 2.0f}};
  GraphBatch batch;
  Sample sample;
  for (const std::vector<float>& x : inputs) sample.vertices[size_t(sample.add_vertex(type))].features = x;
  batch.samples.push_back(sample);
  RunOptions run;
  run.backward = false;
  const Evaluation<double> in_double = reference_evaluate(program, parameter_values<double>(model), batch, run);
  const Evaluation<float> in_float = reference_evaluate(program, parameter_values<float>(model), batch, run);
  for (int v = 0; v < 2; ++v) {
    const std::vector<float>& x = inputs[size_t(v)];
    double mean = 0, var = 0;
    for (float xi : x) mean += xi / 5.0;
    for (float xi : x) var += (xi - mean) * (xi - mean) / 5.0;
    for (size_t i = 0; i < 5; ++i) {
      const double want = (x[i] - mean) / std::sqrt(var + 1e-5);
      EXPECT_NEAR(in_double.pushes.at(0, v, 0)[i], want, 1e-12) << v << ", " << i;
      EXPECT_NEAR(in_float.pushes.at(0, v, 0)[i], want, 1e-5) << v << ", " << i;
    }
  }
  // A constant vector normalises to zeros (ε keeps the division finite).
  EXPECT_EQ(in_double.pushes.at(0, 1, 0)[3], 0.0);

  Model other;
  Param w = other.add("W", Shape::mat(2, 3));
  std::string msg =
      build_error(other, [&](Builder& b) { b.scatter(b.layer_norm(b.reshape(b.pull(4), Shape::mat(2, 2)))); });
  EXPECT_CONTAINS(msg, "layer_norm");
  EXPECT_CONTAINS(msg, "a vector of at least one element, got [2,2]");
  msg = build_error(other, [&](Builder& b) { b.scatter(b.layer_norm(b.param(w))); });
  EXPECT_CONTAINS(msg, "layer_norm");
  EXPECT_CONTAINS(msg, "parameter");
}

// ir/op_semantics.h gives semantics to exactly the fusable ops: those the
// fallback kernels, the reference kernel and codegen must all compute.
TEST(OpTable, FusableOpsAndOnlyThoseHaveScalarSemantics) {
  for (ir::Op op : all_ops()) {
    const bool unary = ir::op_kind(op) == ir::OpKind::Unary;
    const bool binary = ir::op_kind(op) == ir::OpKind::Binary;
    if (ir::is_fusable_op(op) && unary) {
      EXPECT_NO_THROW(ir::apply_unary(op, 0.5f, 2.0f)) << ir::op_name(op);
    } else {
      EXPECT_THROW(ir::apply_unary(op, 0.5f, 2.0f), InternalError) << ir::op_name(op);
    }
    if (ir::is_fusable_op(op) && binary) {
      EXPECT_NO_THROW(ir::apply_binary(op, 0.5, 2.0)) << ir::op_name(op);
    } else {
      EXPECT_THROW(ir::apply_binary(op, 0.5, 2.0), InternalError) << ir::op_name(op);
    }
  }
  EXPECT_EQ(ir::apply_unary(ir::Op::Scale, 3.0, 0.5), 1.5);
  EXPECT_EQ(ir::apply_unary(ir::Op::AddScalar, 3.0, 0.5), 3.5);
  EXPECT_EQ(ir::apply_unary(ir::Op::Step, 0.0f, 0.0f), 0.0f);
  EXPECT_EQ(ir::apply_unary(ir::Op::Relu, -2.0, 0.0), 0.0);
  EXPECT_EQ(ir::apply_binary(ir::Op::Sub, 3.0, 0.5), 2.5);
  EXPECT_EQ(ir::apply_binary(ir::Op::Div, 3.0, 0.5), 6.0);
  ir::Node scale = ir::Node::make(ir::Op::Scale, Shape::vec(4));
  scale.factor = 0.25;
  EXPECT_EQ(ir::unary_constant(scale), 0.25);
  ir::Node add = ir::Node::make(ir::Op::AddScalar, Shape::vec(4));
  add.addend = -1.0;
  EXPECT_EQ(ir::unary_constant(add), -1.0);
}

// pull -> `node` -> scatter, for the verifier and CSE tests.
ir::Function one_node(ir::Node node) {
  ir::Function f;
  f.name = "f";
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  if (ir::op_kind(node.op) == ir::OpKind::Unary) node.args = {x};
  ir::ValueId y = f.add(node);
  f.add(ir::Node::make(ir::Op::Scatter, Shape::scalar(), {y}));
  return f;
}

std::string internal_error_of(const ir::Function& f) {
  try {
    ir::verify(f);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "(no InternalError)";
}

TEST(Verifier, RejectsAnAttributeItsOpDoesNotUse) {
  ir::Node tanh = ir::Node::make(ir::Op::Tanh, Shape::vec(4));
  EXPECT_NO_THROW(ir::verify(one_node(tanh)));
  tanh.factor = 2.0;
  std::string msg = internal_error_of(one_node(tanh));
  EXPECT_CONTAINS(msg, "verify f: Tanh does not use attribute factor but it is 2 in %1 = tanh(%0) : [4]");

  ir::Node scale = ir::Node::make(ir::Op::Scale, Shape::vec(4));
  scale.factor = 2.0;
  EXPECT_NO_THROW(ir::verify(one_node(scale)));
  scale.addend = 1.0;  // AddScalar's, not Scale's
  EXPECT_CONTAINS(internal_error_of(one_node(scale)), "Scale does not use attribute addend but it is 1");

  ir::Node dropout = ir::Node::make(ir::Op::Dropout, Shape::vec(4));
  dropout.rate = 0.5;
  dropout.dropout_key = 3;
  EXPECT_NO_THROW(ir::verify(one_node(dropout)));
  dropout.child_slot = 1;
  EXPECT_CONTAINS(internal_error_of(one_node(dropout)), "Dropout does not use attribute slot but it is 1");

  ir::Node gather = ir::Node::make(ir::Op::Gather, Shape::vec(4));
  gather.child_slot = 2;
  EXPECT_NO_THROW(ir::verify(one_node(gather)));
  gather.target = ir::GatherGradTarget::EveryVariadic;
  EXPECT_CONTAINS(internal_error_of(one_node(gather)),
                  "Gather does not use attribute target but it is every_variadic");
}

TEST(Verifier, GatherGradReadsItsSlotOnlyWhenItsTargetIsOneSlot) {
  ir::Function f;
  f.name = "df";
  ir::ValueId g = f.add(ir::Node::make(ir::Op::ScatterGrad, Shape::vec(4)));
  ir::Node sink = ir::Node::make(ir::Op::GatherGrad, Shape::scalar(), {g});
  sink.target = ir::GatherGradTarget::EveryVariadic;
  f.add(sink);
  EXPECT_NO_THROW(ir::verify(f));
  EXPECT_CONTAINS(ir::to_string(f), "gathergrad(%0) target=every_variadic\n");
  f.nodes[1].child_slot = 1;
  EXPECT_CONTAINS(internal_error_of(f), "GatherGrad does not use attribute slot but it is 1");
  f.nodes[1].target = ir::GatherGradTarget::Slot;
  EXPECT_NO_THROW(ir::verify(f));
  EXPECT_CONTAINS(ir::to_string(f), "gathergrad(%0) target=slot slot=1 start=0\n");
}

// Two nodes of one op (on one operand when unary), both used; how many of them
// simplify() keeps: 1 when it merges them.
int kept_after_cse(const ir::Node& a, const ir::Node& b) {
  ir::Function f;
  f.name = "f";
  ir::ValueId x = f.add(ir::Node::make(ir::Op::Pull, Shape::vec(4)));
  ir::Node na = a, nb = b;
  if (ir::op_kind(a.op) == ir::OpKind::Unary) na.args = nb.args = {x};
  ir::ValueId ya = f.add(na), yb = f.add(nb);
  ir::ValueId sum = f.add(ir::Node::make(ir::Op::Add, Shape::vec(4), {ya, yb}));
  f.add(ir::Node::make(ir::Op::Scatter, Shape::scalar(), {sum}));
  ir::verify(f);
  ir::Function g = ir::simplify(f);
  ir::verify(g);
  return int(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == a.op; }));
}

TEST(Passes, CseMergesNodesOnlyWhenTheirUsedAttributesAreEqual) {
  const int merged = 1, kept = 2;
  auto scale = [](double factor) {
    ir::Node n = ir::Node::make(ir::Op::Scale, Shape::vec(4));
    n.factor = factor;
    return n;
  };
  EXPECT_EQ(kept_after_cse(scale(2.0), scale(2.0)), merged);
  EXPECT_EQ(kept_after_cse(scale(2.0), scale(3.0)), kept);
  EXPECT_EQ(kept_after_cse(scale(0.0), scale(-0.0)), kept) << "x·0 and x·−0 differ in sign";

  auto gather = [](int slot) {
    ir::Node n = ir::Node::make(ir::Op::Gather, Shape::vec(4));
    n.child_slot = slot;
    return n;
  };
  EXPECT_EQ(kept_after_cse(gather(1), gather(1)), merged);
  EXPECT_EQ(kept_after_cse(gather(0), gather(1)), kept);

  auto dropout = [](int key, double rate) {
    ir::Node n = ir::Node::make(ir::Op::Dropout, Shape::vec(4));
    n.dropout_key = key;
    n.rate = rate;
    return n;
  };
  EXPECT_EQ(kept_after_cse(dropout(0, 0.5), dropout(0, 0.5)), merged);
  EXPECT_EQ(kept_after_cse(dropout(0, 0.5), dropout(1, 0.5)), kept) << "distinct masks";
  EXPECT_EQ(kept_after_cse(dropout(0, 0.5), dropout(0, 0.25)), kept);

  auto constant = [](double value) {
    ir::Node n = ir::Node::make(ir::Op::Constant, Shape::vec(4));
    n.value = value;
    return n;
  };
  EXPECT_EQ(kept_after_cse(constant(1.0), constant(1.0)), merged);
  EXPECT_EQ(kept_after_cse(constant(1.0), constant(2.0)), kept);
}

TEST(Printer, ShowsEachUsedAttributeByName) {
  Model model;
  Param w = model.add("W", Shape::mat(4, 4));
  Program program(model);
  int t = program.add_type("cell", [&](Builder& b) {
    Value x = b.dropout(b.add_scalar(b.scale(b.gather_all(3, Shape::vec(4)), 0.5), 2.0), 0.25);
    b.scatter(b.tanh(b.matmul(w, b.sum_rows(x))));
  });
  std::string text = ir::to_string(program.forward(t));
  EXPECT_CONTAINS(text, "gatherall() max_children=3 : [3,4]");
  EXPECT_CONTAINS(text, "scale(%0) factor=0.5 : [3,4]");
  EXPECT_CONTAINS(text, "addscalar(%1) addend=2 : [3,4]");
  EXPECT_CONTAINS(text, "dropout(%2) key=0 rate=0.25 : [3,4]");
  std::string backward = ir::to_string(program.backward(t));
  EXPECT_CONTAINS(backward, "gathergrad(%");
  EXPECT_CONTAINS(backward, ") target=variadic_rows\n");
  EXPECT_CONTAINS(backward, "fwd() forward=");
}

// Useful flops (ir/flops.h), each checked against a count made by hand.
TEST(Flops, MatMulIsTwoMNK) {
  using ir::Node;
  using ir::Op;
  ir::Function f;
  ir::ValueId w = f.add(Node::make(Op::Param, Shape::mat(4, 3)));
  ir::ValueId x = f.add(Node::make(Op::Pull, Shape::vec(3)));
  ir::ValueId y = f.add(Node::make(Op::MatMul, Shape::vec(4), {w, x}));  // [4,3]·[3]: 2·4·1·3
  f.add(Node::make(Op::Scatter, Shape{}, {y}));
  EXPECT_EQ(ir::flops_of_node(f, y), 24);
  EXPECT_EQ(ir::flops_per_vertex(f), 24);

  // op(a) = aᵀ: a stored [3,2], b [3,5] → [2,5], contracted over 3: 2·2·5·3.
  ir::Function g;
  ir::ValueId a = g.add(Node::make(Op::Pull, Shape::mat(3, 2)));
  ir::ValueId b = g.add(Node::make(Op::Pull, Shape::mat(3, 5)));
  Node m = Node::make(Op::MatMul, Shape::mat(2, 5), {a, b});
  m.trans_a = true;
  ir::ValueId c = g.add(m);
  g.add(Node::make(Op::Scatter, Shape{}, {c}));
  EXPECT_EQ(ir::flops_per_vertex(g), 60);

  // A row vector on the left: [3]·[3,5] → [5], 2·5·3.
  ir::Function h;
  ir::ValueId v = h.add(Node::make(Op::Pull, Shape::vec(3)));
  ir::ValueId p = h.add(Node::make(Op::Param, Shape::mat(3, 5)));
  ir::ValueId r = h.add(Node::make(Op::MatMul, Shape::vec(5), {v, p}));
  h.add(Node::make(Op::Scatter, Shape{}, {r}));
  EXPECT_EQ(ir::flops_per_vertex(h), 30);
}

TEST(Flops, ElementwiseChainIsOnePerElementAndMovementIsFree) {
  using ir::Node;
  using ir::Op;
  ir::Function f;
  ir::ValueId x = f.add(Node::make(Op::Gather, Shape::vec(6)));          // 0
  ir::ValueId s = f.add(Node::make(Op::Sigmoid, Shape::vec(6), {x}));    // 6
  ir::ValueId t = f.add(Node::make(Op::Tanh, Shape::vec(6), {x}));       // 6
  ir::ValueId m = f.add(Node::make(Op::Mul, Shape::vec(6), {s, t}));     // 6
  ir::ValueId a = f.add(Node::make(Op::AddScalar, Shape::vec(6), {m}));  // 6
  Node slice = Node::make(Op::Slice, Shape::vec(2), {a});                // 0
  slice.start = 1;
  ir::ValueId sl = f.add(slice);
  ir::ValueId cat = f.add(Node::make(Op::Concat, Shape::vec(8), {a, sl}));  // 0
  ir::ValueId sum = f.add(Node::make(Op::Sum, Shape{}, {cat}));             // 8
  f.add(Node::make(Op::Loss, Shape{}, {sum}));                              // 0
  f.add(Node::make(Op::Scatter, Shape{}, {a}));                             // 0
  EXPECT_EQ(ir::flops_per_vertex(f), 4 * 6 + 8);
}

TEST(Flops, WeightGradientIsTheMultiplyAddOfAnOuterProduct) {
  using ir::Node;
  using ir::Op;
  ir::Function f;
  ir::ValueId g = f.add(Node::make(Op::ScatterGrad, Shape::vec(4)));
  ir::ValueId x = f.add(Node::make(Op::Pull, Shape::vec(3)));
  ir::ValueId o = f.add(Node::make(Op::Outer, Shape::mat(4, 3), {g, x}));  // 4·3 products
  Node grad = Node::make(Op::ParamGrad, Shape{}, {o});                     // 4·3 adds
  grad.param = 0;
  ir::ValueId pg = f.add(grad);
  EXPECT_EQ(ir::flops_of_node(f, o), 12);
  EXPECT_EQ(ir::flops_of_node(f, pg), 12);
  EXPECT_EQ(ir::flops_per_vertex(f), 2 * 4 * 3);
}

TEST(Flops, SoftmaxCountsAConstantPerClass) {
  using ir::Node;
  using ir::Op;
  ir::Function f;
  ir::ValueId logits = f.add(Node::make(Op::Pull, Shape::vec(5)));
  ir::ValueId ce = f.add(Node::make(Op::SoftmaxCE, Shape{}, {logits}));
  f.add(Node::make(Op::Loss, Shape{}, {ce}));
  EXPECT_EQ(ir::flops_per_vertex(f), ir::kSoftmaxFlopsPerClass * 5);
}

}  // namespace
}  // namespace vjit
