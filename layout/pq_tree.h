#pragma once
// PQ-tree (Booth & Lueker, "Testing for the consecutive ones property, interval
// graphs, and graph planarity using PQ-tree algorithms", JCSS 1976): the set of
// all orders of n leaves in which each of a list of subsets is consecutive.
//
//   leaf     one element 0..n-1
//   P-node   its children may appear in any order
//   Q-node   its children appear in the listed order or reversed
//
// The frontier (the leaves left to right) of any tree obtained from this one
// by permuting P-node children and reversing Q-nodes is an admitted order, and
// every admitted order is such a frontier. reduce(S) restricts the tree to the
// orders in which S is consecutive, with Booth & Lueker's BUBBLE pass (find the
// pertinent subtree) and REDUCE pass (templates L1, P1–P6, Q1–Q3 applied bottom
// up), in time linear in |S| (amortised over a sequence of reductions).
//
// This module depends on nothing else in vjit; the layout planner
// (layout/aligned_order.h) and the runtime's PQ-tree memory planner use it.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vjit::layout {

class PQTree {
 public:
  enum class Kind : uint8_t { Leaf, P, Q };
  using NodeId = int;
  static constexpr NodeId kNone = -1;

  PQTree() = default;
  explicit PQTree(int num_leaves) { reset(num_leaves); }

  // The universal tree over `num_leaves` leaves (every order admitted): one
  // P-node over all of them (a single leaf alone). Keeps the capacity of every
  // buffer, so resetting to a size seen before allocates nothing.
  void reset(int num_leaves);
  int num_leaves() const;

  // Restricts the tree to the orders in which `leaves` (distinct, each in
  // [0, num_leaves)) are consecutive. Returns false, leaving the tree exactly
  // as it was, when no admitted order has them consecutive. Sets of fewer than
  // two leaves, or of every leaf, always succeed and change nothing. When
  // `changed` is given, the nodes the reduction created or whose children it
  // changed are appended to it (for the layout planner's BROADCASTCONSTRAINT).
  bool reduce(std::span<const int> leaves, std::vector<NodeId>* changed = nullptr);

  // --- structure (valid until the next reset or successful reduce) ---
  NodeId root() const;
  Kind kind(NodeId node) const;
  int leaf(NodeId node) const;         // the leaf a Leaf node stands for
  NodeId leaf_node(int leaf) const;    // the node of a leaf
  NodeId parent(NodeId node) const;    // kNone at the root
  // Children in their current order (a Q-node's left to right).
  void children(NodeId node, std::vector<NodeId>& out) const;
  int num_children(NodeId node) const;
  // Whether `node` is alive (ids of nodes a reduction removed may be reused).
  bool alive(NodeId node) const;
  // The deepest node whose subtree contains every leaf of `leaves` (non-empty).
  NodeId lowest_common_ancestor(std::span<const int> leaves) const;

  // The frontier: every leaf once, in one admitted order.
  void frontier(std::vector<int>& order) const;
  // Whether `order` (a permutation of the leaves) is admitted.
  bool admits(std::span<const int> order) const;
  // Structure in text, e.g. "P(0 Q(1 2 3) 4)", for tests and logs.
  std::string describe() const;

 private:
  // Representation chosen by the implementation (pq_tree.cpp).
  struct Impl;
  // ... see pq_tree.cpp
};

}  // namespace vjit::layout
