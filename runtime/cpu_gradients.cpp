// The CPU device's gradient steps that write rows other steps share: the
// scatter gradients zeroed at the start of a backward, the weight gradients
// summed over the rows (ParamGrad), and the gradients a vertex sends its
// children added into their scatter-gradient rows (GatherGrad), column block
// by column block so that no two threads write one float.
#include <algorithm>
#include <cstring>

#include "runtime/batch_rows.h"
#include "runtime/cpu_executor.h"
#include "runtime/cpu_row_blocks.h"
#include "runtime/kernels.h"
#include "ir/vector_clones.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

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

// VJIT_ACCUMULATE_GRADIENTS: a GatherGrad (`id`) some parts of whose gradient
// `g` their kernels added into the children's rows (bind_accumulated_rows).
// It adds the rest of the columns, and each part from the rows that went to
// their own row instead.
bool CpuExecutor::add_accumulated_gradient(const Rows& rows, const Node& node, ValueId id, const View& g, Lane& lane) {
  Frame& frame = static_cast<Frame&>(lane);
  if (!accumulates(rows, id, frame)) return false;
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatBatch& graph = *batch_.graph;
  const std::vector<View>& views = frame.views[int(Pass::Backward)];
  const int64_t width = function(Pass::Backward, rows.type)[node.args[0]].shape.numel();
  const bool slot = node.target == ir::GatherGradTarget::Slot;
  const size_t first_variadic = size_t(program_.signature(rows.type).fixed_arity);
  const std::vector<std::pair<int64_t, int64_t>>& rest = placed(rows.type).accumulated_rest[size_t(id)];
  std::span<const AccumulatedPart> all = placed(rows.type).accumulated_parts;
  auto first = std::find_if(all.begin(), all.end(), [&](const AccumulatedPart& p) { return p.gather_grad == id; });
  auto last = std::find_if(first, all.end(), [&](const AccumulatedPart& p) { return p.gather_grad != id; });
  const std::span<const AccumulatedPart> parts(first, last);  // sorted by GatherGrad
  auto targets = [&](int64_t r) {
    std::span<const int> children = graph.children(rows.vertices[r]);
    return slot ? children.subspan(size_t(node.child_slot), 1) : children.subspan(first_variadic);
  };
  auto grad_row = [&](int child) {
    const ValueLayout& s = layout.scatter_grad[size_t(graph.type(child))];
    return arena(Pass::Backward) + s.offset + int64_t(layout.vertex_row[size_t(child)]) * s.ld +
           (slot ? node.start : 0);
  };
  // A part's row went to the child when its kernel wrote it there.
  auto from = [&](const AccumulatedPart& part, int64_t r) { return row_at(views[size_t(part.value)], r); };
  auto delivered = [&](const AccumulatedPart& part, int64_t r, int child) {
    return from(part, r) == grad_row(child) + part.column;
  };
  int64_t added = 0;
  for (int64_t r = 0; r < rows.count; ++r)
    for (int child : targets(r)) {
      for (auto [begin, end] : rest) added += end - begin;
      for (const AccumulatedPart& part : parts)
        if (!delivered(part, r, child)) added += part.width;
    }
  if (added == 0) {
    ++frame.stats->gather_views;
    return true;
  }
  ++frame.stats->copy_calls;
  start(lane, Primitive::AddRows);
  // Column blocks: a child twice in the rows is added to by one thread.
  for_column_blocks(frame, rows.count, width, [&](int64_t block, int64_t count) {
    // Adds columns [begin, end) of the row at `row` (column 0) within this block.
    auto add = [&](const float* row, int64_t begin, int64_t end, float* into) {
      begin = std::max(begin, block), end = std::min(end, block + count);
      if (begin < end) add_row(row + begin, into + begin, end - begin);
    };
    for (int64_t r = 0; r < rows.count; ++r)
      for (int child : targets(r)) {
        float* into = grad_row(child);
        for (auto [begin, end] : rest) add(row_at(g, r), begin, end, into);
        for (const AccumulatedPart& part : parts)
          if (!delivered(part, r, child)) add(from(part, r) - part.column, part.column, part.column + part.width, into);
      }
  });
  frame.stats->copy_bytes += added * int64_t(sizeof(float));
  frame.stats->layout_copy_bytes += added * int64_t(sizeof(float));
  return true;
}

}  // namespace vjit::runtime
