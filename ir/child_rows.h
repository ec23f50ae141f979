#pragma once
// Which children-block values may live in child row space.
//
// gather_all gives a vertex a [K, d] block whose rows past its last child are
// zero (K = the declared max_children). Stored that way, every op over the
// block pays for K rows per vertex, whatever the vertex's children. A block
// value whose padding rows change no result can instead be computed over the
// rows of the actual children only (child row space: one row per child of the
// task's vertices). Whether padding rows change a result is a property of the
// program, decided once here, for F and ∂F together:
//
//  - the values of one *row group* have row k ↔ child k: a gather_all, and
//    what row-wise ops (elementwise ops, slice_cols, pad_cols, dropout-free
//    block · weight products, sum_rows' gradient broadcast_rows) make from a
//    member; ∂F's read of a forward value is that value. A group is laid out as
//    a whole, so its ops never convert between layouts;
//  - a value is *zero on padding* where its padding rows are 0 whatever the
//    parameters: the gather_all, and what keeps zeros (x ⊙ zero, zero + zero,
//    tanh, relu, scale, slice_cols, block · W, ...). σ(0) = 0.5 is not;
//  - a group's padding rows *change a result* where a reader outside the group
//    reads a member's padding rows and they are not known zero: sum_rows or a
//    weight's gradient blockᵀ · X over a member not zero on padding. The
//    gradient into the children (row k → child k) reads the actual children
//    only. Every other read of a member keeps its group padded, as the child
//    rows cannot stand for it: the block read as a whole matrix (push,
//    scatter, reshape, transpose, concat, sum, a product with it on the
//    right, a per-vertex blockᵀ · X), max_children and its gradient, and a
//    row-wise op combining a member with a [K, d] parameter, another per-vertex
//    [K, d] value or a per-vertex vector or scalar broadcast over the rows.
//
// Padding rows are taken to be finite (0 · padding = 0): a padded row that
// overflows to ±inf, which only extreme parameters make, would turn the padded
// result into NaN where child row space stays finite.
#include <vector>

#include "vjit/ir.h"

namespace vjit::ir {

struct ChildRowValues {
  // Per value of F and of ∂F (empty where there is none): a member of a row
  // group whose padding rows change no result.
  std::vector<bool> forward, backward;
  bool any() const;  ///< whether some value may live in child row space
};

/// The analysis above, over F and its derivative (null: F alone, an
/// inference-only program).
ChildRowValues child_row_values(const Function& forward, const Function* backward);

}  // namespace vjit::ir
