// The CPU device's gradient primitives over rows that other steps share: the
// gradient rows zeroed at the start of a backward, and rows summed into a
// weight's gradient (ParamGrad) pairwise.
#include <algorithm>
#include <bit>

#include "runtime/cpu_executor.h"
#include "runtime/cpu_row_blocks.h"
#include "runtime/kernels.h"

namespace vjit::runtime {

void CpuExecutor::zero_gradient_rows(Lane& lane, int64_t rows, int64_t ld, int64_t width, const uint8_t* assigned,
                                     float* data) {
  Frame& frame = start(lane, Primitive::Fill);
  // On the pool's threads: tens of megabytes a step for MV-RNN's 4160-float rows.
  for_row_blocks(frame, rows, ld, [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r) {
      const int64_t from = assigned && assigned[r] ? width : 0;
      std::fill(data + r * ld + from, data + (r + 1) * ld, 0.0f);
    }
  });
}

namespace {

// Rows summed in order before their sum joins the pairwise tree.
constexpr int64_t kPairwiseBlockRows = 32;
thread_local std::vector<float> t_pairwise_levels;

// dst += Σ of `count` rows of `width` floats, `ld` apart, summed pairwise:
// blocks of kPairwiseBlockRows rows in order, then the blocks' sums as a
// binary tree (level l holds the sum of 2^l blocks; block k carries through
// the levels its index's trailing ones name), so rounding grows with
// log(count), not count: one chain over 100k rows near 1 loses about 1e-6 of
// the sum, this about 4e-8. The order depends on `count` alone, so results
// stay bitwise the same whatever the thread count. Up to one block of rows
// is added in order, as before.
void add_rows_pairwise(const float* x, int64_t ld, int64_t count, int64_t width, float* dst) {
  if (count <= kPairwiseBlockRows) {
    for (int64_t r = 0; r < count; ++r) add_row(x + r * ld, dst, width);
    return;
  }
  const int64_t blocks = (count + kPairwiseBlockRows - 1) / kPairwiseBlockRows;
  const int levels = int(std::bit_width(uint64_t(blocks)));
  std::vector<float>& buffer = t_pairwise_levels;
  if (buffer.size() < size_t((levels + 1) * width)) buffer.resize(size_t((levels + 1) * width));
  auto level = [&](int64_t l) { return buffer.data() + l * width; };
  float* sum = level(levels);  // the block being summed
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kPairwiseBlockRows, end = std::min(count, begin + kPairwiseBlockRows);
    std::copy_n(x + begin * ld, width, sum);
    for (int64_t r = begin + 1; r < end; ++r) add_row(x + r * ld, sum, width);
    int64_t l = 0;
    for (int64_t k = block; k & 1; k >>= 1) add_row(level(l++), sum, width);
    std::copy_n(sum, width, level(l));
  }
  float* total = nullptr;  // the levels left, the bits of `blocks`, low to high
  for (int64_t l = 0; l < levels; ++l) {
    if (!((blocks >> l) & 1)) continue;
    if (total) add_row(level(l), total, width);
    else total = level(l);
  }
  add_row(total, dst, width);
}

}  // namespace

void CpuExecutor::reduce_rows(Lane& lane, int64_t rows, int64_t width, const View& x, float* dst) {
  start(lane, Primitive::Reduce);
  add_rows_pairwise(x.data, x.ld, rows, width, dst);
}

}  // namespace vjit::runtime
