#pragma once
// Sums over a row of floats in kLaneSums independent partial results, which
// the compiler keeps in one vector register: a single running sum is a chain
// of dependent instructions, several times slower on wide rows (a softmax
// over a 6021-word vocabulary). The CPU loops of the executor and of the row
// ops (ir/row_op.h) share them; compiled with VJIT_VECTOR_CLONES, so every
// ISA's clone adds in the same order and gives the same floats.
#include <cstdint>

namespace vjit::ir {

inline constexpr int64_t kLaneSums = 8;

float lane_sum(const float* x, int64_t n);                 ///< Σ x_i
float lane_dot(const float* a, const float* b, int64_t n);  ///< Σ a_i b_i

}  // namespace vjit::ir
