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
};

}  // namespace vjit::layout
