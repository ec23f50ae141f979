#include "runtime/kernels.h"

#include <algorithm>
#include <bit>

#include "ir/op_semantics.h"
#include "ir/vector_clones.h"

namespace vjit::runtime {

namespace {

inline int64_t element_index(const Operand& x, int64_t i) {
  switch (x.mode) {
    case Broadcast::Same: return i;
    case Broadcast::Scalar: return 0;
    case Broadcast::RowVector: return i % x.n;
  }
  return i;
}

template <typename F>
void map_unary(int64_t rows, int64_t width, Operand x, float* out, int64_t ld_out, F f) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x.data + r * x.ld;
    float* dst = out + r * ld_out;
    for (int64_t i = 0; i < width; ++i) dst[i] = f(src[i]);
  }
}

template <typename F>
void map_binary(int64_t rows, int64_t width, Operand a, Operand b, float* out, int64_t ld_out, F f) {
  bool contiguous = a.mode == Broadcast::Same && b.mode == Broadcast::Same;
  for (int64_t r = 0; r < rows; ++r) {
    const float* pa = a.data + r * a.ld;
    const float* pb = b.data + r * b.ld;
    float* dst = out + r * ld_out;
    if (contiguous) {
      for (int64_t i = 0; i < width; ++i) dst[i] = f(pa[i], pb[i]);
    } else {
      for (int64_t i = 0; i < width; ++i) dst[i] = f(pa[element_index(a, i)], pb[element_index(b, i)]);
    }
  }
}

}  // namespace

// The op is a template argument of the loops (ir::visit_unary), so each op's
// loop is compiled, and vectorised, on its own.
void unary_rows(const ir::Node& node, int64_t rows, int64_t width, Operand x, float* out, int64_t ld_out) {
  const float c = float(ir::unary_constant(node));
  ir::visit_unary(node.op, [&](auto op) {
    map_unary(rows, width, x, out, ld_out, [c](float v) { return ir::apply_unary<decltype(op)::value>(v, c); });
  });
}

void binary_rows(ir::Op op, int64_t rows, int64_t width, Operand a, Operand b, float* out, int64_t ld_out) {
  ir::visit_binary(op, [&](auto o) {
    map_binary(rows, width, a, b, out, ld_out,
               [](float x, float y) { return ir::apply_binary<decltype(o)::value>(x, y); });
  });
}

VJIT_VECTOR_CLONES void add_row(const float* src, float* dst, int64_t width) {
  for (int64_t i = 0; i < width; ++i) dst[i] += src[i];
}

void fill_rows(int64_t rows, int64_t width, float value, float* out, int64_t ld_out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) out[r * ld_out + i] = value;
}

int64_t first_non_finite(const float* x, int64_t n) {
  // A float is NaN or ±Inf exactly when its exponent bits are all ones (a
  // test no floating-point flag can fold away, unlike std::isfinite).
  auto non_finite = [](float v) {
    constexpr uint32_t kExponent = 0x7f800000u;
    return (std::bit_cast<uint32_t>(v) & kExponent) == kExponent;
  };
  constexpr int64_t kBlock = 64;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    uint32_t any = 0;
    for (int64_t k = begin; k < end; ++k) any |= uint32_t(non_finite(x[k]));
    if (any == 0) continue;
    for (int64_t k = begin; k < end; ++k)
      if (non_finite(x[k])) return k;
  }
  return -1;
}

}  // namespace vjit::runtime
