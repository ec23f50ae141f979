#pragma once
// How an executor runs a MatMul node over a range of rows, whatever the device:
// a uniform weight times per-vertex vectors is one GEMM over the rows (a row
// GEMM); two per-vertex operands (MV-RNN's matrices) are one small product per
// row. Both executors (runtime/cpu_executor.*, runtime/cuda_executor.*) read
// the shapes of a product from here.
#include <cstdint>

#include "ir/ops.h"

namespace vjit::runtime {

// y = op(W)·x for every row (the weight on the left), or y = xᵀ·op(W) (on the
// right), as one row-major GEMM: Y[rows, n] = X[rows, k] · op'(W), where
// op'(W) is W transposed when `trans_w`, and W's rows are `ldw` floats apart.
struct RowGemm {
  bool trans_w = false;
  int64_t n = 0, k = 0, ldw = 0;
};

inline RowGemm row_gemm(const ir::Node& node, const Shape& w, bool weight_on_left) {
  if (weight_on_left) {
    const bool t = node.trans_a;
    return {!t, t ? w.dims[1] : w.dims[0], t ? w.dims[0] : w.dims[1], w.dims[1]};
  }
  const bool t = node.trans_b;
  return {t, t ? w.dims[0] : w.dims[1], t ? w.dims[1] : w.dims[0], w.dims[1]};
}

// A product of two per-vertex operands: C_r = op(A_r)·op(B_r), m×n, inner k;
// lda and ldb are the operands' row lengths as stored. A vector is a row on the
// left ([1, k]) and a column on the right ([k, 1]).
struct PerVertexProduct {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

inline PerVertexProduct per_vertex_product(const ir::Node& node, const Shape& sa, const Shape& sb) {
  const int64_t a_rows = sa.rank == 2 ? sa.dims[0] : 1, a_cols = sa.rank == 2 ? sa.dims[1] : sa.dims[0];
  const int64_t b_rows = sb.dims[0], b_cols = sb.rank == 2 ? sb.dims[1] : 1;
  return {node.trans_a ? a_cols : a_rows, node.trans_b ? b_rows : b_cols, node.trans_a ? a_rows : a_cols, a_cols,
          b_cols};
}

}  // namespace vjit::runtime
