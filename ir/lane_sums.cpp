#include "ir/lane_sums.h"

#include "ir/vector_clones.h"

namespace vjit::ir {

VJIT_VECTOR_CLONES float lane_sum(const float* x, int64_t n) {
  float lanes[kLaneSums] = {};
  int64_t i = 0;
  for (; i + kLaneSums <= n; i += kLaneSums)
    for (int64_t j = 0; j < kLaneSums; ++j) lanes[j] += x[i + j];
  float total = 0.0f;
  for (; i < n; ++i) total += x[i];
  for (int64_t j = 0; j < kLaneSums; ++j) total += lanes[j];
  return total;
}

VJIT_VECTOR_CLONES float lane_dot(const float* a, const float* b, int64_t n) {
  float lanes[kLaneSums] = {};
  int64_t i = 0;
  for (; i + kLaneSums <= n; i += kLaneSums)
    for (int64_t j = 0; j < kLaneSums; ++j) lanes[j] += a[i + j] * b[i + j];
  float total = 0.0f;
  for (; i < n; ++i) total += a[i] * b[i];
  for (int64_t j = 0; j < kLaneSums; ++j) total += lanes[j];
  return total;
}

}  // namespace vjit::ir
