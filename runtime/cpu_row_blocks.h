#pragma once
// The CPU device's row blocks: how a step's rows (or columns) are cut into
// blocks run on the pool's threads. Included by the files that run steps.
#include <algorithm>
#include <utility>

#include "runtime/cpu_executor.h"

namespace vjit::runtime {

template <typename Fn>
void CpuExecutor::for_row_blocks(const Frame& frame, int64_t rows, int64_t work_per_row, Fn&& fn) {
  run_row_blocks(frame, rows, parallel_row_blocks(frame, rows, work_per_row), std::forward<Fn>(fn));
}

template <typename Fn>
void CpuExecutor::run_row_blocks(const Frame& frame, int64_t rows, int64_t blocks, Fn&& fn) {
  if (blocks <= 1) {
    fn(int64_t(0), rows, 0);
    return;
  }
  auto block = [&](int64_t b) {
    int64_t begin = rows * b / blocks, end = rows * (b + 1) / blocks;
    if (trace_) [[unlikely]] {  // which pool thread ran which rows
      TraceArgs args;
      args.rows = end - begin;
      TraceScope scope(trace_, "row block", TraceCategory::Block, args);
      fn(begin, end - begin, int(b));
      return;
    }
    fn(begin, end - begin, int(b));
  };
  if (frame.use_pool) {
    pool_.parallel_for(blocks, block);
  } else {
    for (int64_t b = 0; b < blocks; ++b) block(b);
  }
}

template <typename Fn>
void CpuExecutor::for_column_blocks(const Frame& frame, int64_t rows, int64_t width, Fn&& fn) {
  constexpr int64_t kLine = 16;  // floats per cache line: no two blocks write one line of an aligned row
  const int64_t lines = (width + kLine - 1) / kLine;
  const int64_t blocks = std::min(parallel_row_blocks(frame, rows, width), lines);
  run_row_blocks(frame, lines, blocks, [&](int64_t begin, int64_t count, int) {
    const int64_t first = begin * kLine;
    fn(first, std::min(width, (begin + count) * kLine) - first);
  });
}

}  // namespace vjit::runtime
