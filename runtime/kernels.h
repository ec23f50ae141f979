#pragma once
// Batched elementwise and data-movement kernels of the CPU executor. A batched
// value is `rows` rows of `width` floats, row r at data + r·ld. Fused JIT
// kernels replace the elementwise ones where fusion is on.
#include <cstdint>

#include "ir/ops.h"

namespace vjit::runtime {

// How an operand's element i of row r is found (Op::Add's broadcasting rules).
enum class Broadcast : uint8_t {
  Same,       // element i
  Scalar,     // element 0
  RowVector,  // element i mod n: a vector [n] over the rows of a matrix [m, n]
};

struct Operand {
  const float* data = nullptr;
  int64_t ld = 0;  // 0 for a uniform operand (a parameter): every row reads the same elements
  Broadcast mode = Broadcast::Same;
  int64_t n = 1;   // the vector length for RowVector
};

void unary_rows(const ir::Node& node, int64_t rows, int64_t width, Operand x, float* out, int64_t ld_out);
void binary_rows(ir::Op op, int64_t rows, int64_t width, Operand a, Operand b, float* out, int64_t ld_out);

void fill_rows(int64_t rows, int64_t width, float value, float* out, int64_t ld_out);

// dst[i] += src[i] for i in [0, width).
void add_row(const float* src, float* dst, int64_t width);

// The index of the first of x[0, n) that is NaN or ±Inf, or -1 when all are
// finite. Tests the exponent bits, in blocks the compiler vectorises, so a
// finite range costs about one read of it (the optimizer's and VJIT_CHECK_FINITE's check).
int64_t first_non_finite(const float* x, int64_t n);

}  // namespace vjit::runtime
