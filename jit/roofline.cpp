#include "vjit/roofline.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
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

// cuBLASLt's FP32 peak on the GPU an engine with these options runs on: an
// n×n×n product (8192 unless `peak` says), timed with events after a warm-up
// call, the fastest of the calls in `seconds`. Both figures are that one (a
// GPU has no thread count); the three matrices stay in the device's arena.
GemmPeak measure_cublaslt_peak(const GemmPeakOptions& peak) {
  runtime::CudaDevice& gpu = runtime::CudaDevice::get();
  const int64_t n = peak.size > 0 ? peak.size : 8192;
  const size_t bytes = size_t(n * n) * sizeof(float);
  runtime::DevicePtr a = gpu.alloc(bytes), b = gpu.alloc(bytes), c = gpu.alloc(bytes);
  gpu.memset_zero(a, bytes);
  gpu.memset_zero(b, bytes);
  auto product = [&] { gpu.sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); };
  gpu.time_ms(product);  // warm-up: the library's kernel selection
  double fastest_ms = 1e30, spent = 0;
  for (int calls = 0; calls < 3 || spent < peak.seconds * 1e3; ++calls) {
    double ms = gpu.time_ms(product);
    fastest_ms = std::min(fastest_ms, ms);
    spent += ms;
  }
  GemmPeak result;
  result.backend = "cublaslt-fp32 " + gpu.info().name;
  result.size = int(n);
  result.threads = 1;
  result.one_thread_gflops_per_s = result.all_threads_gflops_per_s =
      2.0 * double(n) * double(n) * double(n) / (std::max(fastest_ms, 1e-6) * 1e-3) * 1e-9;
  return result;
}

}  // namespace

GemmPeak measure_gemm_peak(const Options& options, const GemmPeakOptions& peak) {
  VJIT_USER_CHECK(peak.seconds >= 0, "measure_gemm_peak: seconds must be >= 0, got " << peak.seconds);
  VJIT_USER_CHECK(peak.size >= 0, "measure_gemm_peak: size must be >= 0, got " << peak.size);
  options.validate();
  // The GPU's peak where an engine with these options runs on the GPU.
  if (options.device == Options::Device::Cuda ||
      (options.device == Options::Device::Auto && runtime::probe_cuda().ok && jit::nvrtc_unavailable_reason().empty()))
    return measure_cublaslt_peak(peak);
  runtime::GemmBackend backend = runtime::select_gemm_backend(to_string(options.tuning.gemm));

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
