// PQ-tree (layout/pq_tree.h): reductions checked against brute force over all
// permutations of up to 7 leaves, known examples, structure invariants, and
// the errors bad input gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "layout/pq_tree.h"
#include "tests/allocation_counter.h"

namespace vjit::layout {
namespace {

using Kind = PQTree::Kind;
using NodeId = PQTree::NodeId;

// Whether `set` is consecutive in the order whose positions are `pos`.
bool consecutive(const std::vector<int>& pos, const std::vector<int>& set) {
  if (set.empty()) return true;
  int lo = pos[static_cast<size_t>(set[0])], hi = lo;
  for (const int leaf : set) {
    lo = std::min(lo, pos[static_cast<size_t>(leaf)]);
    hi = std::max(hi, pos[static_cast<size_t>(leaf)]);
  }
  return hi - lo + 1 == static_cast<int>(set.size());
}

std::vector<int> positions(const std::vector<int>& order) {
  std::vector<int> pos(order.size());
  for (size_t p = 0; p < order.size(); ++p) pos[static_cast<size_t>(order[p])] = static_cast<int>(p);
  return pos;
}

// Parent/children agree, every leaf appears once, P-nodes have >= 2 children
// and Q-nodes >= 3, and every reachable node is alive.
void expect_well_formed(const PQTree& tree, const std::string& what) {
  const int n = tree.num_leaves();
  if (n == 0) {
    EXPECT_EQ(tree.root(), PQTree::kNone) << what;
    return;
  }
  ASSERT_TRUE(tree.alive(tree.root())) << what;
  EXPECT_EQ(tree.parent(tree.root()), PQTree::kNone) << what;
  std::vector<int> seen(static_cast<size_t>(n), 0);
  std::vector<NodeId> stack{tree.root()}, kids;
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    ASSERT_TRUE(tree.alive(x)) << what;
    if (tree.kind(x) == Kind::Leaf) {
      const int leaf = tree.leaf(x);
      ASSERT_TRUE(leaf >= 0 && leaf < n) << what;
      ++seen[static_cast<size_t>(leaf)];
      EXPECT_EQ(tree.leaf_node(leaf), x) << what;
      EXPECT_EQ(tree.num_children(x), 0) << what;
      continue;
    }
    tree.children(x, kids);
    EXPECT_EQ(static_cast<int>(kids.size()), tree.num_children(x)) << what;
    EXPECT_GE(kids.size(), tree.kind(x) == Kind::P ? 2u : 3u) << what << ": node " << x;
    for (const NodeId c : kids) {
      EXPECT_EQ(tree.parent(c), x) << what << ": child " << c << " of " << x;
      stack.push_back(c);
    }
    // Sibling links walk the same list, from either end, and join only neighbours.
    for (size_t i = 0; i < kids.size(); ++i) {
      EXPECT_EQ(tree.sibling_after(kids[i], i > 0 ? kids[i - 1] : PQTree::kNone),
                i + 1 < kids.size() ? kids[i + 1] : PQTree::kNone) << what << ": node " << x;
      EXPECT_EQ(tree.sibling_after(kids[i], i + 1 < kids.size() ? kids[i + 1] : PQTree::kNone),
                i > 0 ? kids[i - 1] : PQTree::kNone) << what << ": node " << x;
      for (size_t j = 0; j < kids.size(); ++j)
        EXPECT_EQ(tree.are_siblings(kids[i], kids[j]), j + 1 == i || i + 1 == j) << what << ": node " << x;
    }
  }
  for (int leaf = 0; leaf < n; ++leaf) EXPECT_EQ(seen[static_cast<size_t>(leaf)], 1) << what << ": leaf " << leaf;
}

// The deepest node whose subtree holds every leaf of `set`, by walking parents.
NodeId brute_lca(const PQTree& tree, const std::vector<int>& set) {
  std::vector<NodeId> path;
  for (NodeId x = tree.leaf_node(set[0]); x != PQTree::kNone; x = tree.parent(x)) path.push_back(x);
  size_t best = 0;
  for (const int leaf : set) {
    std::vector<NodeId> mine;
    for (NodeId x = tree.leaf_node(leaf); x != PQTree::kNone; x = tree.parent(x)) mine.push_back(x);
    for (size_t i = best; i < path.size(); ++i) {
      if (std::find(mine.begin(), mine.end(), path[i]) != mine.end()) {
        best = i;
        break;
      }
    }
  }
  return path[best];
}

// Each live interior node's kind and children; a P-node's sorted.
using Shape = std::vector<std::vector<NodeId>>;
Shape shape_of(const PQTree& tree) {
  Shape shape;
  std::vector<NodeId> stack, kids;
  if (tree.root() != PQTree::kNone) stack.push_back(tree.root());
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    if (tree.kind(x) == Kind::Leaf) continue;
    tree.children(x, kids);
    stack.insert(stack.end(), kids.begin(), kids.end());
    if (tree.kind(x) == Kind::P) std::sort(kids.begin(), kids.end());
    if (shape.size() <= static_cast<size_t>(x)) shape.resize(static_cast<size_t>(x) + 1);
    shape[static_cast<size_t>(x)] = kids;
    shape[static_cast<size_t>(x)].push_back(tree.kind(x) == Kind::P ? -10 : -20);
  }
  return shape;
}

// Every interior node that is new or whose children differ (a Q-node's up to
// reversal) is in `changed`.
void expect_changes_reported(const Shape& before, const Shape& after, const std::vector<NodeId>& changed,
                             const std::string& what) {
  for (size_t x = 0; x < after.size(); ++x) {
    if (after[x].empty()) continue;
    const std::vector<NodeId> none;
    const std::vector<NodeId>& old = x < before.size() ? before[x] : none;
    std::vector<NodeId> reversed(old.rbegin() + (old.empty() ? 0 : 1), old.rend());
    if (!old.empty()) reversed.push_back(old.back());
    if (old == after[x] || reversed == after[x]) continue;
    EXPECT_TRUE(std::find(changed.begin(), changed.end(), static_cast<NodeId>(x)) != changed.end())
        << what << ": node " << x << " changed but is not reported";
  }
}

// Every permutation of 0..n-1 with its positions.
struct AllOrders {
  std::vector<std::vector<int>> orders, pos;
  explicit AllOrders(int n) {
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    do {
      orders.push_back(order);
      pos.push_back(positions(order));
    } while (std::next_permutation(order.begin(), order.end()));
  }
};

// A random subset: half the time an interval of a hidden order (so long
// feasible sequences build deep trees), otherwise any subset, in random order.
std::vector<int> random_set(std::mt19937& rng, const std::vector<int>& hidden) {
  const int n = static_cast<int>(hidden.size());
  std::vector<int> set;
  if (rng() % 2 == 0) {
    const int len = static_cast<int>(rng() % static_cast<unsigned>(n + 1));
    const int start = static_cast<int>(rng() % static_cast<unsigned>(n - len + 1));
    set.assign(hidden.begin() + start, hidden.begin() + start + len);
  } else {
    for (int leaf = 0; leaf < n; ++leaf) {
      if (rng() % 2 == 0) set.push_back(leaf);
    }
  }
  std::shuffle(set.begin(), set.end(), rng);
  return set;
}

std::string text_of(const std::vector<int>& v) {
  std::string s = "{";
  for (const int x : v) s += (s.size() > 1 ? " " : "") + std::to_string(x);
  return s + "}";
}

// One random sequence of reductions on n leaves, each step compared with the
// brute-force set of orders that satisfy every accepted constraint.
void check_random_sequence(const AllOrders& all, int n, int steps, std::mt19937& rng, PQTree& tree) {
  tree.reset(n);
  std::vector<int> hidden(static_cast<size_t>(n));
  std::iota(hidden.begin(), hidden.end(), 0);
  std::shuffle(hidden.begin(), hidden.end(), rng);
  std::vector<char> allowed(all.orders.size(), 1), restricted(all.orders.size());
  std::string history = "n=" + std::to_string(n);
  std::vector<NodeId> changed;
  std::vector<int> front;
  for (int step = 0; step < steps; ++step) {
    const std::vector<int> set = random_set(rng, hidden);
    history += " " + text_of(set);
    bool feasible = false;
    for (size_t i = 0; i < all.orders.size(); ++i) {
      restricted[i] = allowed[i] && consecutive(all.pos[i], set);
      feasible = feasible || restricted[i];
    }
    const std::string before = tree.describe();
    const Shape shape_before = shape_of(tree);
    const uint64_t restrictions_before = tree.restrictions();
    changed.clear();
    const bool ok = tree.reduce(set, &changed);
    ASSERT_EQ(ok, feasible) << history << "  tree before: " << before;
    const std::string what = history + " -> " + tree.describe();
    // restrictions() counts exactly the reductions that removed an order.
    const bool removed_orders = ok && restricted != allowed;
    EXPECT_EQ(tree.restrictions(), restrictions_before + (removed_orders ? 1 : 0)) << what;
    if (ok) {
      allowed = restricted;
      for (const NodeId x : changed) EXPECT_TRUE(tree.alive(x)) << what;
      expect_changes_reported(shape_before, shape_of(tree), changed, what);
    } else {
      ASSERT_EQ(tree.describe(), before) << what;
      EXPECT_TRUE(changed.empty()) << what;
    }
    for (size_t i = 0; i < all.orders.size(); ++i) {
      ASSERT_EQ(tree.admits(all.orders[i]), static_cast<bool>(allowed[i]))
          << what << "  order " << text_of(all.orders[i]);
    }
    tree.frontier(front);
    ASSERT_EQ(front.size(), static_cast<size_t>(n)) << what;
    const auto it = std::find(all.orders.begin(), all.orders.end(), front);
    ASSERT_TRUE(it != all.orders.end() && allowed[static_cast<size_t>(it - all.orders.begin())])
        << what << "  frontier " << text_of(front);
    expect_well_formed(tree, what);
    if (!set.empty()) {
      EXPECT_EQ(tree.lowest_common_ancestor(set), brute_lca(tree, set)) << what;
    }
  }
}

TEST(PQTree, MatchesBruteForceOnRandomSmallInstances) {
  // (leaves, sequences): n! orders are checked after every step.
  const std::pair<int, int> plan[] = {{1, 50}, {2, 200}, {3, 1500}, {4, 2500}, {5, 1500}, {6, 300}, {7, 30}};
  PQTree tree;  // reused: reset must start over from any state
  std::mt19937 rng(12345);
  int sequences = 0;
  for (const auto& [n, count] : plan) {
    const AllOrders all(n);
    for (int s = 0; s < count; ++s) {
      check_random_sequence(all, n, 1 + static_cast<int>(rng() % 8), rng, tree);
      if (HasFatalFailure()) return;
      ++sequences;
    }
  }
  EXPECT_EQ(sequences, 6080);
}

// Counts the admitted orders of `tree` by brute force.
int count_admitted(const PQTree& tree) {
  const AllOrders all(tree.num_leaves());
  return static_cast<int>(std::count_if(all.orders.begin(), all.orders.end(),
                                        [&](const std::vector<int>& o) { return tree.admits(o); }));
}

TEST(PQTree, UniversalTree) {
  PQTree tree(4);
  EXPECT_EQ(tree.describe(), "P(0 1 2 3)");
  EXPECT_EQ(count_admitted(tree), 24);
  tree.reset(1);
  EXPECT_EQ(tree.describe(), "0");
  EXPECT_EQ(tree.kind(tree.root()), Kind::Leaf);
  EXPECT_EQ(tree.parent(tree.root()), PQTree::kNone);
  tree.reset(0);
  EXPECT_EQ(tree.describe(), "");
  EXPECT_EQ(tree.root(), PQTree::kNone);
  EXPECT_TRUE(tree.reduce(std::vector<int>{}));
  std::vector<int> front{7};
  tree.frontier(front);
  EXPECT_TRUE(front.empty());
  EXPECT_TRUE(tree.admits(front));
}

TEST(PQTree, TrivialSetsChangeNothing) {
  PQTree tree(5);
  ASSERT_TRUE(tree.reduce(std::vector<int>{1, 3}));
  const std::string before = tree.describe();
  std::vector<NodeId> changed;
  EXPECT_TRUE(tree.reduce(std::vector<int>{}, &changed));
  EXPECT_TRUE(tree.reduce(std::vector<int>{2}, &changed));
  EXPECT_TRUE(tree.reduce(std::vector<int>{4, 0, 3, 2, 1}, &changed));
  EXPECT_TRUE(changed.empty());
  EXPECT_EQ(tree.describe(), before);
}

TEST(PQTree, ChainOfPairsLeavesOneOrderAndItsReverse) {
  PQTree tree(6);
  for (int i = 0; i + 1 < 6; ++i) ASSERT_TRUE(tree.reduce(std::vector<int>{i + 1, i})) << i;
  const std::string text = tree.describe();
  EXPECT_TRUE(text == "Q(0 1 2 3 4 5)" || text == "Q(5 4 3 2 1 0)") << text;
  EXPECT_EQ(count_admitted(tree), 2);
  EXPECT_TRUE(tree.admits(std::vector<int>{5, 4, 3, 2, 1, 0}));
  EXPECT_FALSE(tree.admits(std::vector<int>{0, 1, 2, 3, 5, 4}));
}

TEST(PQTree, NestedSetsGiveNestedPNodes) {
  PQTree tree(5);
  ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1}));
  ASSERT_TRUE(tree.reduce(std::vector<int>{2, 0, 1}));
  // P(3 4 P(2 P(0 1))), children in any order.
  const NodeId inner = tree.lowest_common_ancestor(std::vector<int>{0, 1});
  EXPECT_EQ(tree.kind(inner), Kind::P);
  EXPECT_EQ(tree.num_children(inner), 2);
  const NodeId outer = tree.parent(inner);
  EXPECT_EQ(outer, tree.parent(tree.leaf_node(2)));
  EXPECT_EQ(tree.kind(outer), Kind::P);
  EXPECT_EQ(tree.num_children(outer), 2);
  EXPECT_EQ(tree.parent(outer), tree.root());
  EXPECT_EQ(tree.num_children(tree.root()), 3);
  // {0,1} as a block, with 2 on either side of it, that block among 3 and 4.
  EXPECT_EQ(count_admitted(tree), 2 * 2 * 6);
}

TEST(PQTree, IntervalMatrixHasTheConsecutiveOnesProperty) {
  // Columns of an interval matrix whose rows were shuffled: the tree must
  // admit the original row order (and so its reverse).
  const std::vector<int> rows = {3, 0, 6, 1, 5, 2, 7, 4};  // row r sits at position p
  const std::vector<std::pair<int, int>> columns = {{0, 2}, {1, 4}, {3, 5}, {5, 7}, {2, 3}};
  PQTree tree(8);
  for (const auto& [first, last] : columns) {
    const std::vector<int> set(rows.begin() + first, rows.begin() + last + 1);
    ASSERT_TRUE(tree.reduce(set)) << text_of(set);
  }
  EXPECT_TRUE(tree.admits(rows));
  std::vector<int> reversed(rows.rbegin(), rows.rend());
  EXPECT_TRUE(tree.admits(reversed));
  std::vector<int> front;
  tree.frontier(front);
  const std::vector<int> pos = positions(front);
  for (const auto& [first, last] : columns) {
    EXPECT_TRUE(consecutive(pos, std::vector<int>(rows.begin() + first, rows.begin() + last + 1)));
  }
  expect_well_formed(tree, tree.describe());
}

TEST(PQTree, TriangleOfPairsIsInfeasibleFromThreeLeaves) {
  for (int n = 3; n <= 6; ++n) {
    PQTree tree(n);
    ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1})) << n;
    ASSERT_TRUE(tree.reduce(std::vector<int>{1, 2})) << n;
    const std::string before = tree.describe();
    EXPECT_FALSE(tree.reduce(std::vector<int>{0, 2})) << n;
    EXPECT_EQ(tree.describe(), before) << n;
    expect_well_formed(tree, before);
  }
  // On two leaves every pair is the whole set: all three succeed.
  PQTree two(2);
  EXPECT_TRUE(two.reduce(std::vector<int>{0, 1}));
  EXPECT_TRUE(two.reduce(std::vector<int>{1, 0}));
  EXPECT_EQ(two.describe(), "P(0 1)");
}

TEST(PQTree, ChangedNodesAreReported) {
  PQTree tree(6);
  std::vector<NodeId> changed;
  ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1, 2}, &changed));
  ASSERT_FALSE(changed.empty());
  std::set<NodeId> unique(changed.begin(), changed.end());
  EXPECT_EQ(unique.size(), changed.size());
  // The new P-node over {0,1,2} is among them.
  const NodeId group = tree.parent(tree.leaf_node(0));
  EXPECT_EQ(tree.lowest_common_ancestor(std::vector<int>{2, 1, 0}), group);
  EXPECT_TRUE(unique.count(group));
  changed.clear();
  ASSERT_TRUE(tree.reduce(std::vector<int>{2, 3}, &changed));
  EXPECT_TRUE(unique.count(tree.root()) || !changed.empty());
  for (const NodeId x : changed) EXPECT_TRUE(tree.alive(x));
}

// Not timed: a larger instance checked for correctness only. Intervals of a
// hidden order always succeed. Random sets are first tried on a copy; those
// that fail there must fail on the tree too and leave it as it was.
TEST(PQTree, LargeInstanceStaysConsistent) {
  const int n = 2000;
  std::mt19937 rng(7);
  std::vector<int> hidden(n);
  std::iota(hidden.begin(), hidden.end(), 0);
  std::shuffle(hidden.begin(), hidden.end(), rng);
  const std::vector<int> hidden_pos = positions(hidden);
  PQTree tree(n);
  std::vector<std::vector<int>> accepted;
  int rejected = 0;
  for (int step = 0; step < 2400; ++step) {
    std::vector<int> set;
    if (step % 4 != 3) {
      const int len = 2 + static_cast<int>(rng() % 40);
      const int start = static_cast<int>(rng() % static_cast<unsigned>(n - len + 1));
      set.assign(hidden.begin() + start, hidden.begin() + start + len);
    } else {
      // Near one another in the hidden order, so some are feasible.
      const int start = static_cast<int>(rng() % static_cast<unsigned>(n - 60));
      for (int k = 0; k < 5; ++k) set.push_back(hidden[static_cast<size_t>(start + static_cast<int>(rng() % 60))]);
      std::sort(set.begin(), set.end());
      set.erase(std::unique(set.begin(), set.end()), set.end());
    }
    std::shuffle(set.begin(), set.end(), rng);
    if (consecutive(hidden_pos, set)) {
      ASSERT_TRUE(tree.reduce(set)) << step << " " << text_of(set);
      accepted.push_back(set);
      continue;
    }
    PQTree probe = tree;
    if (probe.reduce(set)) continue;  // feasible but not wanted
    ++rejected;
    const std::string before = tree.describe();
    ASSERT_EQ(probe.describe(), before) << step;
    ASSERT_FALSE(tree.reduce(set)) << step;
    ASSERT_EQ(tree.describe(), before) << step;
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GE(accepted.size(), 1800u);
  expect_well_formed(tree, "large");
  std::vector<int> front;
  tree.frontier(front);
  EXPECT_TRUE(tree.admits(front));
  EXPECT_TRUE(tree.admits(hidden));
  const std::vector<int> pos = positions(front);
  for (const auto& set : accepted) ASSERT_TRUE(consecutive(pos, set)) << text_of(set);
  // Reset to a size seen before, and again to a larger one.
  tree.reset(n);
  EXPECT_EQ(tree.num_children(tree.root()), n);
  tree.reset(n + 5);
  expect_well_formed(tree, "reset");
}

// Run time use: one tree reset per batch. Once a sequence of reductions has
// run, resetting and running it again allocates nothing.
TEST(PQTree, SteadyStateReductionsAllocateNothing) {
  const int n = 1000;
  std::mt19937 rng(3);
  std::vector<int> hidden(n);
  std::iota(hidden.begin(), hidden.end(), 0);
  std::shuffle(hidden.begin(), hidden.end(), rng);
  std::vector<std::vector<int>> sets;
  for (int i = 0; i < 1500; ++i) {
    const int len = 2 + static_cast<int>(rng() % 50);
    const int start = static_cast<int>(rng() % static_cast<unsigned>(n - len + 1));
    sets.emplace_back(hidden.begin() + start, hidden.begin() + start + len);
    if (i % 3 == 0) sets.back().push_back(hidden[static_cast<size_t>((start + len + 7) % n)]);  // may conflict
  }
  PQTree tree;
  std::vector<NodeId> changed;
  int accepted[2] = {0, 0};
  int64_t allocations = -1;
  for (int round = 0; round < 2; ++round) {
    test_util::AllocationCounter counter;
    tree.reset(n);
    for (const auto& set : sets) {
      changed.clear();
      accepted[round] += tree.reduce(set, &changed) ? 1 : 0;
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(accepted[0], accepted[1]);
  EXPECT_LT(accepted[0], 1500);  // some sets did conflict
  EXPECT_GT(accepted[0], 500);
}

// The leaves under `node`.
void leaves_under(const PQTree& tree, NodeId node, std::vector<int>& out) {
  if (tree.kind(node) == Kind::Leaf) {
    out.push_back(tree.leaf(node));
    return;
  }
  std::vector<NodeId> kids;
  tree.children(node, kids);
  for (NodeId kid : kids) leaves_under(tree, kid, out);
}

// Random disjoint subtrees of `tree`: each node, in a random order, joins
// unless it lies inside one taken already or holds one.
std::vector<NodeId> random_subtrees(const PQTree& tree, std::mt19937& rng) {
  std::vector<NodeId> nodes, stack{tree.root()}, kids, taken;
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    nodes.push_back(x);
    if (tree.kind(x) == Kind::Leaf) continue;
    tree.children(x, kids);
    stack.insert(stack.end(), kids.begin(), kids.end());
  }
  std::shuffle(nodes.begin(), nodes.end(), rng);
  auto inside = [&](NodeId x, NodeId y) {  // x in y's subtree
    for (; x != PQTree::kNone; x = tree.parent(x))
      if (x == y) return true;
    return false;
  };
  for (NodeId x : nodes) {
    if (rng() % 3 != 0) continue;
    if (std::none_of(taken.begin(), taken.end(), [&](NodeId t) { return inside(x, t) || inside(t, x); }))
      taken.push_back(x);
  }
  return taken;
}

// reduce_subtrees(nodes) restricts the tree exactly as reduce(their leaves)
// does, on a copy: same success, same admitted orders, same restrictions().
TEST(PQTree, ReducingSubtreesEqualsReducingTheirLeaves) {
  std::mt19937 rng(99);
  for (int n = 2; n <= 7; ++n) {
    const AllOrders all(n);
    for (int s = 0; s < 300; ++s) {
      PQTree by_nodes(n);
      std::vector<int> hidden(static_cast<size_t>(n));
      std::iota(hidden.begin(), hidden.end(), 0);
      std::shuffle(hidden.begin(), hidden.end(), rng);
      std::string history = "n=" + std::to_string(n);
      for (int step = 0; step < 6; ++step) {
        PQTree by_leaves = by_nodes;
        const std::vector<NodeId> nodes = random_subtrees(by_nodes, rng);
        std::vector<int> leaves;
        for (NodeId x : nodes) leaves_under(by_nodes, x, leaves);
        history += " " + text_of(leaves);
        const bool ok = by_leaves.reduce(leaves);
        ASSERT_EQ(by_nodes.reduce_subtrees(nodes), ok) << history;
        EXPECT_EQ(by_nodes.restrictions(), by_leaves.restrictions()) << history;
        for (const std::vector<int>& order : all.orders)
          ASSERT_EQ(by_nodes.admits(order), by_leaves.admits(order)) << history << " order " << text_of(order);
        expect_well_formed(by_nodes, history);
        // Then a random set of leaves, so that later subtrees come from richer trees.
        const std::vector<int> set = random_set(rng, hidden);
        by_nodes.reduce(set);
      }
    }
  }
}

TEST(PQTree, BadInputIsReported) {
  PQTree tree(4);
  ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1}));
  const std::string before = tree.describe();
  auto message = [&](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message([&] { tree.reduce(std::vector<int>{1, 4}); }),
            "PQTree::reduce: leaf 4 is out of range [0, 4)");
  EXPECT_EQ(message([&] { tree.reduce(std::vector<int>{-1, 2}); }),
            "PQTree::reduce: leaf -1 is out of range [0, 4)");
  EXPECT_EQ(message([&] { tree.reduce(std::vector<int>{2, 3, 2}); }),
            "PQTree::reduce: leaf 2 appears more than once");
  EXPECT_EQ(message([&] { tree.reduce(std::vector<int>{5}); }),
            "PQTree::reduce: leaf 5 is out of range [0, 4)");
  const NodeId pair = tree.parent(tree.leaf_node(0));
  EXPECT_EQ(message([&] { tree.reduce_subtrees(std::vector<NodeId>{pair, tree.leaf_node(1)}); }),
            "PQTree::reduce_subtrees: node 1 lies inside node " + std::to_string(pair) + ", both given");
  EXPECT_EQ(message([&] { tree.reduce_subtrees(std::vector<NodeId>{2, 2}); }),
            "PQTree::reduce_subtrees: node 2 appears more than once");
  EXPECT_NE(message([&] { tree.reduce_subtrees(std::vector<NodeId>{2, 1000}); }), "(no error)");
  EXPECT_EQ(tree.describe(), before);
  expect_well_formed(tree, before);
  EXPECT_NE(message([&] { tree.lowest_common_ancestor(std::vector<int>{}); }), "(no error)");
  EXPECT_NE(message([&] { tree.lowest_common_ancestor(std::vector<int>{9}); }), "(no error)");
  EXPECT_NE(message([&] { tree.admits(std::vector<int>{0, 1, 2}); }), "(no error)");
  EXPECT_NE(message([&] { tree.admits(std::vector<int>{0, 1, 1, 3}); }), "(no error)");
  EXPECT_NE(message([&] { tree.leaf_node(4); }), "(no error)");
  EXPECT_NE(message([&] { tree.parent(1000); }), "(no error)");
  EXPECT_NE(message([&] { PQTree bad(-1); }), "(no error)");
}

}  // namespace
}  // namespace vjit::layout
