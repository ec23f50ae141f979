#pragma once
// IR passes. Each is a free function from a function to a new function; value
// ids are renumbered, sinks are always kept. Analyses at the end return facts
// about a function without changing it.
#include <vector>

#include "ir/classify.h"
#include "ir/ops.h"

namespace vjit::ir {

// Removes every value no sink depends on.
// Precondition: the function verifies.
Function dead_code_elimination(const Function& function);

// Merges nodes with the same op, operands, shape and used attributes (see the op
// table in vjit/ir.h) into the first one. Sinks are never merged; Dropout nodes
// of distinct keys are not, since the key is an attribute.
Function common_subexpression_elimination(const Function& function);

// CSE followed by DCE; what Program runs on F and ∂F.
Function simplify(const Function& function);

// Rewrites the slices and pads that stacking (merge_matmuls) leaves in ∂F, so a
// stacked product's gradient splits back into per-part terms:
//   slice(concat(x_1, ..., x_n)) that is exactly x_i     → x_i
//   slice(slice(x))                                     → one slice of x
//   slice(x) or pad(x) of all of x, at 0                → x
//   slice(outer(a, b)) of whole rows r0..r1 of a bᵀ      → outer(slice(a, r0..r1), b)
//   add(pad(a), pad(b)) of adjacent vectors             → pad(concat(a, b)), or
//                                                         concat(a, b) when it covers the sum
// Each part's ParamGrad then reads an Outer directly (one folded GEMM), and an
// input gradient is one GEMM over concatenated pieces instead of a sum of
// padded ones. The replaced nodes are left for DCE.
// Precondition: the function verifies.
Function simplify_slices(const Function& function);

// A gather whose every reader is a Slice becomes one Gather per slice, of the
// slice's elements from the child's scattered value (Gather's `start`): the
// slices are then the gathers. A Concat of such slices (a Tree-LSTM's
// [h_l; h_r], MV-RNN's [A; B]) can then be gathered straight into its buffer
// (in-place concat, runtime/memplan.cpp) instead of gathered and copied again.
// Precondition: the function verifies.
Function gather_slices(const Function& function);

// The inverse for the gradients, after differentiation: GatherGrads (target
// Slot) of one slot whose ranges follow one another become one GatherGrad, from
// the first one's start, of the concatenation of their operands (each
// reshaped to a vector). One add per row into the children's scatter
// gradients, as for a whole gather, which a layout may also compute in place.
// Precondition: the function verifies.
Function join_gather_grads(const Function& function);

// --- analyses ---

// The products a ParamGrad computes itself, so that they need no buffer of
// their own: an Outer a bᵀ of per-vertex a and b whose only reader is a
// ParamGrad, which sums them over its rows as one GEMM (Aᵀ B); and a MatMul of
// two per-vertex matrices (MV-RNN's weight gradient G_r C_rᵀ), which the
// ParamGrad accumulates product by product into the gradient (beta = 1)
// instead of writing every row's product and summing the rows. One flag per
// node.
// `per_vertex_matmuls` false folds, of the MatMuls, only the products Aᵀ·B of
// per-vertex matrices with the same rows (a children block's weight
// gradient), whose sum is GEMMs over the matrices' rows (for a device that
// cannot accumulate other per-vertex matrix products in its ParamGrad).
std::vector<bool> fold_outer_products(const Function& backward, bool per_vertex_matmuls = true);

// Bias adds a GEMM does itself (the GEMM epilogue): y = p + b where p is a
// product of a uniform weight and a per-vertex vector (one GEMM over the rows),
// b a uniform row of p's width or a per-vertex value of p's shape (row r of
// y = row r of p + row r of b), and y the only reader of p, in p's phase and
// in no fused group (`group_of` < 0). The GEMM then writes y directly, its
// rows first filled with b (C = b, beta = 1; where b's rows are laid out as
// y's, the device may read them where they lie), so p needs no buffer and the
// add is no step of its own. Values in `keep` (read by ∂F) are never folded.
// With `block_products` (the CPU executor), also a per-vertex matrix [m, k]
// (a children block) times a uniform weight, whose every output row takes the
// bias [n]. Also with `block_products`: a per-vertex outer product u·vᵀ added
// to a per-vertex matrix x of its shape (MV-RNN's matrix gradients), which
// the add then computes as x + u·vᵀ in one pass, the outer product never
// written; and then a per-vertex matrix product read only through whole-row
// slices, each the other term of such an add (MV-RNN's input gradient
// W_Mᵀ·dP, split into the gradients of A and B): each add computes its rows
// of the product into its output and adds u·vᵀ there, the product never
// written whole. Returns one flag per node: the products folded into their add.
std::vector<bool> fold_bias_adds(const Function& function, const std::vector<Phase>& phases,
                                 const std::vector<int>& group_of, const std::vector<bool>& keep,
                                 bool block_products = false);

// A product the executor runs as one GEMM over the rows: a uniform weight
// times a per-vertex vector, on either side.
bool is_row_gemm(const Function& function, const Node& node);

// Per value: how many arguments of later nodes name it (a node naming it
// twice counts twice).
std::vector<int> reader_counts(const Function& function);

// The value `id` is, seen through reshapes (a reshape is a view with the same
// rows).
ValueId under_reshapes(const Function& function, ValueId id);

}  // namespace vjit::ir
