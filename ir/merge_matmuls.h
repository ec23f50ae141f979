#pragma once
// Matmul merging. Products of ONE per-vertex operand by SEVERAL parameter
// matrices, as LSTM gates written one weight per gate compute them,
//
//   %i = matmul(%W_i, %x)   %f = matmul(%W_f, %x)   %o = ...   %u = ...
//
// become one product by the stacked weights, then a Slice per original product:
//
//   %W = concat(%W_i, %W_f, %W_o, %W_u) : [4m, k] uniform
//   %y = matmul(%W, %x) : [4m]
//   %i = slice(%y) start=0   %f = slice(%y) start=m   ...
//
// The stacked weight is a *uniform* Concat: the parameters stacked along rows,
// the same for every vertex (an executor computes it once per pass). One GEMM
// of 4m rows replaces four of m rows in F; in ∂F the slices' gradients tile the
// product's, so autodiff makes them one Concat and the input gradient is one
// GEMM, Wᵀ·concat(g_i, g_f, g_o, g_u); each parameter's gradient is
// Slice(Outer(g, x)), which simplify_slices (ir/passes.h) turns back into
// Outer(g_i, x): one folded GEMM per parameter, as without merging.
#include "ir/ops.h"

namespace vjit::ir {

// Merges, for every per-vertex vector x, the products MatMul(Param W_i, x) with
// no transposition (at least two of them) into one at the place of the first.
// Every other node is copied unchanged; the merged products' parameters are
// emitted again before their Concat (simplify removes the duplicates and the
// dead originals).
// Precondition: `forward` verifies and is a forward function (no ∂F ops).
Function merge_matmuls(const Function& forward);

}  // namespace vjit::ir
