#pragma once
// Aligned leaf orders (ED-Batch, ICML'23, §3.2, Algorithm 2 and appendix B):
// one order of n values in memory such that the operands of batched kernels
// are each consecutive (adjacency) and in the same relative order (alignment),
// so a batched kernel reads every operand in place.
//
//   require_consecutive(S)   a set that must be consecutive, in any order (a
//                            task's own rows); applied before any batch, and
//                            reported (false) when it conflicts
//   add_batch(operands)      k operands of the same length m: operand o is the
//                            sequence x_o[0..m). Satisfied when each operand's
//                            values are consecutive and, for all i, j,
//                            pos(x_o[i]) < pos(x_o[j]) ⇔ pos(x_0[i]) < pos(x_0[j])
//   solve(order)             ConstructPQTree + BROADCASTCONSTRAINT (make the
//                            operands' subtrees isomorphic, breadth first over
//                            the batches a reduction changed) + DECIDENODESORDER
//                            (extended union-find over P-node permutations and
//                            Q-node directions) + GETLEAFORDER
//
// A batch whose constraints conflict with those applied before it is dropped
// (satisfied(b) is false); the order is still a permutation, so a dropped batch
// costs its user a copy, never a wrong result. satisfied(b) is checked on the
// final order, never assumed.
#include <cstdint>
#include <span>
#include <vector>

#include "layout/pq_tree.h"

namespace vjit::layout {

class AlignedOrder {
 public:
  // Starts a problem over `num_values` values, keeping every buffer's capacity.
  void reset(int num_values);
  bool require_consecutive(std::span<const int> values);
  // `values` holds the k operands one after another (k·m values); returns the
  // batch's index. A value repeated within the batch makes it unsatisfiable.
  int add_batch(std::span<const int> values, int num_operands);
  // Computes the order: order[p] is the value at position p.
  void solve(std::vector<int>& order);
  int num_batches() const;
  bool satisfied(int batch) const;  // after solve()

 private:
  // A lazily cleared int per PQ-tree node id (ids are small and dense, but
  // their bound is the tree's business): grows on demand, clear() is O(1).
  class NodeScratch {
   public:
    void clear();
    int get(PQTree::NodeId node) const {  // 0 when unset since the last clear()
      const auto i = static_cast<size_t>(node);
      return i < stamp_.size() && stamp_[i] == epoch_ ? value_[i] : 0;
    }
    void set(PQTree::NodeId node, int value) {
      const auto i = static_cast<size_t>(node);
      if (i >= stamp_.size()) [[unlikely]]
        grow(i + 1);
      stamp_[i] = epoch_;
      value_[i] = value;
    }

   private:
    void grow(size_t size);

    std::vector<unsigned> stamp_;
    std::vector<int> value_;
    unsigned epoch_ = 1;
  };
  struct Batch {
    int begin = 0;         // first value in values_
    int num_operands = 0;  // k
    int length = 0;        // m
    bool distinct = true;  // no value repeated within the batch
  };
  // An operand's region of the tree: the nodes whose leaves all lie in it
  // (bottom up) and its top, a node or a run of a Q-node's children.
  struct Region {
    std::vector<PQTree::NodeId> inner;  // internal nodes, children first
    PQTree::NodeId top = PQTree::kNone;
    bool top_is_run = false;            // the operand is `run`, a part of top's children
    std::vector<PQTree::NodeId> run;
  };
  // "node's children order = transform of other's": a parity (Q-node, or a
  // node of two children) or a permutation (P-node of three or more).
  struct Relation {
    PQTree::NodeId node, other;
    int parity;      // Z2 relation when perm_begin < 0
    int perm_begin;  // into relation_perms_: child i of node ~ child perm[i] of other
    int size;
  };
  struct UndoStep {
    bool permutation;
    PQTree::NodeId attached, root;
  };

  std::span<const int> operand(int batch, int o) const;
  void rebuild_hard_sets();
  void apply_operand_adjacency();
  bool consecutive_already(std::span<const int> values) const;
  void index_batches_by_value();
  void broadcast_constraints();
  bool settle_batch(int batch);
  bool broadcast_batch(int batch);
  bool reduce_mapped_constraints(int batch, int target);
  void collect_subtree_constraints(std::span<const int> values, PQTree::NodeId start, bool start_is_run,
                                   bool with_constraints);
  bool reduce_node_constraints(int batch, int target, PQTree::NodeId node, bool run,
                               std::span<const PQTree::NodeId> kids);
  void requeue_batches_touching(std::span<const int> values);
  bool find_region(std::span<const int> values, Region& region);
  bool match_batch(int batch, bool record);
  enum class Walk { Match, Mismatch, Conflict };
  Walk walk_operand(int batch, int source, int target, bool record, bool fix);
  bool match_children(PQTree::NodeId node, std::span<const PQTree::NodeId> kids, bool is_top,
                      PQTree::NodeId& image_out, bool record);
  bool images_form_a_run(PQTree::NodeId node, std::span<const PQTree::NodeId> kids, bool is_top,
                         PQTree::NodeId image) const;
  void decide_nodes_order();
  bool apply_relations();
  void undo_unions(size_t perm_pool_size);
  void uf_touch(PQTree::NodeId node);
  PQTree::NodeId find_parity(PQTree::NodeId node, int& parity);
  PQTree::NodeId find_permutation(PQTree::NodeId node, std::vector<int>& transform);
  bool union_parity(PQTree::NodeId a, PQTree::NodeId b, int parity);
  bool union_permutation(PQTree::NodeId a, PQTree::NodeId b, std::span<const int> beta);
  void emit_leaf_order(std::vector<int>& order);
  void check_batches(std::span<const int> order);

  int num_values_ = 0;
  PQTree tree_;
  bool tree_has_batches_ = false;
  bool solved_ = false;
  std::vector<int> hard_values_, hard_begin_;  // the accepted hard sets
  std::vector<int> hard_set_of_value_;          // the last accepted hard set holding it, or -1
  std::vector<int> values_;
  std::vector<Batch> batches_;
  std::vector<char> active_, satisfied_, queued_;
  // value -> the active batches holding it (CSR)
  std::vector<int> batches_of_begin_, batches_of_;
  // scratch, kept across reset()
  std::vector<int> value_stamp_, index_of_value_;
  int value_epoch_ = 0;
  std::vector<PQTree::NodeId> kids_, other_kids_, dfs_kids_, subtrees_;
  NodeScratch hits_, leaves_in_, complete_, image_, position_;
  NodeScratch frontier_begin_, frontier_end_;  // a node's leaves: [begin, end) of frontier_
  Region region_;
  PQTree::NodeId mismatch_ = PQTree::kNone;
  std::vector<int> pending_requeue_;  // values of the reductions of one visit
  std::vector<int> frontier_, constraint_bounds_, mapped_, queue_;
  std::vector<PQTree::NodeId> queue_of_region_, touched_parents_;
  struct Frame {
    PQTree::NodeId node;
    int kids_begin, kids_end, next, start;
    bool q_like;
  };
  std::vector<Frame> frames_;
  std::vector<PQTree::NodeId> frame_kids_;
  std::vector<int> frame_kid_start_;
  std::vector<Relation> relations_;
  std::vector<int> relation_perms_, beta_, t1_, t2_, composed_;
  // extended union-find, node-indexed (valid where uf_stamp_ == uf_epoch_)
  std::vector<unsigned> uf_stamp_;
  unsigned uf_epoch_ = 0;
  std::vector<PQTree::NodeId> uf_parent_;
  std::vector<int> uf_size_, uf_parity_, uf_perm_begin_;
  std::vector<int> uf_perm_pool_;
  std::vector<UndoStep> undo_log_;
  std::vector<PQTree::NodeId> emit_stack_;
  std::vector<int> position_of_value_;
};

}  // namespace vjit::layout
