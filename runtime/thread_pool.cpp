#include "runtime/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "vjit/error.h"

namespace vjit::runtime {

namespace {

// The index of the running thread in the pool whose task it is running; -1
// outside any task. A parallel_for issued from inside a task runs inline.
thread_local int tls_task_thread = -1;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `value` until it differs from `old` for up to `spin_us` microseconds,
// then sleeps on it (futex). Returns the new value.
template <typename T>
T wait_for_change(const std::atomic<T>& value, T old, int spin_us) {
  T now = value.load(std::memory_order_acquire);
  if (now != old) return now;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (int i = 1;; ++i) {
    cpu_relax();
    now = value.load(std::memory_order_acquire);
    if (now != old) return now;
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= deadline) break;
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    now = value.load(std::memory_order_acquire);
    if (now != old) return now;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_us) : spin_us_(std::max(0, spin_us)) {
  VJIT_USER_CHECK(threads >= 0, "ThreadPool: threads=" << threads << " must be >= 0 (0 = hardware concurrency)");
  if (threads == 0) threads = std::max(1, int(std::thread::hardware_concurrency()));
  workers_.reserve(size_t(threads - 1));
  for (int t = 1; t < threads; ++t) {
    try {
      workers_.emplace_back([this, t] { worker_main(t); });
    } catch (const std::system_error& e) {
      // Out of threads or memory for a stack (a large VJIT_THREADS under a
      // limit): stop the workers already started and say so, instead of
      // std::terminate from a destructor-less half-built pool.
      stop_workers();
      throw UserError((detail::Message() << "cannot start worker thread " << t << " of the " << threads - 1
                                         << " that VJIT_THREADS=" << threads << " asks for: " << e.what()
                                         << "; set VJIT_THREADS lower")
                          .str());
    }
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
  }
  for (std::thread& w : workers_) w.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::work(uint32_t job, int thread) {
  for (;;) {
    uint64_t state = claim_.load(std::memory_order_acquire);
    int64_t task;
    for (;;) {
      if (uint32_t(state >> 32) != job) return;  // that job is over
      task = int64_t(state & 0xffffffffu);
      // Acquire: a count of the next job comes with that job's claim word
      // (see run()), so the exchange below fails instead of taking a task the
      // next job has not published.
      if (task >= int64_t(n_tasks_.load(std::memory_order_acquire))) return;
      if (claim_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        break;
    }
    // The claim succeeded while `job` was current, so its fields are still the
    // ones the caller published (it cannot start another job before this task
    // is done).
    try {
      trampoline_.load(std::memory_order_relaxed)(fn_.load(std::memory_order_relaxed), task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_tasks_.load(std::memory_order_relaxed))
      done_.notify_all();
  }
}

void ThreadPool::worker_main(int thread) {
  tls_task_thread = thread;
  // Workers start while generation_ is still 0 (it only moves once the
  // constructor has returned), so 0 is the generation already seen; loading it
  // here instead could skip a job published before this thread got going.
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for_change(generation_, seen, spin_us_);
    if (stop_.load(std::memory_order_acquire)) return;
    work(seen, thread);
  }
}

void ThreadPool::run(int64_t n_tasks, Trampoline trampoline, void* fn) {
  if (n_tasks <= 0) return;
  if (tls_task_thread >= 0 || workers_.empty() || n_tasks == 1) {
    const int thread = std::max(0, tls_task_thread);
    for (int64_t t = 0; t < n_tasks; ++t) trampoline(fn, t, thread);
    return;
  }
  VJIT_USER_CHECK(n_tasks < (int64_t(1) << 31), "ThreadPool::parallel_for: " << n_tasks << " tasks is too many");
  std::lock_guard<std::mutex> lock(run_mutex_);
  const uint32_t job = generation_.load(std::memory_order_relaxed) + 1;
  // The claim word moves to the new job before its task count changes, and
  // the count is stored with release: a worker that woke late for the last
  // job and read its claim word (job - 1, t) cannot pair it with this job's
  // larger count and take task t, which would run a task twice and leave
  // done_ past n_tasks_ (the caller then waited forever; seen with jobs of
  // changing sizes, test_gemm ThreadPool.JobsOfChangingSizesRunEveryTaskOnce).
  claim_.store(uint64_t(job) << 32, std::memory_order_relaxed);
  trampoline_.store(trampoline, std::memory_order_relaxed);
  fn_.store(fn, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  n_tasks_.store(uint32_t(n_tasks), std::memory_order_release);
  generation_.store(job, std::memory_order_release);
  generation_.notify_all();

  tls_task_thread = 0;
  work(job, 0);
  tls_task_thread = -1;

  for (uint32_t done = done_.load(std::memory_order_acquire); done != uint32_t(n_tasks);
       done = done_.load(std::memory_order_acquire))
    wait_for_change(done_, done, spin_us_);

  std::lock_guard<std::mutex> error_lock(error_mutex_);
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

// --- parallel_sgemm ----------------------------------------------------------

namespace {

// Below this many flops (2mnk) a product stays on one thread: waking a spinning
// worker and joining it costs a few microseconds, which is what ~0.5 MFLOP takes
// on one core (perf/GEMM.md).
constexpr double kMinParallelFlops = 5.0e5;
// Columns per block are a multiple of 16 floats (one 64-byte line, one zmm).
constexpr int64_t kColAlign = 16;
// Row blocks are a multiple of 8 rows once there are that many (micro-kernel height).
constexpr int64_t kRowAlign = 8;
// GemmSplit::Fixed: at least this much work per block beyond two blocks, and at
// most kMaxFixedBlocks blocks. On two threads (gemm_bench --quick --modes
// auto,fixed, oneDNN on a Zen 3) the geometric mean was 93.7 against Auto's
// 94.5 GFLOP/s with four blocks at most; with eight, 92.5 against 108.3:
// oneDNN (avx2) runs some thin blocks at half speed, e.g. the 2048 x 1024
// weight gradient of a hidden-512 LSTM in eight 256-row blocks at 0.34-0.46x
// the two-thread split, in four 512-row blocks at par.
constexpr double kFixedBlockFlops = 8.0e6;
constexpr int64_t kMaxFixedBlocks = 4;

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `blocks` blocks (at most) of rows or columns, aligned as above.
GemmBlocks cut(GemmSplit split, int64_t blocks, int64_t m, int64_t n) {
  if (split == GemmSplit::Rows) {
    int64_t rows = div_up(m, blocks);
    if (rows >= kRowAlign) rows = div_up(rows, kRowAlign) * kRowAlign;
    return {split, rows, div_up(m, rows)};
  }
  const int64_t cols = div_up(div_up(n, blocks), kColAlign) * kColAlign;
  return {split, cols, div_up(n, cols)};
}

}  // namespace

const char* gemm_split_name(GemmSplit split) {
  switch (split) {
    case GemmSplit::Auto: return "auto";
    case GemmSplit::None: return "none";
    case GemmSplit::Rows: return "rows";
    case GemmSplit::Cols: return "cols";
    case GemmSplit::Fixed: return "fixed";
  }
  return "unknown";
}

GemmSplit choose_gemm_split(int threads, int64_t m, int64_t n, int64_t k) {
  if (threads <= 1) return GemmSplit::None;
  if (2.0 * double(m) * double(n) * double(k) < kMinParallelFlops) return GemmSplit::None;
  // Splitting rows makes every thread read all of op(B) (k x n); splitting
  // columns makes every thread read all of op(A) (m x k). Duplicate the smaller
  // one: columns when m < n. Measured (perf/GEMM.md, clean samples): columns won
  // by 1.05-3.7x on the forward product Y = X W^T (m = rows <= n = 4H), rows won
  // on the weight gradient (m = 4H > n = 2H); in between it is a toss-up.
  const bool cols_fit = n >= kColAlign * threads;
  if (m < n && cols_fit) return GemmSplit::Cols;
  if (m >= threads) return GemmSplit::Rows;
  return cols_fit ? GemmSplit::Cols : GemmSplit::None;
}

GemmBlocks fixed_gemm_blocks(int64_t m, int64_t n, int64_t k) {
  const double flops = 2.0 * double(m) * double(n) * double(k);
  int64_t blocks = 2;
  while (blocks < kMaxFixedBlocks && flops >= kFixedBlockFlops * double(2 * blocks)) blocks *= 2;
  // The direction of Auto for that many threads; fewer blocks where C is too
  // narrow (and too short) for them.
  GemmSplit split = choose_gemm_split(int(blocks), m, n, k);
  while (split == GemmSplit::None && blocks > 2) split = choose_gemm_split(int(blocks /= 2), m, n, k);
  if (split == GemmSplit::None) return {};
  return cut(split, blocks, m, n);
}

GemmBlocks gemm_blocks(GemmSplit split, int threads, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return {};
  if (split == GemmSplit::Fixed) return fixed_gemm_blocks(m, n, k);
  if (split == GemmSplit::Auto) split = choose_gemm_split(threads, m, n, k);
  if (threads <= 1 || split == GemmSplit::None) return {};
  return cut(split, threads, m, n);
}

namespace {

// Calls block(row0, rows, col0, cols) for each block of C that `split` gives,
// on the pool's threads, or one after the other on the caller when `pool` is
// null (as a one-thread pool); validated already.
template <typename Block>
void for_gemm_blocks(ThreadPool* pool, GemmSplit split, int64_t m, int64_t n, int64_t k, Block&& block) {
  const GemmBlocks blocks = gemm_blocks(split, pool ? pool->size() : 1, m, n, k);
  auto run = [&](int64_t task) {
    const int64_t first = task * blocks.size;
    if (blocks.split == GemmSplit::Rows) block(first, std::min(blocks.size, m - first), int64_t(0), n);
    else block(int64_t(0), m, first, std::min(blocks.size, n - first));
  };
  if (blocks.split == GemmSplit::None) block(int64_t(0), m, int64_t(0), n);
  else if (pool != nullptr) pool->parallel_for(blocks.count, run);
  else for (int64_t task = 0; task < blocks.count; ++task) run(task);
}

void blocked_sgemm(ThreadPool* pool, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc, GemmSplit split) {
  validate_sgemm(backend, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
  if (k == 0 || alpha == 0.0f) split = GemmSplit::None;
  for_gemm_blocks(pool, split, m, n, k, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    const float* a_block = trans_a ? a + r0 : a + r0 * lda;
    const float* b_block = trans_b ? b + c0 * ldb : b + c0;
    sgemm(backend, trans_a, trans_b, rows, cols, k, alpha, a_block, lda, b_block, ldb, beta, c + r0 * ldc + c0, ldc);
  });
}

void blocked_sgemm_bias(ThreadPool* pool, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
                        int64_t bias_ld, float* c, int64_t ldc, GemmSplit split) {
  validate_sgemm(backend, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, c, ldc);
  VJIT_USER_CHECK(bias != nullptr || n == 0, "parallel_sgemm_bias needs a bias row");
  VJIT_USER_CHECK(bias_ld == 0 || bias_ld >= n, "parallel_sgemm_bias: bias_ld " << bias_ld << " < n " << n);
  const bool bias_is_c = bias == c && bias_ld == ldc;
  for_gemm_blocks(pool, split, m, n, k, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    float* c_block = c + r0 * ldc + c0;
    // The block's rows start as the bias while they are this thread's to write,
    // so the GEMM reads them back from its own cache.
    if (!bias_is_c)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(c_block + r * ldc, bias + (r0 + r) * bias_ld + c0, size_t(cols) * sizeof(float));
    const float* a_block = trans_a ? a + r0 : a + r0 * lda;
    const float* b_block = trans_b ? b + c0 * ldb : b + c0;
    sgemm(backend, trans_a, trans_b, rows, cols, k, 1.0f, a_block, lda, b_block, ldb, 1.0f, c_block, ldc);
  });
}

}  // namespace

void parallel_sgemm(ThreadPool& pool, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc, GemmSplit split) {
  blocked_sgemm(&pool, backend, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, split);
}

void parallel_sgemm_bias(ThreadPool& pool, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
                         int64_t bias_ld, float* c, int64_t ldc, GemmSplit split) {
  blocked_sgemm_bias(&pool, backend, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, bias_ld, c, ldc, split);
}

void serial_sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  GemmSplit split) {
  blocked_sgemm(nullptr, backend, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, split);
}

void serial_sgemm_bias(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias, int64_t bias_ld,
                       float* c, int64_t ldc, GemmSplit split) {
  blocked_sgemm_bias(nullptr, backend, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, bias_ld, c, ldc, split);
}

}  // namespace vjit::runtime
