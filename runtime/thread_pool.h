#pragma once
// A small persistent thread pool for the CPU executor, and the parallel GEMM
// built on it.
//
// ThreadPool(n) runs parallel_for on n threads: the calling thread plus n - 1
// workers started once. Tasks are claimed dynamically, so uneven tasks balance
// and a worker that is late (descheduled) leaves its share to the others; the
// caller always takes part. Idle workers spin for a short while (a GEMM step is
// usually followed by another within microseconds), then sleep on a futex
// (std::atomic::wait).
//
// parallel_sgemm splits one product into per-thread blocks, each computed by a
// single-threaded library call (runtime/gemm.h): columns of C when C is wider
// than tall (the forward Y = X W^T with few batched rows), rows otherwise (the
// weight gradient). This beat the libraries' own threading on vjit's shapes by
// 3-23% on a quiet machine, and by far more on a loaded one (perf/GEMM.md).
//
// Determinism. A library computes an element of C in an order that may depend
// on the shape of the call it is part of (its kernels, K blocking and edge
// paths are chosen per shape), so blocks that follow the thread count make the
// result depend on the thread count. GemmSplit::Fixed cuts C into blocks whose
// shape depends only on (m, n, k): the result is then bitwise the same on any
// number of threads, one included (Options::deterministic, VJIT_DETERMINISTIC).
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/gemm.h"

namespace vjit::runtime {

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller; 0 means std::thread::hardware_concurrency().
  // `spin_us`: how long an idle worker polls for new work before sleeping.
  // Throws UserError, naming the thread and the system's reason, when a worker
  // cannot be started (the ones started are stopped first).
  explicit ThreadPool(int threads = 0, int spin_us = 50);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of threads that run tasks, the caller included.
  int size() const { return int(workers_.size()) + 1; }

  // Runs fn(task) — or fn(task, thread) with thread in [0, size()), 0 = the
  // caller — for every task in [0, n_tasks), and returns when all are done. The
  // first exception a task throws is rethrown here (the other tasks still run).
  // Called from inside a task (of any pool), it runs the tasks inline, so
  // nesting never deadlocks or oversubscribes. Calls from several outside
  // threads are serialised.
  template <typename Fn>
  void parallel_for(int64_t n_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n_tasks, &call<F>, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void* fn, int64_t task, int thread);

  template <typename F>
  static void call(void* fn, int64_t task, int thread) {
    F& f = *static_cast<F*>(fn);
    if constexpr (std::is_invocable_v<F&, int64_t, int>) {
      f(task, thread);
    } else {
      f(task);
    }
  }

  void run(int64_t n_tasks, Trampoline trampoline, void* fn);
  void work(uint32_t job, int thread);  // claims and runs tasks of `job` until none are left
  void worker_main(int thread);
  void stop_workers();  // wakes every worker to exit and joins them

  std::vector<std::thread> workers_;
  const int spin_us_;
  std::mutex run_mutex_;  // one parallel_for at a time

  // The current job. The caller stores claim_ = job << 32 (closing the last
  // job's claims), fills in the fields, n_tasks_ last, and publishes the job
  // by bumping generation_ (the word idle workers sleep on). A task is claimed
  // by a compare-exchange of claim_ from (job, t) to (job, t + 1), t below the
  // n_tasks_ read after it (the order of the stores keeps a late worker from
  // pairing the last job's claim with this job's count): a worker that wakes up after its job is over
  // fails the claim instead of running a stale task, so the caller never waits
  // for a worker that did not take part — only for the tasks (done_ == n_tasks).
  // On a loaded machine, where a worker may not be scheduled for milliseconds,
  // the caller then simply runs every task itself.
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> claim_{0};
  std::atomic<Trampoline> trampoline_{nullptr};
  std::atomic<void*> fn_{nullptr};
  std::atomic<uint32_t> n_tasks_{0};
  std::atomic<uint32_t> done_{0};  // tasks of the current job finished

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// How parallel_sgemm divides C among threads.
enum class GemmSplit {
  Auto,   // choose_gemm_split()
  None,   // one single-threaded call on the caller
  Rows,   // blocks of rows of C (rows of op(A)), one per thread
  Cols,   // blocks of columns of C (columns of op(B)), one per thread
  Fixed,  // fixed_gemm_blocks(): blocks that do not depend on the thread count
};

const char* gemm_split_name(GemmSplit split);  // "auto", "none", "rows", "cols", "fixed"

// A partition of C into `count` blocks of `size` rows (Rows) or columns (Cols),
// the last one possibly smaller; split None is the whole of C as one block.
struct GemmBlocks {
  GemmSplit split = GemmSplit::None;  // None, Rows or Cols
  int64_t size = 0;
  int64_t count = 1;
};

// The blocks `split` gives for `threads` threads (Auto resolved).
GemmBlocks gemm_blocks(GemmSplit split, int threads, int64_t m, int64_t n, int64_t k);

// GemmSplit::Fixed: a partition that is a function of (m, n, k) alone. One
// block below the size where a second thread pays (as Auto on one thread);
// otherwise the direction Auto would choose (columns when m < n), cut into two
// blocks, or four from 32 MFLOP on (8 MFLOP a block at least). Two blocks are
// exactly Auto's two-thread split; four keep a fourth thread busy. So with
// deterministic blocks a product uses at most four threads. What it costs is
// measured in README ("Determinism across thread counts").
GemmBlocks fixed_gemm_blocks(int64_t m, int64_t n, int64_t k);

// The split Auto uses for `threads` threads (measured with perf/gemm_bench.cpp,
// perf/GEMM.md): None when the product (2mnk flops) is too small to pay for
// waking a thread; otherwise the split that duplicates the smaller operand —
// Cols when m < n (each thread reads all of op(A), m x k), Rows otherwise (each
// thread reads all of op(B), k x n).
GemmSplit choose_gemm_split(int threads, int64_t m, int64_t n, int64_t k);

// sgemm() (runtime/gemm.h) on the pool's threads: one block of C per thread,
// each computed by a single-threaded call of `backend`. Same arguments,
// semantics and errors as sgemm() (validated once, before splitting); the
// result equals one sgemm() call up to the library's rounding (each block is a
// full-K product, so no partial sums are combined). When a worker is late
// (another process holds its core) the caller computes that block too: on a
// loaded machine this measured 0.84x the one-thread speed (geomean), instead of
// stalling for milliseconds.
void parallel_sgemm(ThreadPool& pool, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc, GemmSplit split = GemmSplit::Auto);

// C = op(A)·op(B) + bias, row r of C taking row r of the bias (n floats,
// bias_ld apart; bias_ld 0: one row added to every row of C): each thread
// first fills its block of C with the bias, then multiplies with beta = 1, so
// the bias costs no pass over C of its own (the GEMM epilogue of
// ir::fold_bias_adds). A bias that is C itself (bias_ld = ldc) is C's rows as
// they are: C += op(A)·op(B). Same splitting and errors as parallel_sgemm.
void parallel_sgemm_bias(ThreadPool& pool, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
                         int64_t bias_ld, float* c, int64_t ldc, GemmSplit split = GemmSplit::Auto);

// The same products on the calling thread alone, block after block, as a
// one-thread pool would run them: with GemmSplit::Fixed the blocks (and so the
// result, bit for bit) of parallel_sgemm on any pool; otherwise one call. For
// a thread that may not use the pool (the streaming thread).
void serial_sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  GemmSplit split);
void serial_sgemm_bias(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias, int64_t bias_ld,
                       float* c, int64_t ldc, GemmSplit split);

}  // namespace vjit::runtime
