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
  // [0, num_leaves), else std::invalid_argument) are consecutive. Returns false, leaving the tree exactly
  // as it was, when no admitted order has them consecutive. Sets of fewer than
  // two leaves, or of every leaf, always succeed and change nothing. When
  // `changed` is given, the nodes the reduction created or whose children it
  // changed are appended to it (for the layout planner's BROADCASTCONSTRAINT).
  bool reduce(std::span<const int> leaves, std::vector<NodeId>* changed = nullptr);
  // reduce() of the leaves of `nodes` (distinct live nodes, none inside
  // another's subtree, else std::invalid_argument), at a cost that depends on
  // the nodes and the paths above them, not on how many leaves they hold:
  // each node is taken as full as it stands.
  bool reduce_subtrees(std::span<const NodeId> nodes, std::vector<NodeId>* changed = nullptr);
  // How many reductions since reset() removed admitted orders: a reduction
  // whose set was consecutive in every admitted order already (a node's
  // leaves, a run of a Q-node's children) leaves it unchanged, even when it
  // reports nodes in `changed` (a Q-node it only turned around, say).
  uint64_t restrictions() const { return restrictions_; }

  // --- structure (valid until the next reset or successful reduce) ---
  // A node id that is not alive gets std::invalid_argument.
  NodeId root() const;
  Kind kind(NodeId node) const;
  int leaf(NodeId node) const;         // the leaf a Leaf node stands for
  NodeId leaf_node(int leaf) const;    // the node of a leaf
  NodeId parent(NodeId node) const;    // kNone at the root; O(1) for every node
  // Children in their current order (a Q-node's left to right).
  void children(NodeId node, std::vector<NodeId>& out) const;
  int num_children(NodeId node) const;
  // The sibling of `node` on the other side from `neighbour` (one of its two
  // neighbours in the parent's child list, or kNone for its end side), kNone
  // past the end of the list; O(1). Walks a run of children without listing
  // every child of their parent.
  NodeId sibling_after(NodeId node, NodeId neighbour) const;
  bool are_siblings(NodeId a, NodeId b) const;  // adjacent in one child list
  // Whether `node` is alive (ids of nodes a reduction removed may be reused).
  bool alive(NodeId node) const;
  // The deepest node whose subtree contains every leaf of `leaves` (non-empty).
  // Costs the union of the leaves' paths up to where they meet. Uses scratch
  // of the tree: not to be called concurrently on one tree.
  NodeId lowest_common_ancestor(std::span<const int> leaves) const;

  // The frontier: every leaf once, in one admitted order.
  void frontier(std::vector<int>& order) const;
  // Whether `order` (a permutation of the leaves) is admitted: every node's
  // leaves consecutive, a Q-node's children in its order or the reverse. O(n).
  // Throws std::invalid_argument when `order` is not a permutation.
  bool admits(std::span<const int> order) const;
  // Structure in text, e.g. "P(0 Q(1 2 3) 4)", for tests and logs.
  std::string describe() const;

 private:
  // Representation (flat pools, index links, no per-node heap allocation):
  //  * nodes_ is a pool; leaf i is node i for the tree's lifetime, interior
  //    nodes come from a free list. A node's children form a list with
  //    undirected sibling links (sib[2], order-free, as in Booth & Lueker), so
  //    two Q-nodes are concatenated in O(1) and a Q-node is reversed by
  //    swapping its two ends.
  //  * Parent pointers are exact for every node, Q-node interior children
  //    included: a node names the child list holding it (in_list) and each
  //    list names its owner. Absorbing a partial Q-node into its parent
  //    relabels the shorter of the two lists (small into large), O(log n)
  //    relabels per node amortised, so parent() is O(1) and BUBBLE needs no
  //    blocked/pseudo-node machinery.
  //  * marks_ holds per-reduction scratch, valid where stamp == epoch_, so a
  //    reduction never clears arrays of the tree's size.
  enum class Label : uint8_t { Empty, Full, Partial };
  struct Node {
    Kind kind = Kind::Leaf;
    bool alive = false;
    NodeId sib[2] = {kNone, kNone};  // neighbours in the parent's child list
    NodeId end[2] = {kNone, kNone};  // the two end children
    int num_children = 0;
    int in_list = -1;   // child list holding this node; -1 at the root
    int own_list = -1;  // child list of this node's children; -1 for leaves
  };
  struct Mark {
    uint32_t stamp = 0;
    Label label = Label::Empty;
    bool reached = false;        // in S, or reached by BUBBLE
    bool given = false;          // one of the reduction's leaves or subtrees
    int pertinent_children = 0;  // BUBBLE's count, consumed by REDUCE
    int pertinent_leaves = 0;
    int full_count = 0;
    int partial_count = 0;
    NodeId full_head = kNone;  // full children, linked through next_in_group
    NodeId partial_head = kNone;
    NodeId next_in_group = kNone;
  };
  struct Outcome {
    NodeId node;
    Label label;
  };

  // Pool and list primitives.
  NodeId new_node(Kind kind);
  void free_node(NodeId node);
  int new_list(NodeId owner);
  void release_list(int list);
  NodeId parent_of(NodeId node) const;
  NodeId next_sibling(NodeId node, NodeId prev) const;
  void replace_sibling(NodeId node, NodeId old_sib, NodeId new_sib);
  void attach_sibling(NodeId end_node, NodeId sib);
  void append_child(NodeId parent, NodeId child, int side);
  void remove_child(NodeId parent, NodeId child);
  void replace_child(NodeId parent, NodeId old_child, NodeId new_child);
  void splice(NodeId child, NodeId toward);
  void adopt_children_lists(NodeId parent, NodeId child);
  // Scratch.
  void next_epoch();
  Mark& mark(NodeId node);
  void add_to_group(NodeId parent, NodeId child, Label label);
  // reduce's passes.
  void validate_leaves(std::span<const int> leaves, const char* what);
  void validate_subtrees(std::span<const NodeId> nodes);
  bool reduce_given(std::span<const NodeId> given, std::vector<NodeId>* changed);
  void bubble(std::span<const NodeId> given);
  bool find_reduction_order(std::span<const NodeId> given);
  bool classify(NodeId node, bool is_root, Label& label);
  bool q_node_matches(NodeId node, bool is_root);
  void apply_reduction(size_t given, std::vector<NodeId>* changed);
  Outcome apply_template(NodeId node, bool is_root);
  Outcome p_root_template(NodeId node);
  Outcome p_nonroot_template(NodeId node);
  Outcome q_root_template(NodeId node);
  Outcome q_nonroot_template(NodeId node);
  NodeId take_full_group(NodeId node);
  NodeId detach_empty_part(NodeId node);
  NodeId pertinent_neighbour(NodeId node);
  void note_changed(NodeId node);
  // The queries above are inline (the layout planner calls them in its inner
  // loops); their errors are thrown out of line.
  void check_node(NodeId node, const char* what) const {
    if (node < 0 || node >= static_cast<NodeId>(nodes_.size()) || !nodes_[node].alive) [[unlikely]]
      throw_dead_node(node, what);
  }
  [[noreturn]] void throw_dead_node(NodeId node, const char* what) const;
  [[noreturn]] void throw_not_a_leaf(NodeId node) const;
  [[noreturn]] void throw_leaf_out_of_range(int leaf) const;

  int num_leaves_ = 0;
  uint64_t restrictions_ = 0;
  bool restricting_ = false;  // the reduction in progress removes orders
  NodeId root_ = kNone;
  std::vector<Node> nodes_;
  std::vector<Mark> marks_;
  std::vector<NodeId> list_owner_;
  std::vector<NodeId> free_nodes_;
  std::vector<int> free_lists_;
  uint32_t epoch_ = 0;
  std::vector<NodeId> queue_;    // BUBBLE's and REDUCE's queue
  std::vector<NodeId> order_;    // pertinent nodes, children first, root last
  std::vector<NodeId> touched_;  // nodes a reduction created or changed
  // lowest_common_ancestor's scratch (so const queries on one tree must not
  // run concurrently).
  mutable std::vector<uint32_t> lca_stamp_;
  mutable std::vector<int> lca_join_;
  mutable std::vector<NodeId> lca_path_, lca_climb_;
  mutable uint32_t lca_epoch_ = 0;
};

inline PQTree::Kind PQTree::kind(NodeId node) const {
  check_node(node, "kind");
  return nodes_[node].kind;
}

inline int PQTree::leaf(NodeId node) const {
  check_node(node, "leaf");
  if (nodes_[node].kind != Kind::Leaf) [[unlikely]]
    throw_not_a_leaf(node);
  return node;  // leaf i is node i
}

inline PQTree::NodeId PQTree::leaf_node(int leaf) const {
  if (leaf < 0 || leaf >= num_leaves_) [[unlikely]]
    throw_leaf_out_of_range(leaf);
  return leaf;
}

inline PQTree::NodeId PQTree::parent(NodeId node) const {
  check_node(node, "parent");
  return parent_of(node);
}

inline int PQTree::num_children(NodeId node) const {
  check_node(node, "num_children");
  return nodes_[node].num_children;
}

inline PQTree::NodeId PQTree::sibling_after(NodeId node, NodeId neighbour) const {
  check_node(node, "sibling_after");
  return next_sibling(node, neighbour);
}

inline bool PQTree::are_siblings(NodeId a, NodeId b) const {
  check_node(a, "are_siblings");
  check_node(b, "are_siblings");
  return nodes_[a].in_list >= 0 && (nodes_[a].sib[0] == b || nodes_[a].sib[1] == b);
}

inline PQTree::NodeId PQTree::parent_of(NodeId node) const {
  const int list = nodes_[node].in_list;
  return list < 0 ? kNone : list_owner_[list];
}

}  // namespace vjit::layout
