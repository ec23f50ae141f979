// Aligned leaf orders: ED-Batch's PQ-tree memory allocation (ICML'23, §3.2,
// Algorithm 2; appendix B, Algorithms 3-6).
//
// solve() runs, on one PQ-tree over the n values:
//  1. ConstructPQTree: the accepted hard sets, then every batch's operands
//     (each must be consecutive). A batch one of whose operands cannot be made
//     consecutive is dropped; operands of it reduced before the failing one
//     stay reduced (the tree stays valid, it only admits fewer orders; undoing
//     would need a copy of the tree per batch).
//  2. BROADCASTCONSTRAINT, depth first: a stack of the batches (the last
//     added on top). A visit (settle_batch) walks operand 0's region onto
//     each other operand's (step 3's walk, without recording); at the lowest
//     node N that does not map, N's own constraints (GETSUBTREECONS: a
//     P-node's leaves; the leaves of each two adjacent children of a Q-node or
//     of the top run), mapped through the alignment, are reduced on the other
//     operand and N is tried again (N's children matched, so each one's image
//     is a node: the reduction is of those subtrees); when
//     that does not help, the other operand is walked onto operand 0 the same
//     way. When a round changes nothing, the paper's full broadcast (every
//     region constraint of every operand onto every other) is the last resort.
//     A failed reduction drops the batch (earlier ones stay, as in 1.). The
//     batches holding a value of a reduction that removed admitted orders
//     (PQTree::restrictions) are pushed again: a reduction of S restructures
//     only nodes with leaves in S, so an operand disjoint from S keeps its
//     region. A budget of pops (a multiple of batches + values) stops the
//     pass if it ever fails to settle; that only costs satisfied batches.
//  3. DECIDENODESORDER: per batch, a simultaneous bottom-up walk of operand
//     0's region and its image in each other operand (PARSEEQUIVNODEORDERPAIR):
//     node N (children c_i) maps to the common parent M of the images of its
//     children, which must have as many children and the same kind — except at
//     the top, where a run of a Q-node's children may map to a run of
//     another's. Each pair gives a relation: a parity for Q-nodes and nodes of
//     two children (same or reversed direction), a permutation beta for P-nodes
//     of three or more (child i of N sits where child beta(i) of M sits). The
//     relations go into an extended union-find (Algorithm 5: per node a parent
//     and the transform sigma to it; union by size, no path compression, so a
//     batch whose relations contradict the ones accepted before is undone from
//     a log and dropped).
//  4. GETLEAFORDER: an iterative DFS; every set root keeps its current child
//     order, every other node the order its transform to the root dictates.
//  5. satisfied(b) is checked on the final order (each operand consecutive and
//     at the same offsets as operand 0), never assumed.
//
// Departures from the paper and simplifications: reductions of a dropped
// batch are not undone in the tree (1., 2.); settling reduces only where the
// regions differ, and depth first rather than breadth first (on chains of
// batches breadth first costs a sweep per level of structure, depth first one
// sweep; the full broadcast stays as the fallback); the isomorphism test is
// structural (kinds and child counts); a P-node of three or more children
// facing a Q-node is a mismatch (settling turns it into a Q-node whenever the
// constraints say so); batches are applied in insertion order, so of two
// conflicting batches the earlier one usually wins.
//
// Completeness: when some order satisfies every hard set and every batch, no
// reduction fails (each broadcast constraint holds in that order), settled
// regions admit the same orders (so are isomorphic), and that order's own
// child orders satisfy every relation, so every batch is satisfied; the tests
// check this against brute force.
//
// Cost: construction O(sum |b|) (PQ-tree reduce is linear in the set; an
// operand that is a hard set is not reduced again); a visit O(k m) for walks
// (one frontier DFS of the source region per walk; a top run is matched by
// sibling links, not by listing its Q-node) plus the reductions it makes, each
// of as many subtrees as the node has children (PQTree::reduce_subtrees: the
// paths above them, not their leaves); the full broadcast reduces leaves;
// DECIDENODESORDER O(sum |b| log n) (finds
// without path compression, permutations as long as the P-node); GETLEAFORDER
// O(n). The paper's bound is O(sum |b| * max |b|): on chains, and on lattices
// whose characters chain every word's start constraint through the batch,
// reductions of leaves added up to many times the values (16x at 1024
// lattices, 6x at 64); as subtrees they stay near linear. Buffers
// are kept across reset() and reused (not verified to be allocation-free).
#include "layout/aligned_order.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace vjit::layout {

using NodeId = PQTree::NodeId;

// --- NodeScratch ---

void AlignedOrder::NodeScratch::clear() {
  if (++epoch_ == 0) {  // wrapped: forget every stamp
    std::fill(stamp_.begin(), stamp_.end(), 0u);
    epoch_ = 1;
  }
}

void AlignedOrder::NodeScratch::grow(size_t size) {
  size = std::max(size, 2 * stamp_.size());
  stamp_.resize(size, 0u);
  value_.resize(size, 0);
}

// --- problem ---

void AlignedOrder::reset(int num_values) {
  if (num_values < 0) throw std::invalid_argument("AlignedOrder::reset: negative number of values");
  num_values_ = num_values;
  tree_.reset(num_values);
  tree_has_batches_ = false;
  solved_ = false;
  hard_values_.clear();
  hard_begin_.assign(1, 0);
  hard_set_of_value_.assign(static_cast<size_t>(num_values), -1);
  values_.clear();
  batches_.clear();
  value_stamp_.assign(static_cast<size_t>(num_values), 0);
  index_of_value_.resize(static_cast<size_t>(num_values));
  value_epoch_ = 0;
}

namespace {

void check_values(std::span<const int> values, int num_values, const char* where) {
  for (int v : values) {
    if (v < 0 || v >= num_values) {
      throw std::invalid_argument(std::string(where) + ": value " + std::to_string(v) + " is outside [0, " +
                                  std::to_string(num_values) + ")");
    }
  }
}

}  // namespace

bool AlignedOrder::require_consecutive(std::span<const int> values) {
  check_values(values, num_values_, "AlignedOrder::require_consecutive");
  if (tree_has_batches_) rebuild_hard_sets();
  solved_ = false;
  // A set: repeated values count once.
  const size_t begin = hard_values_.size();
  ++value_epoch_;
  for (int v : values) {
    if (value_stamp_[v] == value_epoch_) continue;
    value_stamp_[v] = value_epoch_;
    hard_values_.push_back(v);
  }
  const std::span<const int> set(hard_values_.data() + begin, hard_values_.size() - begin);
  if (!tree_.reduce(set)) {
    hard_values_.resize(begin);
    return false;
  }
  for (int v : set) hard_set_of_value_[v] = static_cast<int>(hard_begin_.size()) - 1;
  hard_begin_.push_back(static_cast<int>(hard_values_.size()));
  return true;
}

int AlignedOrder::add_batch(std::span<const int> values, int num_operands) {
  if (num_operands < 1) {
    throw std::invalid_argument("AlignedOrder::add_batch: num_operands must be at least 1, got " +
                                std::to_string(num_operands));
  }
  if (values.size() % static_cast<size_t>(num_operands) != 0) {
    throw std::invalid_argument("AlignedOrder::add_batch: " + std::to_string(values.size()) +
                                " values do not split into " + std::to_string(num_operands) +
                                " operands of equal length");
  }
  check_values(values, num_values_, "AlignedOrder::add_batch");
  solved_ = false;
  Batch batch;
  batch.begin = static_cast<int>(values_.size());
  batch.num_operands = num_operands;
  batch.length = static_cast<int>(values.size() / static_cast<size_t>(num_operands));
  ++value_epoch_;
  for (int v : values) {
    if (value_stamp_[v] == value_epoch_) batch.distinct = false;
    value_stamp_[v] = value_epoch_;
  }
  values_.insert(values_.end(), values.begin(), values.end());
  batches_.push_back(batch);
  return static_cast<int>(batches_.size()) - 1;
}

int AlignedOrder::num_batches() const { return static_cast<int>(batches_.size()); }

bool AlignedOrder::satisfied(int batch) const {
  if (batch < 0 || batch >= num_batches()) {
    throw std::out_of_range("AlignedOrder::satisfied: no batch " + std::to_string(batch));
  }
  return solved_ && satisfied_[static_cast<size_t>(batch)] != 0;
}

std::span<const int> AlignedOrder::operand(int batch, int o) const {
  const Batch& b = batches_[static_cast<size_t>(batch)];
  return {values_.data() + b.begin + static_cast<size_t>(o) * b.length, static_cast<size_t>(b.length)};
}

void AlignedOrder::rebuild_hard_sets() {
  tree_.reset(num_values_);
  for (size_t s = 0; s + 1 < hard_begin_.size(); ++s) {
    const std::span<const int> set(hard_values_.data() + hard_begin_[s],
                                   static_cast<size_t>(hard_begin_[s + 1] - hard_begin_[s]));
    tree_.reduce(set);  // accepted before, in this order: succeeds again
  }
  tree_has_batches_ = false;
}

// --- solve ---

void AlignedOrder::solve(std::vector<int>& order) {
  if (tree_has_batches_) rebuild_hard_sets();
  tree_has_batches_ = true;
  const size_t num = batches_.size();
  active_.assign(num, 0);
  satisfied_.assign(num, 0);
  for (size_t b = 0; b < num; ++b) active_[b] = batches_[b].distinct ? 1 : 0;
  apply_operand_adjacency();
  index_batches_by_value();
  broadcast_constraints();
  decide_nodes_order();
  emit_leaf_order(order);
  check_batches(order);
  solved_ = true;
}

// 1. ConstructPQTree: every operand consecutive.
void AlignedOrder::apply_operand_adjacency() {
  for (int b = 0; b < num_batches(); ++b) {
    if (!active_[b]) continue;
    for (int o = 0; o < batches_[b].num_operands; ++o) {
      if (consecutive_already(operand(b, o))) continue;  // a task's rows, say
      if (!tree_.reduce(operand(b, o))) {
        active_[b] = 0;
        break;
      }
    }
  }
}

// Whether the distinct `values` are consecutive in every order the hard sets
// admit, at no cost: fewer than two, or exactly one accepted hard set (all in
// the set named for the first, and as many).
bool AlignedOrder::consecutive_already(std::span<const int> values) const {
  if (values.size() < 2) return true;
  const int set = hard_set_of_value_[values[0]];
  if (set < 0 || static_cast<size_t>(hard_begin_[set + 1] - hard_begin_[set]) != values.size()) return false;
  return std::all_of(values.begin(), values.end(), [&](int v) { return hard_set_of_value_[v] == set; });
}

void AlignedOrder::index_batches_by_value() {
  batches_of_begin_.assign(static_cast<size_t>(num_values_) + 1, 0);
  for (int b = 0; b < num_batches(); ++b) {
    if (!active_[b]) continue;
    const Batch& batch = batches_[b];
    for (int i = 0; i < batch.num_operands * batch.length; ++i) ++batches_of_begin_[values_[batch.begin + i] + 1];
  }
  for (int v = 0; v < num_values_; ++v) batches_of_begin_[v + 1] += batches_of_begin_[v];
  batches_of_.resize(static_cast<size_t>(batches_of_begin_[num_values_]));
  position_of_value_.assign(batches_of_begin_.begin(), batches_of_begin_.end() - 1);  // fill cursors
  for (int b = 0; b < num_batches(); ++b) {
    if (!active_[b]) continue;
    const Batch& batch = batches_[b];
    for (int i = 0; i < batch.num_operands * batch.length; ++i) {
      batches_of_[position_of_value_[values_[batch.begin + i]]++] = b;
    }
  }
}

// 2. BROADCASTCONSTRAINT, depth first: a stack of batches, every batch at
// first (the last added on top), a batch queued again when a reduction changes
// the tree under one of its values. (The paper's queue is breadth first; on
// chains of batches that costs a sweep per level of structure, depth first
// one sweep.)
void AlignedOrder::broadcast_constraints() {
  queued_.assign(batches_.size(), 0);
  queue_.clear();
  for (int b = 0; b < num_batches(); ++b) {
    if (active_[b] && batches_[b].num_operands > 1 && batches_[b].length > 1) {
      queue_.push_back(b);
      queued_[b] = 1;
    }
  }
  size_t budget = 16 * (batches_.size() + static_cast<size_t>(num_values_)) + 64;
  while (!queue_.empty() && budget-- > 0) {
    const int b = queue_.back();
    queue_.pop_back();
    if (active_[b] && !settle_batch(b)) active_[b] = 0;
    queued_[b] = 0;  // after the visit: its own reductions do not queue it again
  }
}

// Makes the batch's operand regions isomorphic. Each round walks operand 0's
// region onto each other operand's, reducing at each node that does not map
// its constraints there (walk_operand with `fix`); when that is not enough
// (the other operand has structure operand 0 lacks), the other operand's
// region is walked onto operand 0's the same way, and the round starts again.
// When a round changes nothing, the paper's broadcast of every constraint of
// every operand is the last resort. False when a reduction fails (the batch
// conflicts with what the tree holds).
//
// Progress is judged by PQTree::restrictions() (the reductions that removed
// admitted orders), not by reduce's `changed`, which may also list nodes a
// reduction only touched. Every reduction of a visit is of a subset of one of
// the batch's operands, so it can only restrict nodes of that operand's
// region: a visit that restricted nothing left the regions as they were. The
// batches holding values of restricting reductions are queued again.
bool AlignedOrder::settle_batch(int batch) {
  const int k = batches_[batch].num_operands;
  pending_requeue_.clear();
  const uint64_t restrictions_before = tree_.restrictions();
  uint64_t restrictions = restrictions_before;
  bool broadcast = false, conflict = false;
  for (int round = 0; round < 2 * batches_[batch].length + 8 && !conflict; ++round) {
    bool all_match = true;
    for (int other = 1; other < k; ++other) {
      Walk walk = walk_operand(batch, 0, other, false, true);
      if (walk == Walk::Match) continue;
      all_match = false;
      if (walk != Walk::Conflict) walk = walk_operand(batch, other, 0, false, true);
      conflict = walk == Walk::Conflict;
      break;  // operand 0 may have changed: walk again
    }
    if (all_match || conflict) break;
    if (tree_.restrictions() == restrictions) {
      if (broadcast) break;  // nothing more to learn; DECIDENODESORDER judges it
      broadcast = true;
      conflict = !broadcast_batch(batch);
      if (tree_.restrictions() == restrictions) break;
    }
    restrictions = tree_.restrictions();
  }
  // A conflict drops the batch, but what it reduced before stays.
  if (conflict || tree_.restrictions() != restrictions_before) requeue_batches_touching(pending_requeue_);
  return !conflict;
}

// The paper's step: every region constraint of every operand, mapped onto
// every other operand.
bool AlignedOrder::broadcast_batch(int batch) {
  const int k = batches_[batch].num_operands;
  for (int source = 0; source < k; ++source) {
    const std::span<const int> values = operand(batch, source);
    if (!find_region(values, region_)) return false;
    collect_subtree_constraints(values, region_.top, region_.top_is_run, true);
    for (int target = 0; target < k; ++target) {
      if (target != source && !reduce_mapped_constraints(batch, target)) return false;
    }
  }
  return true;
}

// Reduces constraint_bounds_ (intervals of frontier_, operand indices) on
// operand `target`; the values of reductions that changed the tree go to
// pending_requeue_.
bool AlignedOrder::reduce_mapped_constraints(int batch, int target) {
  const std::span<const int> image = operand(batch, target);
  for (size_t c = 0; c + 1 < constraint_bounds_.size(); c += 2) {
    mapped_.clear();
    for (int p = constraint_bounds_[c]; p < constraint_bounds_[c + 1]; ++p) mapped_.push_back(image[frontier_[p]]);
    const uint64_t restrictions = tree_.restrictions();
    if (!tree_.reduce(mapped_)) return false;
    if (tree_.restrictions() != restrictions)
      pending_requeue_.insert(pending_requeue_.end(), mapped_.begin(), mapped_.end());
  }
  return true;
}

void AlignedOrder::requeue_batches_touching(std::span<const int> values) {
  for (int v : values) {
    for (int i = batches_of_begin_[v]; i < batches_of_begin_[v + 1]; ++i) {
      const int b = batches_of_[i];
      if (active_[b] && !queued_[b]) {
        queued_[b] = 1;
        queue_.push_back(b);
      }
    }
  }
}

// GETSUBTREECONS below `start` (a node of an operand's region, or its top run
// when `start_is_run`: region_.run): a DFS that lists the operand's indices in
// tree order (frontier_) and, as pairs [begin, end) of frontier positions
// (constraint_bounds_), each P-node's leaves and the leaves of each two
// adjacent children of a Q-node (or of the run), with `with_constraints`
// (the full broadcast); every node's interval of frontier_ in
// frontier_begin_/frontier_end_ (a walk's fixes, reduce_node_constraints).
// Constraints of fewer than two values or of the whole operand hold already
// and are left out.
void AlignedOrder::collect_subtree_constraints(std::span<const int> values, NodeId start, bool start_is_run,
                                               bool with_constraints) {
  const int m = static_cast<int>(values.size());
  for (int i = 0; i < m; ++i) index_of_value_[values[i]] = i;
  frontier_.clear();
  constraint_bounds_.clear();
  frames_.clear();
  frame_kids_.clear();
  frame_kid_start_.clear();
  auto add = [&](int begin, int end) {
    if (with_constraints && end - begin >= 2 && end - begin < m) {
      constraint_bounds_.push_back(begin);
      constraint_bounds_.push_back(end);
    }
  };
  frontier_begin_.clear();
  frontier_end_.clear();
  auto open = [&](NodeId node, bool run) {
    if (!run && tree_.kind(node) == PQTree::Kind::Leaf) {
      frontier_begin_.set(node, static_cast<int>(frontier_.size()));
      frontier_.push_back(index_of_value_[tree_.leaf(node)]);
      frontier_end_.set(node, static_cast<int>(frontier_.size()));
      return;
    }
    const int kids_begin = static_cast<int>(frame_kids_.size());
    if (run) {
      frame_kids_.insert(frame_kids_.end(), region_.run.begin(), region_.run.end());
    } else {
      tree_.children(node, dfs_kids_);  // not kids_: walk_operand holds a node's children there
      frame_kids_.insert(frame_kids_.end(), dfs_kids_.begin(), dfs_kids_.end());
    }
    frame_kid_start_.resize(frame_kids_.size());
    const bool q_like = run || tree_.kind(node) == PQTree::Kind::Q;
    frames_.push_back({node, kids_begin, static_cast<int>(frame_kids_.size()), kids_begin,
                       static_cast<int>(frontier_.size()), q_like});
  };
  open(start, start_is_run);
  while (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.next < f.kids_end) {
      const int slot = f.next++;
      frame_kid_start_[slot] = static_cast<int>(frontier_.size());
      open(frame_kids_[slot], false);  // may invalidate f
      continue;
    }
    const int end = static_cast<int>(frontier_.size());
    if (f.q_like) {
      for (int i = f.kids_begin; i + 1 < f.kids_end; ++i) {
        add(frame_kid_start_[i], i + 2 < f.kids_end ? frame_kid_start_[i + 2] : end);
      }
    } else {
      add(f.start, end);
    }
    frontier_begin_.set(f.node, f.start);
    frontier_end_.set(f.node, end);
    frame_kids_.resize(static_cast<size_t>(f.kids_begin));
    frame_kid_start_.resize(static_cast<size_t>(f.kids_begin));
    frames_.pop_back();
  }
}

// GETSUBTREECONS of `node` (a node of the walk's source region, or its top
// run), reduced on operand `target`: a P-node's leaves, or the leaves of each
// two adjacent children of a Q-node or of the run (`kids`: its children, or
// the run, in order). Every child matched already, so the child's image is a
// node of the tree holding exactly the child's leaves' images: each
// constraint is reduced as those image subtrees (PQTree::reduce_subtrees), at
// a cost that does not grow with the leaves. The values of a reduction that
// restricted the tree go to pending_requeue_, from the frontier intervals of
// the walk's DFS (collect_subtree_constraints).
bool AlignedOrder::reduce_node_constraints(int batch, int target, NodeId node, bool run,
                                           std::span<const NodeId> kids) {
  const std::span<const int> image = operand(batch, target);
  const int m = static_cast<int>(image.size());
  auto reduce = [&](size_t first, size_t last) {  // kids[first..last]
    int begin = frontier_begin_.get(kids[first]), end = frontier_end_.get(kids[first]);
    subtrees_.clear();
    for (size_t i = first; i <= last; ++i) {
      begin = std::min(begin, frontier_begin_.get(kids[i]));
      end = std::max(end, frontier_end_.get(kids[i]));
      subtrees_.push_back(image_.get(kids[i]) - 1);
    }
    if (end - begin < 2 || end - begin >= m) return true;  // holds already
    const uint64_t restrictions = tree_.restrictions();
    if (!tree_.reduce_subtrees(subtrees_)) return false;
    if (tree_.restrictions() != restrictions)
      for (int p = begin; p < end; ++p) pending_requeue_.push_back(image[frontier_[p]]);
    return true;
  };
  if (!run && tree_.kind(node) == PQTree::Kind::P) return reduce(0, kids.size() - 1);
  for (size_t i = 0; i + 1 < kids.size(); ++i)
    if (!reduce(i, i + 1)) return false;
  return true;
}

// The operand's region, bottom up from its leaves (Algorithm 4's leaf counts):
// a node is complete when all its children are; the top is the complete node
// holding all m values or, failing that, the one parent of the maximal complete
// nodes, which must be a Q-node holding them as a run. False when the operand
// is not consecutive in every admitted order.
bool AlignedOrder::find_region(std::span<const int> values, Region& region) {
  const int m = static_cast<int>(values.size());
  region.inner.clear();
  region.run.clear();
  region.top = PQTree::kNone;
  region.top_is_run = false;
  hits_.clear();
  leaves_in_.clear();
  complete_.clear();
  queue_of_region_.clear();
  for (int v : values) {
    const NodeId leaf = tree_.leaf_node(v);
    leaves_in_.set(leaf, 1);
    complete_.set(leaf, 1);
    queue_of_region_.push_back(leaf);
  }
  touched_parents_.clear();
  for (size_t head = 0; head < queue_of_region_.size(); ++head) {
    const NodeId node = queue_of_region_[head];
    if (leaves_in_.get(node) == m) {
      region.top = node;
      return true;
    }
    const NodeId parent = tree_.parent(node);
    if (parent == PQTree::kNone) return false;
    const int hits = hits_.get(parent) + 1;
    if (hits == 1) touched_parents_.push_back(parent);
    hits_.set(parent, hits);
    leaves_in_.set(parent, leaves_in_.get(parent) + leaves_in_.get(node));
    if (hits == tree_.num_children(parent)) {
      complete_.set(parent, 1);
      region.inner.push_back(parent);
      queue_of_region_.push_back(parent);
    }
  }
  NodeId top = PQTree::kNone;
  for (NodeId parent : touched_parents_) {
    if (complete_.get(parent)) continue;
    if (top != PQTree::kNone) return false;  // two partial parents: not consecutive
    top = parent;
  }
  if (top == PQTree::kNone || tree_.kind(top) != PQTree::Kind::Q) return false;
  kids_.clear();
  tree_.children(top, kids_);
  int first = -1, last = -1;
  for (int i = 0; i < static_cast<int>(kids_.size()); ++i) {
    if (!complete_.get(kids_[i])) continue;
    if (first < 0) first = i;
    last = i;
  }
  if (first < 0 || last - first + 1 != hits_.get(top)) return false;
  region.top = top;
  region.top_is_run = true;
  region.run.assign(kids_.begin() + first, kids_.begin() + last + 1);
  return true;
}

// 3. The simultaneous walk (PARSEEQUIVNODEORDERPAIR): operand 0's region
// against each other operand's. With `record`, appends the node-order
// relations to relations_.
bool AlignedOrder::match_batch(int batch, bool record) {
  const Batch& b = batches_[batch];
  if (b.num_operands < 2 || b.length < 2) return true;
  for (int o = 1; o < b.num_operands; ++o) {
    if (walk_operand(batch, 0, o, record, false) != Walk::Match) return false;
  }
  return true;
}

// Walks operand `source`'s region bottom up, each node onto the common parent
// of its children's images in operand `target`. At a node that does not map,
// with `fix`, its own constraints are reduced on `target` and it is tried
// once more (images of the nodes mapped so far stay: they are full or empty for
// that reduction, which leaves such nodes as they are). On a mismatch,
// mismatch_ is the first node that did not map.
AlignedOrder::Walk AlignedOrder::walk_operand(int batch, int source, int target, bool record, bool fix) {
  const int m = batches_[batch].length;
  const std::span<const int> from = operand(batch, source), to = operand(batch, target);
  if (!find_region(from, region_)) return Walk::Conflict;
  if (m < 2) return Walk::Match;
  image_.clear();
  for (int i = 0; i < m; ++i) image_.set(tree_.leaf_node(from[i]), tree_.leaf_node(to[i]) + 1);
  bool frontier_indexed = false;
  for (size_t n = 0; n <= region_.inner.size(); ++n) {
    const bool run = n == region_.inner.size();
    if (run && !region_.top_is_run) break;
    const NodeId node = run ? region_.top : region_.inner[n];
    NodeId image = PQTree::kNone;
    bool fixed = false;  // one try: the node's constraints are all it can give
    for (;;) {
      if (!run) {
        kids_.clear();
        tree_.children(node, kids_);
      }
      if (match_children(node, run ? std::span<const NodeId>(region_.run) : std::span<const NodeId>(kids_),
                         node == region_.top, image, record)) {
        break;
      }
      mismatch_ = node;
      if (!fix || fixed) return Walk::Mismatch;
      fixed = true;
      if (!frontier_indexed) {  // once per walk: reductions on `target` leave this region as it is
        collect_subtree_constraints(from, region_.top, region_.top_is_run, false);
        frontier_indexed = true;
      }
      if (!reduce_node_constraints(batch, target, node, run,
                                   run ? std::span<const NodeId>(region_.run) : std::span<const NodeId>(kids_)))
        return Walk::Conflict;
    }
    image_.set(node, image + 1);
  }
  return Walk::Match;
}

// Node `node` (kids: its children, or the top run) against the common parent
// of the kids' images.
bool AlignedOrder::match_children(NodeId node, std::span<const NodeId> kids, bool is_top,
                                  NodeId& image_out, bool record) {
  const NodeId first_image = image_.get(kids[0]) - 1;
  const NodeId image = tree_.parent(first_image);
  if (image == PQTree::kNone) return false;
  for (NodeId kid : kids) {
    if (tree_.parent(image_.get(kid) - 1) != image) return false;
  }
  image_out = image;
  const int r = static_cast<int>(kids.size());
  if (!record && r < tree_.num_children(image)) return images_form_a_run(node, kids, is_top, image);
  other_kids_.clear();
  tree_.children(image, other_kids_);
  const int r_image = static_cast<int>(other_kids_.size());
  position_.clear();
  for (int i = 0; i < r_image; ++i) position_.set(other_kids_[i], i);
  beta_.resize(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) beta_[i] = position_.get(image_.get(kids[i]) - 1);
  const bool node_is_p = tree_.kind(node) == PQTree::Kind::P;
  const bool image_is_p = tree_.kind(image) == PQTree::Kind::P;
  if (r == r_image && r >= 3 && node_is_p != image_is_p) return false;
  if (r == r_image && r >= 3 && node_is_p) {  // permutation
    if (record) {
      relations_.push_back({node, image, 0, static_cast<int>(relation_perms_.size()), r});
      relation_perms_.insert(relation_perms_.end(), beta_.begin(), beta_.end());
    }
    return true;
  }
  // Parity: node and image are Q-nodes or have two children; a run only at the top.
  if (r < r_image && (!is_top || image_is_p)) return false;
  if (r < r_image && node_is_p && r >= 3) return false;
  int step = r >= 2 ? beta_[1] - beta_[0] : 1;
  if (step != 1 && step != -1) return false;
  for (int i = 1; i < r; ++i) {
    if (beta_[i] - beta_[i - 1] != step) return false;
  }
  if (record) relations_.push_back({node, image, step < 0 ? 1 : 0, -1, r});
  return true;
}

// match_children's answer, without the relation, where the kids' images are
// fewer than `image`'s children: at the top, consecutive children of a Q-node
// in one direction or the other. Walks the run by sibling links instead of
// listing every child of the image, which may hold the runs of many batches.
bool AlignedOrder::images_form_a_run(NodeId node, std::span<const NodeId> kids, bool is_top, NodeId image) const {
  const int r = static_cast<int>(kids.size());
  if (!is_top || tree_.kind(image) != PQTree::Kind::Q) return false;
  if (r >= 3 && tree_.kind(node) == PQTree::Kind::P) return false;
  if (r == 1) return true;
  NodeId previous = image_.get(kids[0]) - 1, at = image_.get(kids[1]) - 1;
  if (!tree_.are_siblings(previous, at)) return false;
  for (int i = 2; i < r; ++i) {
    const NodeId next = tree_.sibling_after(at, previous);
    if (next != image_.get(kids[i]) - 1) return false;
    previous = at;
    at = next;
  }
  return true;
}

// DECIDENODESORDER: the batches' relations, batch by batch, into the
// extended union-find; a batch that contradicts the accepted ones is undone.
void AlignedOrder::decide_nodes_order() {
  if (++uf_epoch_ == 0) {
    std::fill(uf_stamp_.begin(), uf_stamp_.end(), 0u);
    uf_epoch_ = 1;
  }
  uf_perm_pool_.clear();
  for (int b = 0; b < num_batches(); ++b) {
    if (!active_[b]) continue;
    relations_.clear();
    relation_perms_.clear();
    if (!match_batch(b, true) || !apply_relations()) active_[b] = 0;
  }
}

bool AlignedOrder::apply_relations() {
  undo_log_.clear();
  const size_t pool_size = uf_perm_pool_.size();
  for (const Relation& relation : relations_) {
    const bool ok = relation.perm_begin < 0
                        ? union_parity(relation.node, relation.other, relation.parity)
                        : union_permutation(relation.node, relation.other,
                                            {relation_perms_.data() + relation.perm_begin,
                                             static_cast<size_t>(relation.size)});
    if (!ok) {
      undo_unions(pool_size);
      return false;
    }
  }
  return true;
}

void AlignedOrder::undo_unions(size_t perm_pool_size) {
  for (size_t i = undo_log_.size(); i-- > 0;) {
    const UndoStep& step = undo_log_[i];
    uf_parent_[step.attached] = step.attached;
    uf_parity_[step.attached] = 0;
    uf_perm_begin_[step.attached] = -1;
    uf_size_[step.root] -= uf_size_[step.attached];
  }
  undo_log_.clear();
  uf_perm_pool_.resize(perm_pool_size);
}

// A node's union-find entry, made a singleton the first time it is seen in
// this solve.
void AlignedOrder::uf_touch(NodeId node) {
  const auto i = static_cast<size_t>(node);
  if (i >= uf_stamp_.size()) {
    const size_t size = std::max(i + 1, 2 * uf_stamp_.size());
    uf_stamp_.resize(size, 0u);
    uf_parent_.resize(size);
    uf_size_.resize(size);
    uf_parity_.resize(size);
    uf_perm_begin_.resize(size);
  }
  if (uf_stamp_[i] != uf_epoch_) {
    uf_stamp_[i] = uf_epoch_;
    uf_parent_[i] = node;
    uf_size_[i] = 1;
    uf_parity_[i] = 0;
    uf_perm_begin_[i] = -1;
  }
}

// FIND for directions: the root, and dir(node) = dir(root) ^ parity.
NodeId AlignedOrder::find_parity(NodeId node, int& parity) {
  uf_touch(node);
  parity = 0;
  while (uf_parent_[node] != node) {
    parity ^= uf_parity_[node];
    node = uf_parent_[node];
  }
  return node;
}

// FIND for permutations: the root, and `transform` with
// order(root) = transform ∘ order(node) (child i of node ~ child transform[i]
// of the root), an order being a map position -> child.
NodeId AlignedOrder::find_permutation(NodeId node, std::vector<int>& transform) {
  uf_touch(node);
  const int r = tree_.num_children(node);
  transform.resize(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) transform[i] = i;
  while (uf_parent_[node] != node) {
    const int* sigma = uf_perm_pool_.data() + uf_perm_begin_[node];
    for (int i = 0; i < r; ++i) transform[i] = sigma[transform[i]];
    node = uf_parent_[node];
  }
  return node;
}

// UNION for directions: dir(b) = dir(a) ^ parity.
bool AlignedOrder::union_parity(NodeId a, NodeId b, int parity) {
  int pa = 0, pb = 0;
  const NodeId ra = find_parity(a, pa), rb = find_parity(b, pb);
  const int between = pa ^ parity ^ pb;  // dir(rb) = dir(ra) ^ between
  if (ra == rb) return between == 0;
  const bool a_under_b = uf_size_[ra] <= uf_size_[rb];
  const NodeId attached = a_under_b ? ra : rb, root = a_under_b ? rb : ra;
  uf_parent_[attached] = root;
  uf_parity_[attached] = between;
  uf_size_[root] += uf_size_[attached];
  undo_log_.push_back({false, attached, root});
  return true;
}

// UNION for permutations: order(b) = beta ∘ order(a).
bool AlignedOrder::union_permutation(NodeId a, NodeId b, std::span<const int> beta) {
  const NodeId ra = find_permutation(a, t1_), rb = find_permutation(b, t2_);
  // order(rb) = t2 ∘ beta ∘ t1^-1 ∘ order(ra) =: x ∘ order(ra)
  const size_t r = beta.size();
  composed_.resize(r);
  for (size_t i = 0; i < r; ++i) composed_[t1_[i]] = t2_[beta[i]];
  if (ra == rb) {
    for (size_t i = 0; i < r; ++i) {
      if (composed_[i] != static_cast<int>(i)) return false;
    }
    return true;
  }
  const bool a_under_b = uf_size_[ra] <= uf_size_[rb];
  const NodeId attached = a_under_b ? ra : rb, root = a_under_b ? rb : ra;
  const int begin = static_cast<int>(uf_perm_pool_.size());
  uf_perm_pool_.resize(uf_perm_pool_.size() + r);
  int* sigma = uf_perm_pool_.data() + begin;
  for (size_t i = 0; i < r; ++i) {
    if (a_under_b) {
      sigma[i] = composed_[i];
    } else {
      sigma[composed_[i]] = static_cast<int>(i);  // the inverse
    }
  }
  uf_parent_[attached] = root;
  uf_perm_begin_[attached] = begin;
  uf_size_[root] += uf_size_[attached];
  undo_log_.push_back({true, attached, root});
  return true;
}

// 4. GETLEAFORDER: DFS; each internal node's children in its decided order.
void AlignedOrder::emit_leaf_order(std::vector<int>& order) {
  order.clear();
  order.reserve(static_cast<size_t>(num_values_));
  if (num_values_ == 0) return;
  emit_stack_.clear();
  emit_stack_.push_back(tree_.root());
  while (!emit_stack_.empty()) {
    const NodeId node = emit_stack_.back();
    emit_stack_.pop_back();
    if (tree_.kind(node) == PQTree::Kind::Leaf) {
      order.push_back(tree_.leaf(node));
      continue;
    }
    kids_.clear();
    tree_.children(node, kids_);
    const int r = static_cast<int>(kids_.size());
    if (tree_.kind(node) == PQTree::Kind::Q || r == 2) {
      int parity = 0;
      find_parity(node, parity);
      if (parity) std::reverse(kids_.begin(), kids_.end());
    } else {
      // order(node) = t^-1 ∘ order(root), the root keeping its own order:
      // child i goes to position t[i].
      find_permutation(node, t1_);
      other_kids_.resize(kids_.size());
      for (int i = 0; i < r; ++i) other_kids_[t1_[i]] = kids_[i];
      kids_.swap(other_kids_);
    }
    for (int i = r; i-- > 0;) emit_stack_.push_back(kids_[i]);
  }
}

// 5. satisfied(b), on the order itself: operand 0 consecutive, and every
// operand's values at the same offsets from its first position.
void AlignedOrder::check_batches(std::span<const int> order) {
  position_of_value_.resize(static_cast<size_t>(num_values_));
  for (int p = 0; p < num_values_; ++p) position_of_value_[order[p]] = p;
  for (int b = 0; b < num_batches(); ++b) {
    const Batch& batch = batches_[b];
    bool ok = batch.distinct;
    const int m = batch.length;
    auto lowest = [&](std::span<const int> values) {
      int low = num_values_;
      for (int v : values) low = std::min(low, position_of_value_[v]);
      return low;
    };
    const std::span<const int> first = operand(b, 0);
    const int first_low = m > 0 ? lowest(first) : 0;
    for (int i = 0; ok && i < m; ++i) ok = position_of_value_[first[i]] - first_low < m;
    for (int o = 1; ok && o < batch.num_operands; ++o) {
      const std::span<const int> other = operand(b, o);
      const int low = lowest(other);
      for (int i = 0; ok && i < m; ++i) {
        ok = position_of_value_[other[i]] - low == position_of_value_[first[i]] - first_low;
      }
    }
    satisfied_[b] = ok ? 1 : 0;
  }
}

}  // namespace vjit::layout
