// PQ-tree (Booth & Lueker 1976). See pq_tree.h for the model and the
// representation.
//
// reduce(S) runs in two passes so that an infeasible S leaves the tree as it
// was without an undo log:
//   1. BUBBLE, then the REDUCE order with every template's *match* test only:
//      which nodes are pertinent, the order children-first, the pertinent root,
//      and for each node whether it is full or partial. Only scratch (marks_)
//      is written. Any template that fails to match makes reduce return false.
//   2. The same order again, now applying the templates (L1, P1–P6, Q1–Q3).
//      Each template only touches the node, its pertinent children, and the
//      slot the node occupies in its parent, so the ids of the nodes still to
//      be processed stay valid.
// Both passes cost O(pertinent subtree) as in Booth & Lueker (so O(|S|)
// amortised over a sequence of reductions), plus the small-into-large parent
// relabelling when a partial Q-node is absorbed (O(log n) per node amortised).
#include "layout/pq_tree.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace vjit::layout {

// --- pool and list primitives ----------------------------------------------

PQTree::NodeId PQTree::new_node(Kind kind) {
  NodeId id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<NodeId>(nodes_.size());
    nodes_.emplace_back();
    marks_.emplace_back();
  }
  nodes_[id] = Node{};
  nodes_[id].kind = kind;
  nodes_[id].alive = true;
  nodes_[id].own_list = new_list(id);
  // A fresh node starts this reduction with clean scratch, even when its id
  // was freed earlier in the same reduction.
  marks_[id] = Mark{};
  marks_[id].stamp = epoch_;
  return id;
}

void PQTree::free_node(NodeId node) {
  Node& n = nodes_[node];
  if (n.own_list >= 0) release_list(n.own_list);
  n = Node{};
  free_nodes_.push_back(node);
}

int PQTree::new_list(NodeId owner) {
  int list;
  if (!free_lists_.empty()) {
    list = free_lists_.back();
    free_lists_.pop_back();
  } else {
    list = static_cast<int>(list_owner_.size());
    list_owner_.push_back(kNone);
  }
  list_owner_[list] = owner;
  return list;
}

void PQTree::release_list(int list) {
  list_owner_[list] = kNone;
  free_lists_.push_back(list);
}

// The sibling of `node` that is not `prev` (walking a child list).
PQTree::NodeId PQTree::next_sibling(NodeId node, NodeId prev) const {
  const Node& n = nodes_[node];
  return n.sib[0] == prev ? n.sib[1] : n.sib[0];
}

void PQTree::replace_sibling(NodeId node, NodeId old_sib, NodeId new_sib) {
  Node& n = nodes_[node];
  if (n.sib[0] == old_sib) {
    n.sib[0] = new_sib;
  } else {
    n.sib[1] = new_sib;
  }
}

// Links `sib` into a free sibling slot of `end_node`, an end of its list.
void PQTree::attach_sibling(NodeId end_node, NodeId sib) {
  Node& n = nodes_[end_node];
  if (n.sib[0] == kNone) {
    n.sib[0] = sib;
  } else {
    n.sib[1] = sib;
  }
}

// Appends `child` at end `side` (0 or 1) of `parent`'s children.
void PQTree::append_child(NodeId parent, NodeId child, int side) {
  Node& p = nodes_[parent];
  Node& c = nodes_[child];
  c.in_list = p.own_list;
  c.sib[0] = c.sib[1] = kNone;
  if (p.num_children == 0) {
    p.end[0] = p.end[1] = child;
  } else {
    const NodeId old_end = p.end[side];
    attach_sibling(old_end, child);
    c.sib[0] = old_end;
    p.end[side] = child;
  }
  ++p.num_children;
}

void PQTree::remove_child(NodeId parent, NodeId child) {
  Node& c = nodes_[child];
  const NodeId a = c.sib[0];
  const NodeId b = c.sib[1];
  if (a != kNone) replace_sibling(a, child, b);
  if (b != kNone) replace_sibling(b, child, a);
  Node& p = nodes_[parent];
  const NodeId new_end = a != kNone ? a : b;
  for (NodeId& end : p.end) {
    if (end == child) end = new_end;
  }
  --p.num_children;
  c.in_list = -1;
  c.sib[0] = c.sib[1] = kNone;
}

// Puts `new_child` (detached) where `old_child` is; `parent` kNone: the root.
void PQTree::replace_child(NodeId parent, NodeId old_child, NodeId new_child) {
  Node& o = nodes_[old_child];
  Node& n = nodes_[new_child];
  n.in_list = o.in_list;
  n.sib[0] = o.sib[0];
  n.sib[1] = o.sib[1];
  if (parent == kNone) {
    root_ = new_child;
  } else {
    for (const NodeId s : o.sib) {
      if (s != kNone) replace_sibling(s, old_child, new_child);
    }
    for (NodeId& end : nodes_[parent].end) {
      if (end == old_child) end = new_child;
    }
  }
  o.in_list = -1;
  o.sib[0] = o.sib[1] = kNone;
}

// Parent pointers for absorbing Q-node `child` into its parent Q-node: the
// children of the shorter list move to the longer one, which `parent` owns
// afterwards. A node moves only into a list at least twice as long as its old
// one, hence O(log n) moves per node.
void PQTree::adopt_children_lists(NodeId parent, NodeId child) {
  Node& p = nodes_[parent];
  Node& c = nodes_[child];
  if (c.num_children <= p.num_children - 1) {
    NodeId prev = kNone;
    for (NodeId x = c.end[0]; x != kNone;) {
      nodes_[x].in_list = p.own_list;
      const NodeId next = next_sibling(x, prev);
      prev = x;
      x = next;
    }
    release_list(c.own_list);
  } else {
    NodeId prev = kNone;
    for (NodeId x = p.end[0]; x != kNone;) {
      if (x != child) nodes_[x].in_list = c.own_list;
      const NodeId next = next_sibling(x, prev);
      prev = x;
      x = next;
    }
    release_list(p.own_list);
    p.own_list = c.own_list;
    list_owner_[p.own_list] = parent;
  }
  c.own_list = -1;
}

// Replaces the partial Q-node `child` of a Q-node by its own children, its
// full end (end[1]) next to `toward` (a sibling of `child`, or kNone: toward
// the end of the parent's list that `child` occupies). Frees `child`.
void PQTree::splice(NodeId child, NodeId toward) {
  const NodeId parent = parent_of(child);
  adopt_children_lists(parent, child);
  const Node c = nodes_[child];
  const NodeId other = c.sib[0] == toward ? c.sib[1] : c.sib[0];
  const NodeId full_end = c.end[1];
  const NodeId empty_end = c.end[0];
  Node& p = nodes_[parent];
  // When a side has no sibling, `child` is that end of the parent's list
  // (never both: the parent has other children).
  const int child_side = p.end[0] == child ? 0 : 1;
  if (toward != kNone) {
    replace_sibling(toward, child, full_end);
    attach_sibling(full_end, toward);
  } else {
    p.end[child_side] = full_end;
  }
  if (other != kNone) {
    replace_sibling(other, child, empty_end);
    attach_sibling(empty_end, other);
  } else {
    p.end[child_side] = empty_end;
  }
  p.num_children += c.num_children - 1;
  free_node(child);
}

// --- scratch ------------------------------------------------------------------

void PQTree::next_epoch() {
  if (++epoch_ == 0) {  // wrapped: forget every stamp
    for (Mark& m : marks_) m.stamp = 0;
    epoch_ = 1;
  }
}

PQTree::Mark& PQTree::mark(NodeId node) {
  Mark& m = marks_[node];
  if (m.stamp != epoch_) {
    m = Mark{};
    m.stamp = epoch_;
  }
  return m;
}

void PQTree::add_to_group(NodeId parent, NodeId child, Label label) {
  mark(child).label = label;
  Mark& p = mark(parent);
  if (label == Label::Full) {
    marks_[child].next_in_group = p.full_head;
    p.full_head = child;
    ++p.full_count;
  } else {
    marks_[child].next_in_group = p.partial_head;
    p.partial_head = child;
    ++p.partial_count;
  }
}

// --- public: construction -------------------------------------------------

void PQTree::reset(int num_leaves) {
  if (num_leaves < 0) {
    throw std::invalid_argument("PQTree::reset: num_leaves is " + std::to_string(num_leaves) +
                                ", must be >= 0");
  }
  num_leaves_ = num_leaves;
  restrictions_ = 0;
  nodes_.clear();
  marks_.clear();
  list_owner_.clear();
  free_nodes_.clear();
  free_lists_.clear();
  epoch_ = 0;
  nodes_.resize(static_cast<size_t>(num_leaves));
  marks_.resize(static_cast<size_t>(num_leaves));
  for (Node& n : nodes_) n.alive = true;
  if (num_leaves == 0) {
    root_ = kNone;
  } else if (num_leaves == 1) {
    root_ = 0;
  } else {
    root_ = new_node(Kind::P);
    for (int i = 0; i < num_leaves; ++i) append_child(root_, i, 1);
  }
}

int PQTree::num_leaves() const { return num_leaves_; }

// --- reduce, pass 1 ---------------------------------------------------------

// Checks range and distinctness; marks each leaf `reached` and `given` (this epoch).
void PQTree::validate_leaves(std::span<const int> leaves, const char* what) {
  for (const int leaf : leaves) {
    if (leaf < 0 || leaf >= num_leaves_) {
      throw std::invalid_argument(std::string("PQTree::") + what + ": leaf " + std::to_string(leaf) +
                                  " is out of range [0, " + std::to_string(num_leaves_) + ")");
    }
    Mark& m = mark(leaf);
    if (m.reached) {
      throw std::invalid_argument(std::string("PQTree::") + what + ": leaf " + std::to_string(leaf) +
                                  " appears more than once");
    }
    m.reached = true;
    m.given = true;
  }
}

// Checks that the nodes are live and distinct; marks each `reached` and
// `given` (that none lies inside another's subtree, BUBBLE checks).
void PQTree::validate_subtrees(std::span<const NodeId> nodes) {
  for (const NodeId node : nodes) {
    check_node(node, "reduce_subtrees");
    Mark& m = mark(node);
    if (m.reached) {
      throw std::invalid_argument("PQTree::reduce_subtrees: node " + std::to_string(node) + " appears more than once");
    }
    m.reached = true;
    m.given = true;
  }
}

// BUBBLE: counts, for every pertinent node, its pertinent children. Climbs
// from the leaves breadth first until one node is left (it, or the tree's
// root, contains all of S). With exact parent pointers no node is blocked;
// the climb may pass the pertinent root by at most as many steps as were
// taken below it.
void PQTree::bubble(std::span<const NodeId> given) {
  queue_.assign(given.begin(), given.end());
  size_t head = 0;
  size_t off_the_top = 0;
  while (queue_.size() - head + off_the_top > 1) {
    const NodeId x = queue_[head++];
    const NodeId y = parent_of(x);
    if (y == kNone) {
      off_the_top = 1;
      continue;
    }
    Mark& my = mark(y);
    if (my.given) [[unlikely]] {
      throw std::invalid_argument("PQTree::reduce_subtrees: node " + std::to_string(x) + " lies inside node " +
                                  std::to_string(y) + ", both given");
    }
    ++my.pertinent_children;
    if (!my.reached) {
      my.reached = true;
      queue_.push_back(y);
    }
  }
}

// REDUCE's order with match tests only: fills order_ (children before parents,
// the pertinent root last; the given nodes first) and labels every pertinent
// non-root node. A given node is full (L1 for a leaf); pertinent_leaves counts
// given nodes.
bool PQTree::find_reduction_order(std::span<const NodeId> given) {
  const int size = static_cast<int>(given.size());
  order_.clear();
  queue_.assign(given.begin(), given.end());
  for (const NodeId node : given) mark(node).pertinent_leaves = 1;
  for (size_t head = 0; head < queue_.size(); ++head) {
    const NodeId x = queue_[head];
    order_.push_back(x);
    const bool is_root = mark(x).pertinent_leaves == size;
    Label label = Label::Full;
    if (head >= given.size() && !classify(x, is_root, label)) return false;
    if (is_root) return true;
    const NodeId y = parent_of(x);
    Mark& my = mark(y);
    my.pertinent_leaves += marks_[x].pertinent_leaves;
    add_to_group(y, x, label);
    if (--my.pertinent_children == 0) queue_.push_back(y);
  }
  throw std::logic_error("PQTree::reduce: the pertinent root was never reached (internal error)");
}

// Whether a template matches `node` (all its pertinent children labelled),
// and the label it gives: full (L1, P1, Q1) or partial.
bool PQTree::classify(NodeId node, bool is_root, Label& label) {
  const Node& n = nodes_[node];
  const Mark& m = mark(node);
  label = Label::Full;
  if (n.kind == Kind::Leaf) return true;
  const int empty = n.num_children - m.full_count - m.partial_count;
  if (m.partial_count == 0 && empty == 0) return true;
  label = Label::Partial;
  if (n.kind == Kind::P) return m.partial_count <= (is_root ? 2 : 1);  // P2–P6
  return q_node_matches(node, is_root);                                  // Q2, Q3
}

// Q2 (not the root): from one end, full children, at most one partial, then
// empty ones. Q3 (the root): the pertinent children are consecutive and only
// the two at the ends of that run may be partial.
bool PQTree::q_node_matches(NodeId node, bool is_root) {
  const Mark& m = mark(node);
  const int pertinent = m.full_count + m.partial_count;
  if (m.partial_count > 2 || (!is_root && m.partial_count > 1)) return false;
  const NodeId start = m.full_head != kNone ? m.full_head : m.partial_head;
  // Walk the run of pertinent children around `start` both ways.
  NodeId run_end[2];
  int run_length = 1;
  for (int side = 0; side < 2; ++side) {
    NodeId prev = start;
    NodeId x = nodes_[start].sib[side];
    run_end[side] = start;
    while (x != kNone && mark(x).label != Label::Empty) {
      ++run_length;
      run_end[side] = x;
      const NodeId next = next_sibling(x, prev);
      prev = x;
      x = next;
    }
  }
  if (run_length != pertinent) return false;
  for (NodeId c = m.partial_head; c != kNone; c = marks_[c].next_in_group) {
    if (c != run_end[0] && c != run_end[1]) return false;
  }
  if (is_root) return true;
  auto is_list_end = [&](NodeId x) { return nodes_[x].sib[0] == kNone || nodes_[x].sib[1] == kNone; };
  // The run starts at an end of the node's list and any partial child sits at
  // its other end.
  auto fits_from = [&](NodeId at_list_end, NodeId far_end) {
    return is_list_end(at_list_end) && (m.partial_count == 0 || m.partial_head == far_end);
  };
  return fits_from(run_end[0], run_end[1]) || fits_from(run_end[1], run_end[0]);
}

// --- reduce, pass 2 ---------------------------------------------------------

void PQTree::apply_reduction(size_t given, std::vector<NodeId>* changed) {
  next_epoch();  // labels and groups are rebuilt as the templates run
  touched_.clear();
  restricting_ = false;
  for (size_t i = 0; i < order_.size(); ++i) {
    const bool is_root = i + 1 == order_.size();
    // The given nodes (order_'s first) are full as they stand (L1 for a leaf).
    const Outcome out = i < given ? Outcome{order_[i], Label::Full} : apply_template(order_[i], is_root);
    if (is_root) break;
    add_to_group(parent_of(out.node), out.node, out.label);
  }
  if (restricting_) ++restrictions_;
  if (changed == nullptr) return;
  // Report each node once, and only nodes still alive. Mark::reached is free
  // in this epoch (pass 2 does not use it), so it serves as "reported".
  for (const NodeId x : touched_) {
    if (!nodes_[x].alive || mark(x).reached) continue;
    marks_[x].reached = true;
    changed->push_back(x);
  }
}

void PQTree::note_changed(NodeId node) {
  if (node != kNone) touched_.push_back(node);
}

PQTree::Outcome PQTree::apply_template(NodeId node, bool is_root) {
  const Node& n = nodes_[node];
  if (n.kind == Kind::Leaf) return {node, Label::Full};  // L1
  const Mark& m = mark(node);
  const int empty = n.num_children - m.full_count - m.partial_count;
  if (m.partial_count == 0 && empty == 0) return {node, Label::Full};  // P1, Q1
  if (n.kind == Kind::P) return is_root ? p_root_template(node) : p_nonroot_template(node);
  return is_root ? q_root_template(node) : q_nonroot_template(node);
}

// Detaches the full children of `node`: the one child, or a new P-node over
// them when there are several; kNone when there are none.
PQTree::NodeId PQTree::take_full_group(NodeId node) {
  const Mark m = mark(node);
  if (m.full_count == 0) return kNone;
  if (m.full_count == 1) {
    remove_child(node, m.full_head);
    return m.full_head;
  }
  const NodeId group = new_node(Kind::P);
  marks_[group].label = Label::Full;
  for (NodeId x = m.full_head; x != kNone; x = marks_[x].next_in_group) {
    remove_child(node, x);
    append_child(group, x, 1);
  }
  note_changed(group);
  return group;
}

// What is left of a P-node whose pertinent children were taken: the node
// itself with its (>= 2) empty children, its one child, or kNone; frees the
// node in the last two cases. The node is already detached from its parent.
PQTree::NodeId PQTree::detach_empty_part(NodeId node) {
  const int count = nodes_[node].num_children;
  if (count >= 2) {
    note_changed(node);
    return node;
  }
  NodeId only = kNone;
  if (count == 1) {
    only = nodes_[node].end[0];
    remove_child(node, only);
  }
  free_node(node);
  return only;
}

// P2, P4, P6 (the pertinent root is a P-node).
PQTree::Outcome PQTree::p_root_template(NodeId node) {
  const Mark m = mark(node);
  restricting_ = true;  // two or more pertinent children, some empty: grouped
  const NodeId full = take_full_group(node);
  note_changed(node);
  if (m.partial_count == 0) {  // P2: the full children under one new P-node
    append_child(node, full, 1);
    return {node, Label::Partial};
  }
  // P4 / P6: the full children at the full end of the partial child, then the
  // second partial child (reversed) after them: one Q-node.
  const NodeId merged = m.partial_head;
  note_changed(merged);
  if (full != kNone) append_child(merged, full, 1);
  if (m.partial_count == 2) {
    const NodeId second = marks_[merged].next_in_group;
    remove_child(node, second);
    append_child(merged, second, 1);
    splice(second, nodes_[second].sib[0]);
  }
  if (nodes_[node].num_children == 1) {  // no empty children: `merged` replaces it
    const NodeId parent = parent_of(node);
    remove_child(node, merged);
    replace_child(parent, node, merged);
    note_changed(parent);
    free_node(node);
  }
  return {merged, Label::Partial};
}

// P3, P5 (a partial P-node below the pertinent root): becomes a Q-node with
// the empty children at end 0 and the full ones at end 1.
PQTree::Outcome PQTree::p_nonroot_template(NodeId node) {
  const Mark m = mark(node);
  restricting_ = true;  // a P-node turns into a Q-node
  const NodeId parent = parent_of(node);
  note_changed(parent);
  const NodeId full = take_full_group(node);
  NodeId result;
  if (m.partial_count == 0) {  // P3: a new Q-node
    result = new_node(Kind::Q);
    replace_child(parent, node, result);
    append_child(result, full, 1);
  } else {  // P5: the partial child takes the node's place
    result = m.partial_head;
    remove_child(node, result);
    replace_child(parent, node, result);
    if (full != kNone) append_child(result, full, 1);
  }
  note_changed(result);
  const NodeId empty = detach_empty_part(node);
  if (empty != kNone) append_child(result, empty, 0);
  return {result, Label::Partial};
}

// The sibling of `node` that is pertinent (full or partial), or kNone.
PQTree::NodeId PQTree::pertinent_neighbour(NodeId node) {
  for (const NodeId s : nodes_[node].sib) {
    if (s != kNone && mark(s).label != Label::Empty) return s;
  }
  return kNone;
}

// Q3: each partial child's children join the node, full ends inward.
PQTree::Outcome PQTree::q_root_template(NodeId node) {
  const Mark m = mark(node);
  NodeId partial[2] = {m.partial_head, kNone};
  if (partial[0] != kNone) partial[1] = marks_[partial[0]].next_in_group;
  for (const NodeId c : partial) {
    if (c != kNone) splice(c, pertinent_neighbour(c));
  }
  // Without a partial child the full children were a run already.
  restricting_ = restricting_ || partial[0] != kNone;
  note_changed(node);
  return {node, Label::Partial};
}

// Q2: the partial child (if any) joins the node; then the node is oriented
// with its full end at end 1.
PQTree::Outcome PQTree::q_nonroot_template(NodeId node) {
  const Mark m = mark(node);
  const Node& n = nodes_[node];
  int full_side;
  if (mark(n.end[0]).label == Label::Full) {
    full_side = 0;
  } else if (mark(n.end[1]).label == Label::Full) {
    full_side = 1;
  } else {
    full_side = n.end[0] == m.partial_head ? 0 : 1;
  }
  if (m.partial_head != kNone) splice(m.partial_head, pertinent_neighbour(m.partial_head));
  // Without a partial child the node is only turned around.
  restricting_ = restricting_ || m.partial_head != kNone;
  if (full_side == 0) std::swap(nodes_[node].end[0], nodes_[node].end[1]);
  note_changed(node);
  return {node, Label::Partial};
}

bool PQTree::reduce(std::span<const int> leaves, std::vector<NodeId>* changed) {
  next_epoch();
  validate_leaves(leaves, "reduce");
  if (leaves.size() < 2 || static_cast<int>(leaves.size()) == num_leaves_) return true;
  return reduce_given(leaves, changed);  // leaf i is node i
}

bool PQTree::reduce_subtrees(std::span<const NodeId> nodes, std::vector<NodeId>* changed) {
  next_epoch();
  validate_subtrees(nodes);
  if (nodes.size() < 2) return true;
  return reduce_given(nodes, changed);
}

// BUBBLE and REDUCE from the given nodes, validated and marked this epoch.
bool PQTree::reduce_given(std::span<const NodeId> given, std::vector<NodeId>* changed) {
  bubble(given);
  if (!find_reduction_order(given)) return false;
  apply_reduction(given.size(), changed);
  return true;
}

// --- structure --------------------------------------------------------------

PQTree::NodeId PQTree::root() const { return root_; }

void PQTree::children(NodeId node, std::vector<NodeId>& out) const {
  check_node(node, "children");
  out.clear();
  NodeId prev = kNone;
  for (NodeId x = nodes_[node].end[0]; x != kNone;) {
    out.push_back(x);
    const NodeId next = next_sibling(x, prev);
    prev = x;
    x = next;
  }
}

void PQTree::throw_dead_node(NodeId node, const char* what) const {
  throw std::invalid_argument(std::string("PQTree::") + what + ": node " + std::to_string(node) +
                              " is not a live node of this tree");
}

void PQTree::throw_not_a_leaf(NodeId node) const {
  throw std::invalid_argument("PQTree::leaf: node " + std::to_string(node) + " is not a leaf");
}

void PQTree::throw_leaf_out_of_range(int leaf) const {
  throw std::invalid_argument("PQTree::leaf_node: leaf " + std::to_string(leaf) + " is out of range [0, " +
                              std::to_string(num_leaves_) + ")");
}

bool PQTree::alive(NodeId node) const {
  return node >= 0 && node < static_cast<NodeId>(nodes_.size()) && nodes_[node].alive;
}

// Marks the path from the first leaf to the root with each node's distance
// from that leaf; every other leaf climbs until it meets a marked node and
// passes on where that node joins the first path. Cost: the union of the
// leaves' paths up to where they meet.
PQTree::NodeId PQTree::lowest_common_ancestor(std::span<const int> leaves) const {
  if (leaves.empty()) throw std::invalid_argument("PQTree::lowest_common_ancestor: no leaves given");
  for (const int leaf : leaves) {
    if (leaf < 0 || leaf >= num_leaves_) {
      throw std::invalid_argument("PQTree::lowest_common_ancestor: leaf " + std::to_string(leaf) +
                                  " is out of range [0, " + std::to_string(num_leaves_) + ")");
    }
  }
  if (lca_stamp_.size() < nodes_.size()) {
    lca_stamp_.resize(nodes_.size(), 0);
    lca_join_.resize(nodes_.size(), 0);
  }
  if (++lca_epoch_ == 0) {
    std::fill(lca_stamp_.begin(), lca_stamp_.end(), 0);
    lca_epoch_ = 1;
  }
  lca_path_.clear();
  for (NodeId x = leaves[0]; x != kNone; x = parent_of(x)) {
    lca_stamp_[x] = lca_epoch_;
    lca_join_[x] = static_cast<int>(lca_path_.size());
    lca_path_.push_back(x);
  }
  int highest = 0;
  for (const int leaf : leaves.subspan(1)) {
    lca_climb_.clear();
    NodeId x = leaf;
    while (lca_stamp_[x] != lca_epoch_) {
      lca_climb_.push_back(x);
      x = parent_of(x);
    }
    const int join = lca_join_[x];
    for (const NodeId c : lca_climb_) {
      lca_stamp_[c] = lca_epoch_;
      lca_join_[c] = join;
    }
    highest = std::max(highest, join);
  }
  return lca_path_[static_cast<size_t>(highest)];
}

// --- orders -----------------------------------------------------------------

void PQTree::frontier(std::vector<int>& order) const {
  order.clear();
  if (root_ == kNone) return;
  std::vector<NodeId> stack{root_};
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    if (nodes_[x].kind == Kind::Leaf) {
      order.push_back(x);
      continue;
    }
    // Pushed from end 1 back to end 0, so end 0 comes out first.
    NodeId prev = kNone;
    for (NodeId c = nodes_[x].end[1]; c != kNone;) {
      stack.push_back(c);
      const NodeId next = next_sibling(c, prev);
      prev = c;
      c = next;
    }
  }
}

// Each node's leaves must be consecutive in `order`; a Q-node's children must
// follow each other in its order or the reverse.
bool PQTree::admits(std::span<const int> order) const {
  const size_t n = static_cast<size_t>(num_leaves_);
  if (order.size() != n) {
    throw std::invalid_argument("PQTree::admits: order has " + std::to_string(order.size()) +
                                " entries, the tree " + std::to_string(n) + " leaves");
  }
  struct Span {
    int low = 0, high = -1, count = 0;  // positions of a subtree's leaves
  };
  std::vector<Span> spans(nodes_.size());
  for (size_t p = 0; p < n; ++p) {
    const int leaf = order[p];
    if (leaf < 0 || leaf >= num_leaves_ || spans[static_cast<size_t>(leaf)].count != 0) {
      throw std::invalid_argument("PQTree::admits: order is not a permutation of 0.." +
                                  std::to_string(num_leaves_ - 1) + " (entry " + std::to_string(leaf) + ")");
    }
    spans[static_cast<size_t>(leaf)] = {static_cast<int>(p), static_cast<int>(p), 1};
  }
  if (root_ == kNone) return true;
  // Breadth-first order, visited backwards: children before parents.
  std::vector<NodeId> queue;
  queue.reserve(nodes_.size());
  queue.push_back(root_);
  for (size_t head = 0; head < queue.size(); ++head) {
    NodeId prev = kNone;
    for (NodeId c = nodes_[queue[head]].end[0]; c != kNone;) {
      queue.push_back(c);
      const NodeId next = next_sibling(c, prev);
      prev = c;
      c = next;
    }
  }
  for (auto it = queue.rbegin(); it != queue.rend(); ++it) {
    const Node& node = nodes_[*it];
    if (node.kind == Kind::Leaf) continue;
    Span whole{num_leaves_, -1, 0};
    int direction = 0;  // Q-node: +1 children left to right, -1 reversed
    const Span* last = nullptr;
    NodeId prev = kNone;
    for (NodeId c = node.end[0]; c != kNone;) {
      const Span& span = spans[static_cast<size_t>(c)];
      whole = {std::min(whole.low, span.low), std::max(whole.high, span.high), whole.count + span.count};
      if (node.kind == Kind::Q && last != nullptr) {
        const int step = last->high + 1 == span.low ? 1 : span.high + 1 == last->low ? -1 : 0;
        if (step == 0 || (direction != 0 && step != direction)) return false;
        direction = step;
      }
      last = &span;
      const NodeId next = next_sibling(c, prev);
      prev = c;
      c = next;
    }
    if (whole.high - whole.low + 1 != whole.count) return false;
    spans[static_cast<size_t>(*it)] = whole;
  }
  return true;
}

std::string PQTree::describe() const {
  std::string text;
  if (root_ == kNone) return text;
  constexpr NodeId kClose = -2;
  std::vector<NodeId> stack{root_};
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    if (x == kClose) {
      text += ')';
      continue;
    }
    if (!text.empty() && text.back() != '(') text += ' ';
    const Node& node = nodes_[x];
    if (node.kind == Kind::Leaf) {
      text += std::to_string(x);
      continue;
    }
    text += node.kind == Kind::P ? "P(" : "Q(";
    stack.push_back(kClose);
    NodeId prev = kNone;
    for (NodeId c = node.end[1]; c != kNone;) {
      stack.push_back(c);
      const NodeId next = next_sibling(c, prev);
      prev = c;
      c = next;
    }
  }
  return text;
}

}  // namespace vjit::layout
