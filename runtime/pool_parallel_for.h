#pragma once
// The public ParallelFor (vjit/optimizer.h) on a ThreadPool: how the Engine lends
// its threads to the optimizer's step. parallel_for allocates nothing per call.
#include <cstdint>

#include "runtime/thread_pool.h"
#include "vjit/optimizer.h"

namespace vjit::runtime {

class PoolParallelFor final : public ParallelFor {
 public:
  explicit PoolParallelFor(ThreadPool& pool) : pool_(pool) {}
  void run(int64_t n, TaskRef fn) override {
    pool_.parallel_for(n, [fn](int64_t i) { fn(i); });
  }

 private:
  ThreadPool& pool_;
};

}  // namespace vjit::runtime
