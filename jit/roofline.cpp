#include "vjit/roofline.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/gemm.h"
#include "runtime/thread_pool.h"
#include "vjit/error.h"

namespace vjit {

namespace {

// 2·n³ over the fastest of the calls `product` makes in `seconds` (at least
// three), in GFLOP/s: a call cannot run faster than the machine allows, so
// another process taking a core only lowers a figure; the fastest call is the
// closest to the peak.
template <typename Product>
double time_product(int64_t n, double seconds, Product&& product) {
  using clock = std::chrono::steady_clock;
  std::vector<double> times;
  times.reserve(64);
  auto window = clock::now();
  do {
    auto start = clock::now();
    product();
    times.push_back(std::chrono::duration<double>(clock::now() - start).count());
  } while (times.size() < 3 || std::chrono::duration<double>(clock::now() - window).count() < seconds);
  double fastest = std::max(*std::min_element(times.begin(), times.end()), 1e-9);
  return 2.0 * double(n) * double(n) * double(n) / fastest * 1e-9;
}

}  // namespace

GemmPeak measure_gemm_peak(const Options& options, const GemmPeakOptions& peak) {
  VJIT_USER_CHECK(peak.seconds >= 0, "measure_gemm_peak: seconds must be >= 0, got " << peak.seconds);
  VJIT_USER_CHECK(peak.size >= 0, "measure_gemm_peak: size must be >= 0, got " << peak.size);
  options.validate();
  runtime::GemmBackend backend = runtime::select_gemm_backend(options.gemm);

  GemmPeak result;
  result.backend = runtime::gemm_backend_name(backend);
  result.threads = options.threads;
  std::vector<float> a, b, c;
  int64_t n = 0;
  auto resize = [&](int64_t size) {
    n = size;
    a.assign(size_t(n * n), 0.0f);
    b.assign(size_t(n * n), 0.0f);
    c.assign(size_t(n * n), 0.0f);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = float(int(i % 7) - 3) * 0.125f;
      b[i] = float(int(i % 5) - 2) * 0.25f;
    }
  };
  auto one_thread = [&] {
    runtime::sgemm(backend, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };

  resize(peak.size > 0 ? peak.size : 1024);
  one_thread();  // warm-up: page faults, the library's kernel selection
  if (peak.size == 0) {
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      one_thread();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s >= 0.010 || n >= 4096) break;
      resize(n * 2);
      one_thread();
    }
  }
  result.size = int(n);
  result.one_thread_gflops_per_s = time_product(n, peak.seconds, one_thread);

  runtime::ThreadPool pool(options.threads);
  auto all_threads = [&] {
    runtime::parallel_sgemm(pool, backend, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  all_threads();  // warm-up: the workers' first touch of their blocks
  result.all_threads_gflops_per_s = time_product(n, peak.seconds, all_threads);
  return result;
}

}  // namespace vjit
