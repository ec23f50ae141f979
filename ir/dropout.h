#pragma once
// Dropout masks as a pure function of (seed, sample, vertex, key, element), so
// the forward and backward passes, the reference interpreter and every batched
// or fused executor draw exactly the same mask without storing it.
#include <cstdint>

#include "vjit/random.h"

namespace vjit::ir {

inline bool dropout_keeps(uint64_t seed, int sample, int vertex, int key, int64_t element, double rate) {
  uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull);
  h = mix64(h ^ uint64_t(uint32_t(sample)));
  h = mix64(h ^ (uint64_t(uint32_t(vertex)) << 20) ^ uint64_t(uint32_t(key)));
  h = mix64(h ^ uint64_t(element));
  double uniform = double(h >> 11) * 0x1.0p-53;
  return uniform >= rate;
}

}  // namespace vjit::ir
