#pragma once
// What the vector-math functions compute, by the C library, and how far a
// result is from it: the one definition the scalar fallback kernels, the ulp
// tests (tests/vmath_accuracy.h) and the ulp column of perf/vmath_bench use.
#include <bit>
#include <cmath>
#include <cstdint>

#include "codegen/vmath_constants.h"

namespace vjit::codegen {

// fn(x) in T's precision. Sigmoid takes the branch whose exp cannot
// overflow; a NaN lands in the second one and propagates.
template <class T>
T unary_reference(UnaryFn fn, T x) {
  switch (fn) {
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Sigmoid: {
      if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
      const T z = std::exp(x);
      return z / (T(1) + z);
    }
  }
  return x;
}

// Floats ordered as integers: ±0 → 0, each next float +1, so the distance
// of two ordinals is their distance in ulps.
inline std::int64_t float_ordinal(float x) {
  const auto bits = std::bit_cast<std::int32_t>(x);
  return bits >= 0 ? bits : -static_cast<std::int64_t>(bits & 0x7fffffff);
}

}  // namespace vjit::codegen
