#pragma once
// The machine's matrix-product peak, measured in the calling process, for a
// roofline: a model's useful flops per second (EngineStats::useful_flops over
// wall time) divided by what the GEMM back end the engine uses reaches on a
// large square product.
//
//   vjit::GemmPeak peak = vjit::measure_gemm_peak(engine.options());
//   double ratio = useful_flops / seconds / (peak.all_threads_gflops_per_s * 1e9);
//
// It times C = A·B with n×n×n single-precision operands (2·n³ flops a call) on
// the back end Options::Tuning::gemm selects: once on the calling thread alone, and
// once on Options::threads threads split the way the engine splits its GEMMs
// when Options::deterministic is off (one block of C per thread; the fixed
// blocks of deterministic mode are not used here, so both modes' roofline
// ratios are over the same peak). Each figure is 2·n³ over the fastest call of its
// window (interference only slows a call down, so the fastest is the closest to
// the peak). A timing, so only as good as the machine is quiet.
#include <string>

#include "vjit/options.h"

namespace vjit {

/// How measure_gemm_peak measures.
struct GemmPeakOptions {
  double seconds = 1.0;  ///< per figure (one thread, all threads), after one warm-up call
  int size = 0;          ///< n; 0 = 1024, doubled (up to 4096) while one single-thread call takes under 10 ms
};

/// What measure_gemm_peak measured.
struct GemmPeak {
  std::string backend;  ///< the back end measured ("onednn", ...)
  int size = 0;         ///< n of the n×n×n product
  int threads = 1;      ///< the thread count of the all-threads figure (Options::threads)
  double one_thread_gflops_per_s = 0;  ///< GFLOP/s of one thread
  double all_threads_gflops_per_s = 0;  ///< GFLOP/s of `threads` threads
};

/// Measures the peak with the back end and thread count of `options`. Throws
/// UserError for an unavailable back end, seconds < 0 or size < 0.
GemmPeak measure_gemm_peak(const Options& options, const GemmPeakOptions& peak = {});

}  // namespace vjit
