// validate_and_order: every error path names the culprit; the order puts
// children before parents, also on DAGs where a vertex has several parents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "vjit/error.h"
#include "vjit/graph.h"
#include "vjit/validate.h"

namespace vjit {
namespace {

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

constexpr int H = 8;

// Types: 0 leaf (embedding, label), 1 internal (binary), 2 unary, 3 sum (variadic),
// 4 all (gather_all, at most 3), 5 sink (scatters nothing), 6 feat (pulls 3 floats).
TypeSignature scattering(const std::string& name, Shape shape) {
  TypeSignature t;
  t.name = name;
  t.scatters = true;
  t.scatter_shape = shape;
  return t;
}

std::vector<TypeSignature> make_types() {
  TypeSignature leaf = scattering("leaf", Shape::vec(H));
  leaf.vocab_size = 10;
  leaf.needs_label = true;
  leaf.num_classes = 5;
  TypeSignature internal = scattering("internal", Shape::vec(H));
  internal.fixed_arity = 2;
  internal.slot_shapes = {Shape::vec(H), Shape::vec(H)};
  internal.needs_label = true;
  internal.num_classes = 5;
  TypeSignature unary = scattering("unary", Shape::vec(H));
  unary.fixed_arity = 1;
  unary.slot_shapes = {Shape::vec(H)};
  TypeSignature sum = scattering("sum", Shape::vec(H));
  sum.variadic = true;
  sum.variadic_shape = Shape::vec(H);
  TypeSignature all = sum;
  all.name = "all";
  all.max_children = 3;
  TypeSignature sink = unary;
  sink.name = "sink";
  sink.scatters = false;
  sink.scatter_shape = Shape{};
  TypeSignature feat = scattering("feat", Shape::vec(2 * H));
  feat.feature_width = 3;
  return {leaf, internal, unary, sum, all, sink, feat};
}
enum { kLeaf, kInternal, kUnary, kSum, kAll, kSink, kFeat };

std::string error_of(const std::vector<TypeSignature>& types, const GraphBatch& batch) {
  try {
    validate_and_order(types, batch);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string error_of(const Sample& sample) { return error_of(make_types(), GraphBatch{{sample}}); }

// A valid tree: leaves 0, 1, 2; 3 = internal(0, 1); 4 = internal(3, 2).
Sample small_tree(std::string name = "tree 3") {
  Sample s;
  s.name = std::move(name);
  for (int i = 0; i < 3; ++i) s.add_vertex(kLeaf, {}, i, 2);
  s.add_vertex(kInternal, {0, 1}, -1, 1);
  s.add_vertex(kInternal, {3, 2}, -1, 4);
  return s;
}

void expect_topological(const Sample& sample, const std::vector<int>& order) {
  ASSERT_EQ(order.size(), sample.vertices.size());
  std::vector<int> position(order.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_GE(order[i], 0);
    ASSERT_LT(order[i], int(order.size()));
    ASSERT_EQ(position[size_t(order[i])], -1) << "vertex " << order[i] << " appears twice";
    position[size_t(order[i])] = int(i);
  }
  for (size_t v = 0; v < sample.vertices.size(); ++v)
    for (int child : sample.vertices[v].children)
      EXPECT_LT(position[size_t(child)], position[v]) << "child " << child << " after parent " << v;
}

TEST(GraphOrder, TreeChildrenFirst) {
  Sample s = small_tree();
  auto orders = validate_and_order(make_types(), GraphBatch{{s}});
  ASSERT_EQ(orders.size(), 1u);
  expect_topological(s, orders[0]);
  EXPECT_EQ(orders[0].back(), 4);
}

TEST(GraphOrder, DiamondWithTwoParentsListedParentsFirst) {
  // 0 = internal(1, 2); 1 = unary(3); 2 = unary(3); 3 = leaf: vertex 3 has two parents.
  Sample s;
  s.add_vertex(kInternal, {1, 2});
  s.add_vertex(kUnary, {3});
  s.add_vertex(kUnary, {3});
  s.add_vertex(kLeaf, {}, 7);
  auto orders = validate_and_order(make_types(), GraphBatch{{s}});
  expect_topological(s, orders[0]);
  EXPECT_EQ(orders[0].front(), 3);
  EXPECT_EQ(orders[0].back(), 0);
}

TEST(GraphOrder, SameChildInTwoSlots) {
  Sample s;
  s.add_vertex(kLeaf, {}, 1);
  s.add_vertex(kInternal, {0, 0});
  expect_topological(s, validate_and_order(make_types(), GraphBatch{{s}})[0]);
}

TEST(GraphOrder, RandomDagsWithSharedChildren) {
  std::mt19937 rng(7);
  GraphBatch batch;
  for (int sample = 0; sample < 20; ++sample) {
    int n = 5 + int(rng() % 40);
    std::vector<int> perm(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) perm[size_t(i)] = i;
    std::shuffle(perm.begin(), perm.end(), rng);  // rank i lives at vertex perm[i]
    Sample s;
    s.vertices.resize(size_t(n));
    for (int rank = 0; rank < n; ++rank) {
      Vertex& v = s.vertices[size_t(perm[size_t(rank)])];
      if (rank == 0) {
        v = Vertex{kLeaf, {}, 0, -1, {}};
        continue;
      }
      v.type = kSum;  // children: random earlier ranks, often shared
      for (int k = 0, m = 1 + int(rng() % 3); k < m; ++k) v.children.push_back(perm[rng() % size_t(rank)]);
    }
    batch.samples.push_back(s);
  }
  auto orders = validate_and_order(make_types(), batch);
  ASSERT_EQ(orders.size(), batch.samples.size());
  for (size_t i = 0; i < orders.size(); ++i) expect_topological(batch.samples[i], orders[i]);
}

TEST(GraphOrder, EmptySampleAndBatch) {
  EXPECT_TRUE(validate_and_order(make_types(), GraphBatch{}).empty());
  auto orders = validate_and_order(make_types(), GraphBatch{{Sample{}}});
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_TRUE(orders[0].empty());
}

TEST(GraphOrder, LongChainDoesNotOverflow) {
  Sample s;
  s.add_vertex(kLeaf, {}, 0);
  for (int i = 1; i < 200000; ++i) s.add_vertex(kUnary, {i - 1});
  auto order = validate_and_order(make_types(), GraphBatch{{s}})[0];
  ASSERT_EQ(order.size(), s.vertices.size());
  for (int i = 0; i < int(order.size()); ++i) ASSERT_EQ(order[size_t(i)], i);
}

TEST(GraphErrors, UnknownType) {
  Sample s = small_tree();
  s.vertices[4].type = 7;
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "sample 'tree 3', vertex 4");
  EXPECT_CONTAINS(msg, "unknown vertex type 7");
  s.vertices[4].type = -1;
  EXPECT_CONTAINS(error_of(s), "unknown vertex type -1");
}

TEST(GraphErrors, UnnamedSampleUsesIndex) {
  Sample bad = small_tree("");
  bad.vertices[4].type = 9;
  std::string msg = error_of(make_types(), GraphBatch{{small_tree(), bad}});
  EXPECT_CONTAINS(msg, "sample 1, vertex 4");
}

TEST(GraphErrors, ChildOutOfRange) {
  Sample s = small_tree();
  s.vertices[3].children[1] = 5;
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "sample 'tree 3', vertex 3 (type 'internal'), slot 1: child 5 is out of range");
  s.vertices[3].children[1] = -2;
  EXPECT_CONTAINS(error_of(s), "slot 1: child -2 is out of range");
}

TEST(GraphErrors, SelfLoop) {
  Sample s = small_tree();
  s.vertices[3].children[0] = 3;
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "vertex 3 (type 'internal'), slot 0");
  EXPECT_CONTAINS(msg, "self-loop");
}

TEST(GraphErrors, TooFewChildren) {
  Sample s = small_tree();
  s.vertices[4].children = {3};
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "sample 'tree 3', vertex 4 (type 'internal')");
  EXPECT_CONTAINS(msg, "has 1 children but the type gathers 2");
}

TEST(GraphErrors, TooManyChildrenNotVariadic) {
  Sample s = small_tree();
  s.vertices[4].children = {3, 2, 1};
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "vertex 4 (type 'internal'): has 3 children");
  EXPECT_CONTAINS(msg, "not variadic");
}

TEST(GraphErrors, VariadicAcceptsAnyCountGatherAllHasAMaximum) {
  Sample s = small_tree();
  s.add_vertex(kSum, {0, 1, 2, 3, 4});
  s.add_vertex(kSum, {});
  s.add_vertex(kAll, {0, 1, 2});
  EXPECT_EQ(error_of(s), "(no error)");
  s.add_vertex(kAll, {0, 1, 2, 3});
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "vertex 8 (type 'all'): has 4 children after its 0 gather slots but gather_all takes at most 3");
}

TEST(GraphErrors, ChildScattersWrongShape) {
  std::vector<TypeSignature> types = make_types();
  types[kLeaf].scatter_shape = Shape::vec(128);
  types[kInternal].slot_shapes = {Shape::vec(128), Shape::vec(256)};
  Sample s;
  s.name = "tree 3";
  for (int i = 0; i < 5; ++i) s.add_vertex(kLeaf, {}, 0);
  s.add_vertex(kInternal, {3, 4});
  EXPECT_CONTAINS(
      error_of(types, GraphBatch{{s}}),
      "sample 'tree 3', vertex 5 (type 'internal'), slot 1: child 4 (type 'leaf') scatters [128] but "
      "the slot expects [256]");
}

TEST(GraphErrors, VariadicChildScattersWrongShape) {
  Sample s;
  s.add_vertex(kLeaf, {}, 0);
  s.add_vertex(kFeat);
  s.vertices[1].features = {1, 2, 3};
  s.add_vertex(kSum, {0, 1});
  EXPECT_CONTAINS(error_of(s),
                  "vertex 2 (type 'sum'), slot 1: child 1 (type 'feat') scatters [16] but the slot "
                  "expects [8]");
}

TEST(GraphErrors, ChildScattersNothing) {
  Sample s;
  s.add_vertex(kLeaf, {}, 0);
  s.add_vertex(kSink, {0});
  s.add_vertex(kUnary, {1});
  EXPECT_CONTAINS(error_of(s),
                  "vertex 2 (type 'unary'), slot 0: child 1 (type 'sink') scatters nothing but the "
                  "slot expects [8]");
}

TEST(GraphErrors, CycleNamesAVertexOnIt) {
  Sample s;
  s.name = "loop";
  s.add_vertex(kUnary, {1});
  s.add_vertex(kUnary, {2});
  s.add_vertex(kUnary, {0});
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "sample 'loop', vertex 0 (type 'unary')");
  EXPECT_CONTAINS(msg, "cycle");
  EXPECT_CONTAINS(msg, "0 -> 1 -> 2 -> 0");
}

TEST(GraphErrors, CycleBehindAValidPart) {
  // 0 leaf; 1 = internal(0, 3); 2 = unary(1); 3 = unary(2): the cycle is 1 -> 3 -> 2 -> 1.
  Sample s;
  s.add_vertex(kLeaf, {}, 0);
  s.add_vertex(kInternal, {0, 3});
  s.add_vertex(kUnary, {1});
  s.add_vertex(kUnary, {2});
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "cycle");
  EXPECT_CONTAINS(msg, "1 -> 3 -> 2 -> 1");
  EXPECT_EQ(msg.find("vertex 0"), std::string::npos) << msg;
}

TEST(GraphErrors, MissingToken) {
  Sample s = small_tree();
  s.vertices[1].token = -1;
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "sample 'tree 3', vertex 1 (type 'leaf')");
  EXPECT_CONTAINS(msg, "missing token");
}

TEST(GraphErrors, TokenOutOfRange) {
  Sample s = small_tree();
  s.vertices[2].token = 10;
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "vertex 2 (type 'leaf'): token 10 is out of range [0, 10)");
}

TEST(GraphErrors, LabelOutOfRange) {
  Sample s = small_tree();
  s.vertices[3].label = -1;  // no label: allowed
  EXPECT_EQ(error_of(s), "(no error)");
  s.vertices[3].label = 5;
  EXPECT_CONTAINS(error_of(s), "vertex 3 (type 'internal'): label 5 is out of range [0, 5)");
  s.vertices[3].label = -3;
  EXPECT_CONTAINS(error_of(s), "vertex 3 (type 'internal'): label -3 is out of range");
}

TEST(GraphErrors, LabelIgnoredWithoutLoss) {
  Sample s;
  s.add_vertex(kLeaf, {}, 0);
  s.add_vertex(kUnary, {0}, -1, 99);  // unary has no per-vertex loss
  EXPECT_EQ(error_of(s), "(no error)");
}

TEST(GraphErrors, FeatureRowWidth) {
  Sample s;
  s.add_vertex(kFeat);
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "vertex 0 (type 'feat'): feature row has width 0 but the type pulls 3");
  s.vertices[0].features = {1, 2, 3, 4};
  EXPECT_CONTAINS(error_of(s), "feature row has width 4 but the type pulls 3");
  s.vertices[0].features = {1, 2, 3};
  EXPECT_EQ(error_of(s), "(no error)");
}

TEST(GraphErrors, NonFiniteFeature) {
  Sample s;
  s.add_vertex(kFeat);
  s.vertices[0].features = {1, std::numeric_limits<float>::quiet_NaN(), 3};
  std::string msg = error_of(s);
  EXPECT_CONTAINS(msg, "vertex 0 (type 'feat'): feature 1 is");
  EXPECT_CONTAINS(msg, "finite");
}

TEST(GraphErrors, BatchIsNotModified) {
  GraphBatch batch{{small_tree()}};
  batch.samples[0].vertices[4].children = {4, 3};
  EXPECT_THROW(validate_and_order(make_types(), batch), UserError);
  EXPECT_EQ(batch.samples[0].vertices[4].children, (std::vector<int>{4, 3}));
}

}  // namespace
}  // namespace vjit
