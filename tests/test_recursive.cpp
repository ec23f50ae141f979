// The recursive front end (vjit/recursive.h): models over the user's own tree
// and DAG types equal the hand-written vertex functions and the reference
// interpreter, the walk makes one vertex per distinct node, and every bad input
// is a UserError naming the node or the branch.
#include <gtest/gtest.h>

#include <string>

#include "engine_check.h"
#include "examples/models/recursive_models.h"
#include "user_error.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using examples::hand_built_batch;
using examples::NaryForest;
using examples::NaryTree;
using examples::Tree;
using test_util::user_error_of;
using testing::expect_matches_reference;
using testing::tensor_error;

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

constexpr int H = 8;

std::vector<int> first_indices(int n) {
  std::vector<int> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = i;
  return out;
}

// Objective, pushes and gradients of two engines, each on its own batch, agree.
void expect_same_results(Engine& a, const GraphBatch& batch_a, Engine& b, const GraphBatch& batch_b, double tolerance) {
  RunOptions run;
  run.training = false;
  double loss_a = a.forward(batch_a, run);
  a.backward();
  double loss_b = b.forward(batch_b, run);
  b.backward();
  EXPECT_NEAR(loss_a, loss_b, tolerance * std::max(1.0, std::abs(loss_b)));
  EXPECT_LE(tensor_error(a.last_result().pushes.values(), b.last_result().pushes.values()), tolerance);
  ASSERT_EQ(a.gradients().size(), b.gradients().size());
  for (size_t p = 0; p < a.gradients().size(); ++p)
    EXPECT_LE(tensor_error(a.gradients()[p], b.gradients()[p]), tolerance) << "gradient " << p;
}

void expect_same_vertices(const GraphBatch& a, const GraphBatch& b) {
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t s = 0; s < a.samples.size(); ++s) {
    ASSERT_EQ(a.samples[s].vertices.size(), b.samples[s].vertices.size()) << "sample " << s;
    for (size_t v = 0; v < a.samples[s].vertices.size(); ++v) {
      const Vertex &x = a.samples[s].vertices[v], &y = b.samples[s].vertices[v];
      EXPECT_EQ(x.type, y.type) << "sample " << s << " vertex " << v;
      EXPECT_EQ(x.children, y.children) << "sample " << s << " vertex " << v;
      EXPECT_EQ(x.token, y.token) << "sample " << s << " vertex " << v;
      EXPECT_EQ(x.label, y.label) << "sample " << s << " vertex " << v;
      EXPECT_EQ(x.features, y.features) << "sample " << s << " vertex " << v;
    }
  }
}

// --- the Tree-LSTM over struct Tree ---

TEST(Recursive, TreeLstmEqualsTheZoosHandWrittenVertexFunctions) {
  models::Config config = testing::small_config(24);
  config.dropout = 0;  // the recursive version has no dropout
  models::Bundle zoo = models::make_model("tree_lstm", config);
  std::vector<std::unique_ptr<Tree>> trees;
  for (const Sample& sample : zoo.train) trees.push_back(examples::tree_from_sample(sample));

  Model model(config.seed);
  int vocab = zoo.model->param(zoo.model->find("embedding")).shape.dims[0];
  examples::RecursiveTreeLstm recursive(model, vocab, config.hidden, config.embed_size());
  ASSERT_EQ(model.size(), zoo.model->size());
  for (int p = 0; p < model.size(); ++p) {
    EXPECT_EQ(model.param(p).name, zoo.model->param(p).name);
    EXPECT_EQ(model.param(p).value, zoo.model->param(p).value) << model.param(p).name;
  }
  std::vector<const Tree*> roots;
  for (const auto& tree : trees) roots.push_back(tree.get());
  GraphBatch batch = recursive.recursion.batch(roots);
  GraphBatch zoo_batch = models::make_batch(zoo.train, first_indices(int(zoo.train.size())));
  expect_same_vertices(batch, zoo_batch);

  Engine engine(recursive.program), zoo_engine(*zoo.program);
  expect_same_results(engine, batch, zoo_engine, zoo_batch, 1e-5);
  expect_matches_reference(engine, recursive.program, batch, 1e-4, "recursive Tree-LSTM");
}

TEST(Recursive, TreeLstmTrains) {
  models::Config config = testing::small_config(64);
  config.dropout = 0;
  models::Bundle zoo = models::make_model("tree_lstm", config);
  std::vector<std::unique_ptr<Tree>> trees;
  std::vector<const Tree*> roots;
  for (const Sample& sample : zoo.train) {
    trees.push_back(examples::tree_from_sample(sample));
    roots.push_back(trees.back().get());
  }
  Model model(config.seed);
  examples::RecursiveTreeLstm recursive(model, zoo.model->param(zoo.model->find("embedding")).shape.dims[0],
                                        config.hidden, config.embed_size());
  Engine engine(recursive.program);
  Adam adam(0.02f);
  GraphBatch batch = recursive.recursion.batch(roots);
  double first = engine.train_step(batch, adam), last = first;
  for (int step = 0; step < 15; ++step) last = engine.train_step(batch, adam);
  EXPECT_LT(last, 0.9 * first);
}

// --- the Child-Sum Tree-LSTM over struct Phrase (any fan-in) ---

// The zoo's child_sum_tree_lstm (1..5 children per node) and its samples as Phrases.
struct ChildSumTrees {
  models::Bundle zoo;
  std::vector<std::unique_ptr<examples::Phrase>> phrases;
  std::vector<const examples::Phrase*> roots;

  explicit ChildSumTrees(const models::Config& config) : zoo(models::make_model("child_sum_tree_lstm", config)) {
    for (const Sample& sample : zoo.train) {
      phrases.push_back(examples::phrase_from_sample(sample));
      roots.push_back(phrases.back().get());
    }
  }
  int vocab() const { return zoo.model->param(zoo.model->find("embedding")).shape.dims[0]; }
};

TEST(Recursive, ChildSumTreeLstmEqualsTheZoosHandWrittenModelAndTheReference) {
  models::Config config = testing::small_config(24);
  config.dropout = 0;  // the recursive version has no dropout
  ChildSumTrees trees(config);
  // The data really has variable fan-in: one-child and wide nodes both occur.
  std::vector<int> fan_ins(6);
  for (const Sample& sample : trees.zoo.train)
    for (const Vertex& v : sample.vertices) ++fan_ins.at(v.children.size());
  EXPECT_GT(fan_ins[1], 0);
  EXPECT_GT(fan_ins[3] + fan_ins[4] + fan_ins[5], 0);
  const int max_children = examples::max_fan_in(trees.roots);

  Model model(config.seed);
  examples::RecursiveChildSumTreeLstm recursive(model, trees.vocab(), config.hidden, config.embed_size(), max_children);
  ASSERT_EQ(model.size(), trees.zoo.model->size());
  for (int p = 0; p < model.size(); ++p) {
    EXPECT_EQ(model.param(p).name, trees.zoo.model->param(p).name);
    EXPECT_EQ(model.param(p).value, trees.zoo.model->param(p).value) << model.param(p).name;
  }
  GraphBatch batch = recursive.recursion.batch(trees.roots);
  GraphBatch zoo_batch = models::make_batch(trees.zoo.train, first_indices(int(trees.zoo.train.size())));
  expect_same_vertices(batch, zoo_batch);

  Engine engine(recursive.program), zoo_engine(*trees.zoo.program);
  expect_same_results(engine, batch, zoo_engine, zoo_batch, 1e-5);
  expect_matches_reference(engine, recursive.program, batch, 1e-4, "recursive Child-Sum Tree-LSTM");
}

// call_all's bound may exceed the data's fan-in: the padding rows change nothing.
TEST(Recursive, ChildSumTreeLstmDoesNotDependOnCallAllsBound) {
  models::Config config = testing::small_config(12);
  config.dropout = 0;
  ChildSumTrees trees(config);
  const int max_children = examples::max_fan_in(trees.roots);
  Model tight_model(config.seed), loose_model(config.seed);
  examples::RecursiveChildSumTreeLstm tight(tight_model, trees.vocab(), config.hidden, config.embed_size(), max_children);
  examples::RecursiveChildSumTreeLstm loose(loose_model, trees.vocab(), config.hidden, config.embed_size(),
                                            max_children + 3);
  Engine tight_engine(tight.program), loose_engine(loose.program);
  expect_same_results(tight_engine, tight.recursion.batch(trees.roots), loose_engine, loose.recursion.batch(trees.roots),
                      1e-5);
  // A node wider than the bound is a UserError naming it.
  examples::Phrase wide;
  for (int k = 0; k <= max_children; ++k) {
    wide.children.push_back(std::make_unique<examples::Phrase>());
    wide.children.back()->word = 1;
  }
  EXPECT_CONTAINS(user_error_of([&] { tight.recursion.sample(wide); }),
                  "branch 'internal' takes any number of children (at most " + std::to_string(max_children) +
                      "), the node has " + std::to_string(max_children + 1));
}

TEST(Recursive, ChildSumTreeLstmTrains) {
  models::Config config = testing::small_config(64);
  config.dropout = 0;
  ChildSumTrees trees(config);
  Model model(config.seed);
  examples::RecursiveChildSumTreeLstm recursive(model, trees.vocab(), config.hidden, config.embed_size(),
                                                examples::max_fan_in(trees.roots));
  Engine engine(recursive.program);
  Adam adam(0.02f);
  GraphBatch batch = recursive.recursion.batch(trees.roots);
  double first = engine.train_step(batch, adam), last = first;
  for (int step = 0; step < 15; ++step) last = engine.train_step(batch, adam);
  EXPECT_LT(last, 0.9 * first);
}

// Nothing of a body runs per sample: each body runs once, when its branch is added.
TEST(Recursive, BodiesRunOncePerBranchNotPerSample) {
  Model model(1);
  Param w = model.add("W", Shape::mat(H, 2 * H));
  Param e = model.add("E", Shape::mat(10, H));
  Program program(model);
  Recursive<Tree> rnn(program, Shape::vec(H));
  int runs = 0;
  rnn.children([](const Tree& t) {
       return t.left ? std::vector<const Tree*>{t.left.get(), t.right.get()} : std::vector<const Tree*>{};
     })
      .branch([](const Tree& t) { return t.left ? 1 : 0; })
      .token([](const Tree& t) { return t.word; });
  EXPECT_EQ(rnn.add_branch("leaf", Arity::exactly(0), [&](Builder& f, Calls&) { ++runs; return f.pull_embedding(e); }), 0);
  EXPECT_EQ(rnn.add_branch("internal", Arity::exactly(2),
                           [&](Builder& f, Calls& calls) {
                             ++runs;
                             return f.tanh(f.matmul(w, f.concat({calls.call(0), calls.call(1)})));
                           }),
            1);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(program.num_types(), 2);
  EXPECT_EQ(rnn.vertex_type(1), program.type_index("internal"));
  Tree root;
  root.left = std::make_unique<Tree>();
  root.left->word = 3;
  root.right = std::make_unique<Tree>();
  root.right->word = 4;
  std::vector<const Tree*> nodes;
  Sample sample = rnn.sample(root, "s", &nodes);
  ASSERT_EQ(sample.vertices.size(), 3u);
  EXPECT_EQ(nodes, (std::vector<const Tree*>{root.left.get(), root.right.get(), &root}));
  EXPECT_EQ(sample.vertices[2].children, (std::vector<int>{0, 1}));
  EXPECT_EQ(sample.vertices[0].token, 3);
  EXPECT_EQ(sample.vertices[2].token, -1);  // the internal branch reads no token
  Engine engine(program);
  GraphBatch batch;
  for (int i = 0; i < 5; ++i) batch.samples.push_back(sample);
  engine.infer(batch);
  EXPECT_EQ(runs, 2);
}

// --- variable fan-in and DAGs over struct NaryTree ---

class RecursiveChildSum : public ::testing::TestWithParam<double> {};

TEST_P(RecursiveChildSum, EqualsTheHandWrittenVertexFunctionAndTheReference) {
  const int features = 5, classes = 3;
  NaryForest forest = examples::random_nary_forest(12, 10, 4, features, classes, GetParam(), 11);
  Model model(2);
  examples::RecursiveChildSumRnn recursive(model, features, H, classes);
  Program program(model);
  int node = program.add_type("node", [&](Builder& f) { f.scatter(recursive.rnn.cell(f, f.gather_sum(Shape::vec(H)))); });
  GraphBatch batch = recursive.recursion.batch(forest.roots);
  GraphBatch hand_batch = hand_built_batch(forest.roots, node);
  expect_same_vertices(batch, hand_batch);
  int shared = 0;  // vertices with several parents
  for (const Sample& sample : batch.samples) {
    std::vector<int> parents(sample.vertices.size());
    for (const Vertex& v : sample.vertices)
      for (int child : v.children) shared += ++parents[size_t(child)] == 2;
  }
  EXPECT_EQ(shared > 0, GetParam() > 0) << shared << " vertices with several parents";
  Engine engine(recursive.program), hand_engine(program);
  expect_same_results(engine, batch, hand_engine, hand_batch, 1e-5);
  expect_matches_reference(engine, recursive.program, batch, 1e-4, "recursive child-sum RNN");
  Adam adam(0.02f);
  double first = engine.train_step(batch, adam), last = first;
  for (int step = 0; step < 15; ++step) last = engine.train_step(batch, adam);
  EXPECT_LT(last, 0.9 * first);
}
INSTANTIATE_TEST_SUITE_P(TreesAndDags, RecursiveChildSum, ::testing::Values(0.0, 0.4),
                         [](const auto& info) { return info.param > 0 ? "dag" : "tree"; });

TEST(Recursive, ASharedChildIsOneVertexWithSeveralParents) {
  Model model(4);
  examples::RecursiveChildSumRnn recursive(model, 2, H, 3);
  NaryForest forest;
  NaryTree* shared = forest.add({0.1f, 0.2f}, 1, {});
  NaryTree* a = forest.add({0.3f, 0.4f}, 0, {shared});
  NaryTree* b = forest.add({0.5f, 0.6f}, 2, {shared, a});
  NaryTree* root = forest.add({0.7f, 0.8f}, -1, {a, b, shared});
  std::vector<const NaryTree*> nodes;
  Sample sample = recursive.recursion.sample(*root, "dag", &nodes);
  ASSERT_EQ(sample.vertices.size(), 4u);
  EXPECT_EQ(nodes, (std::vector<const NaryTree*>{shared, a, b, root}));
  EXPECT_EQ(sample.vertices[1].children, (std::vector<int>{0}));
  EXPECT_EQ(sample.vertices[2].children, (std::vector<int>{0, 1}));
  EXPECT_EQ(sample.vertices[3].children, (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(sample.vertices[3].label, -1);
  EXPECT_EQ(sample.vertices[2].features, (std::vector<float>{0.5f, 0.6f}));
  // Several roots in one sample share their nodes too.
  Sample both = recursive.recursion.sample(std::vector<const NaryTree*>{b, a}, "two roots");
  EXPECT_EQ(both.vertices.size(), 3u);
  GraphBatch batch;
  batch.samples = {sample, both};
  Engine engine(recursive.program);
  expect_matches_reference(engine, recursive.program, batch, 1e-4, "shared children");
}

// Children may be listed as any range of pointers: here owning unique_ptrs.
struct Owned {
  float x = 0;
  std::vector<std::unique_ptr<Owned>> kids;
};

TEST(Recursive, ChildrenMayBeARangeOfOwningPointers) {
  Model model(1);
  Param u = model.add("U", Shape::mat(H, H));
  Program program(model);
  Recursive<Owned> sum(program, Shape::vec(H));
  sum.children([](const Owned& o) -> const std::vector<std::unique_ptr<Owned>>& { return o.kids; })
      .features([](const Owned& o) { return std::vector<float>(static_cast<size_t>(H), o.x); });
  sum.add_branch("node", Arity::any(),
                 [&](Builder& f, Calls& calls) { return f.tanh(f.add(f.pull(H), f.matmul(u, calls.call_sum()))); });
  Owned root;
  for (int k = 0; k < 3; ++k) {
    root.kids.push_back(std::make_unique<Owned>());
    root.kids.back()->x = float(k);
  }
  std::vector<const Owned*> nodes;
  Sample sample = sum.sample(root, "owned", &nodes);
  ASSERT_EQ(sample.vertices.size(), 4u);
  EXPECT_EQ(nodes[1], root.kids[1].get());
  EXPECT_EQ(sample.vertices[3].children, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(sample.vertices[2].features, std::vector<float>(static_cast<size_t>(H), 2.0f));
}

// A chain of 200000 nodes: the walk is iterative, the stack does not overflow.
TEST(Recursive, DeepChainsWalkWithoutRecursion) {
  Model model(4);
  examples::RecursiveChildSumRnn recursive(model, 1, 2, 2);
  NaryForest forest;
  NaryTree* node = forest.add({0.0f}, 0, {});
  for (int i = 0; i < 200000; ++i) node = forest.add({0.0f}, 1, {node});
  Sample sample = recursive.recursion.sample(*node);
  ASSERT_EQ(sample.vertices.size(), 200001u);
  EXPECT_TRUE(sample.vertices[0].children.empty());
  EXPECT_EQ(sample.vertices[200000].children, (std::vector<int>{199999}));
}

// call_all(max) reads the children's results as a [max, n] block.
TEST(Recursive, CallAllEqualsGatherAll) {
  const int features = 3, classes = 2, max_children = 4;
  Model model(6);
  examples::ChildSumRnn params(model, features, H, classes);
  Param mix = model.add("mix", Shape::mat(H, max_children * H));
  auto cell = [&](Builder& f, Value block) {
    return params.cell(f, f.matmul(mix, f.reshape(block, Shape::vec(max_children * H))));
  };
  Program program(model);
  Recursive<NaryTree> recursive(program, Shape::vec(H));
  recursive.children([](const NaryTree& t) { return t.children; })
      .features([](const NaryTree& t) { return t.features; })
      .label([](const NaryTree& t) { return t.label; });
  recursive.add_branch("node", Arity::any(max_children),
                       [&](Builder& f, Calls& calls) { return cell(f, calls.call_all(max_children)); });
  Program hand(model);
  int node = hand.add_type("node", [&](Builder& f) { f.scatter(cell(f, f.gather_all(max_children, Shape::vec(H)))); });
  NaryForest forest = examples::random_nary_forest(8, 9, max_children, features, classes, 0.0, 5);
  // The roots gather every open node: keep only samples whose root has at most max_children.
  std::vector<const NaryTree*> roots;
  for (const NaryTree* root : forest.roots)
    if (int(root->children.size()) <= max_children) roots.push_back(root);
  ASSERT_GE(roots.size(), 2u);
  GraphBatch batch = recursive.batch(roots);
  expect_same_vertices(batch, hand_built_batch(roots, node));
  Engine engine(program), hand_engine(hand);
  expect_same_results(engine, batch, hand_engine, hand_built_batch(roots, node), 1e-5);
  expect_matches_reference(engine, program, batch, 1e-4, "call_all");
}

// --- bad input ---

// A binary model over NaryTree (two branches, picked by the child count) for the error cases.
struct BinaryOverNary {
  Model model{1};
  Param w = model.add("W", Shape::mat(H, 2 * H));
  Program program{model};
  Recursive<NaryTree> recursive{program, Shape::vec(H)};

  BinaryOverNary() {
    recursive.children([](const NaryTree& t) { return t.children; })
        .branch([](const NaryTree& t) { return t.label >= 10 ? t.label : t.children.empty() ? 0 : 1; })
        .features([](const NaryTree& t) { return t.features; })
        .describe([](const NaryTree& t) { return "label " + std::to_string(t.label); });
    recursive.add_branch("leaf", Arity::exactly(0), [](Builder& f, Calls&) { return f.tanh(f.pull(H)); });
    recursive.add_branch("internal", Arity::exactly(2), [this](Builder& f, Calls& calls) {
      return f.tanh(f.matmul(w, f.concat({calls.call(0), calls.call(1)})));
    });
  }
};

std::vector<float> row(float v = 0.5f) { return std::vector<float>(static_cast<size_t>(H), v); }

TEST(RecursiveErrors, ACycleNamesTheNode) {
  BinaryOverNary m;
  NaryForest forest;
  NaryTree* leaf = forest.add(row(), 0, {});
  NaryTree* inner = forest.add(row(), 1, {});
  NaryTree* root = forest.add(row(), 2, {leaf, inner});
  inner->children = {leaf, root};  // root -> inner -> root
  std::string message = user_error_of([&] { m.recursive.sample(*root, "cyclic"); });
  EXPECT_CONTAINS(message, "recursive sample 'cyclic'");
  EXPECT_CONTAINS(message, "a cycle: node root [label 2] is its own descendant (child 1 of root/1 [label 1])");
  NaryTree self{row(), 3, {}};
  self.children = {&self, &self};
  EXPECT_CONTAINS(user_error_of([&] { m.recursive.sample(self); }), "node root [label 3] is its own descendant");
}

TEST(RecursiveErrors, ABranchIndexOutOfRangeNamesTheNode) {
  BinaryOverNary m;
  NaryForest forest;
  NaryTree* bad = forest.add(row(), 12, {});
  NaryTree* root = forest.add(row(), 1, {forest.add(row(), 0, {}), bad});
  std::string message = user_error_of([&] { m.recursive.sample(*root, "s"); });
  EXPECT_CONTAINS(message, "node root/1 [label 12]: the branch function picked branch 12, the model has branches 0..1");
}

TEST(RecursiveErrors, AChildCountTheBranchDoesNotTakeNamesTheNodeAndBranch) {
  BinaryOverNary m;
  NaryForest forest;
  NaryTree* a = forest.add(row(), 0, {});
  NaryTree* three = forest.add(row(), 1, {a, forest.add(row(), 0, {}), forest.add(row(), 0, {})});
  NaryTree* root = forest.add(row(), 1, {three, a});
  std::string message = user_error_of([&] { m.recursive.sample(*root, "s"); });
  EXPECT_CONTAINS(message, "node root/0 [label 1]: branch 'internal' takes 2 children, the node has 3");
  NaryTree one{row(), 1, {a}};
  EXPECT_CONTAINS(user_error_of([&] { m.recursive.sample(one); }), "takes 2 children, the node has 1");
  // A null child.
  NaryTree with_null{row(), 1, {a, nullptr}};
  EXPECT_CONTAINS(user_error_of([&] { m.recursive.sample(with_null); }),
                  "node root [label 1] (branch 'internal'): child 1 is null");
  // More children than call_all's rows.
  Model model(1);
  Program program(model);
  Recursive<NaryTree> bounded(program, Shape::vec(H));
  bounded.children([](const NaryTree& t) { return t.children; });
  bounded.add_branch("all", Arity::any(2), [](Builder& f, Calls& calls) { return f.sum_rows(calls.call_all(2)); });
  NaryTree wide{row(), 0, {a, a, a}};
  EXPECT_CONTAINS(user_error_of([&] { bounded.sample(wide); }),
                  "branch 'all' takes any number of children (at most 2), the node has 3");
}

TEST(RecursiveErrors, BadTokensLabelsAndFeaturesNameTheNode) {
  BinaryOverNary m;
  NaryTree short_row{std::vector<float>(3, 0.f), 0, {}};
  EXPECT_CONTAINS(user_error_of([&] { m.recursive.sample(short_row); }),
                  "node root [label 0] (branch 'leaf'): a feature row of 3 values, the branch pulls 8");
  Model model(1);
  Param e = model.add("E", Shape::mat(10, H));
  Program program(model);
  Recursive<NaryTree> rnn(program, Shape::vec(H));
  rnn.children([](const NaryTree& t) { return t.children; });
  rnn.add_branch("leaf", Arity::exactly(0), [&](Builder& f, Calls&) {
    Value x = f.pull_embedding(e);
    f.add_loss(f.softmax_cross_entropy(x, f.label(H)));
    return x;
  });
  NaryTree leaf{{}, 3, {}};
  EXPECT_CONTAINS(user_error_of([&] { rnn.sample(leaf); }),
                  "branch 'leaf' reads pull_embedding but the model has no token function");
  rnn.token([](const NaryTree& t) { return t.label * 5; });
  EXPECT_CONTAINS(user_error_of([&] { rnn.sample(leaf); }),
                  "node root (branch 'leaf'): token 15 is outside the embedding table's 10 rows");
  leaf.label = 1;
  EXPECT_EQ(rnn.sample(leaf).vertices.at(0).label, -1);  // no label function: no label
  rnn.label([](const NaryTree& t) { return t.label * 9; });
  EXPECT_CONTAINS(user_error_of([&] { rnn.sample(leaf); }), "label 9 is outside [0, 8)");
}

TEST(RecursiveErrors, MissingFunctionsAreNamed) {
  Model model(1);
  Program program(model);
  Recursive<NaryTree> rnn(program, Shape::vec(H));
  NaryTree leaf{row(), 0, {}};
  EXPECT_CONTAINS(user_error_of([&] { rnn.sample(leaf); }), "the recursive model has no branches");
  rnn.add_branch("a", Arity::any(), [](Builder& f, Calls& calls) { return calls.call_sum(); });
  EXPECT_CONTAINS(user_error_of([&] { rnn.sample(leaf); }), "no children function (Recursive::children)");
  rnn.children([](const NaryTree& t) { return t.children; });
  EXPECT_EQ(rnn.sample(leaf).vertices.size(), 1u);  // one branch: no branch function needed
  rnn.add_branch("b", Arity::any(), [](Builder& f, Calls& calls) { return f.neg(calls.call_sum()); });
  EXPECT_CONTAINS(user_error_of([&] { rnn.sample(leaf); }), "2 branches but no branch function");
}

// Bodies that misuse the recursive calls fail in add_branch, naming the
// branch, and leave the program as it was.
TEST(RecursiveErrors, BadBodiesNameTheBranchAndAddNothing) {
  Model model(1);
  Param w = model.add("W", Shape::mat(H, 2 * H));
  Program program(model);
  Recursive<Tree> rnn(program, Shape::vec(H));
  auto expect_rejected = [&](Arity arity, const BranchBody& body, const std::string& part) {
    EXPECT_CONTAINS(user_error_of([&] { rnn.add_branch("bad", arity, body); }), part);
    EXPECT_EQ(program.num_types(), 0);
    EXPECT_EQ(rnn.num_branches(), 0);
  };
  expect_rejected(Arity::exactly(2),
                  [&](Builder& f, Calls& c) { return f.matmul(w, f.concat({c.call(0), c.call(2)})); },
                  "recursive branch 'bad' (2 children): call(2) is past its arity");
  expect_rejected(Arity::exactly(2), [&](Builder& f, Calls& c) { return f.tanh(c.call(0)); },
                  "recursive branch 'bad' (2 children): its body never reads call(1)");
  expect_rejected(Arity::exactly(1), [&](Builder& f, Calls& c) { return f.sum(c.call(0)); },
                  "recursive branch 'bad' returns [], the model's result is [8]");
  expect_rejected(Arity::exactly(1), [&](Builder& f, Calls& c) { return c.call_sum(); },
                  "call_sum() needs a variadic arity");
  expect_rejected(Arity::any(), [&](Builder& f, Calls& c) { return f.sum_rows(c.call_all(3)); },
                  "call_all(3) needs the branch's Arity to bound its variadic children by at most 3");
  expect_rejected(Arity::any(), [&](Builder& f, Calls& c) { return f.tanh(f.constant(Shape::vec(H), 1.0)); },
                  "its body never reads its variadic children");
  expect_rejected(Arity::at_least(1), [&](Builder& f, Calls& c) { return c.call(1); },
                  "call(1) is past its arity (variadic children are read by call_sum or call_all)");
  // A good branch after the bad ones is branch 0.
  EXPECT_EQ(rnn.add_branch("good", Arity::exactly(0), [](Builder& f, Calls&) { return f.constant(Shape::vec(H), 0.5); }),
            0);
}

}  // namespace
}  // namespace vjit
