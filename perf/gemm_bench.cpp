// gemm_bench: every GEMM back end on the products vjit issues for a Tree-LSTM,
// on one thread and on two (the library's own threading vs. our split of C into
// per-thread blocks with single-threaded calls, and the fixed blocks of the
// deterministic mode), side by side in one run.
//
//   gemm_bench [--quick] [--h1024] [--reps N] [--sample-ms X] [--settle-ms X]
//              [--backends onednn,openblas,blis,libxsmm] [--modes none,library,rows,cols,auto,fixed]
//
// Shapes (hidden size H, batch rows M = vertices batched in one task):
//   fwd          Y[M,4H]  = X[M,2H] . W^T       m=M  n=4H k=2H  trans_b
//   bwd_data     dX[M,2H] = dY[M,4H] . W        m=M  n=2H k=4H
//   bwd_weight   dW[4H,2H] = dY^T . X           m=4H n=2H k=M   trans_a (M up to 2048)
// H in {64, 256, 512} (+1024 with --h1024); M in {1, 8, 32, 64, 128, 256, 512}
// (bwd_weight adds 1024, 2048). --quick: H in {64, 512}, fewer M, fewer reps.
//
// Method (checks before it times, then interleaves): per shape, every
// configuration runs once and its C is compared with the first one's (a
// mismatch is reported and makes the exit status 1); then R rounds, each
// running every configuration once in a rotated order, one sample = back-to-back
// calls for about --sample-ms; the reported time is the median over rounds.
// On a shared machine a sample is kept only when it is "clean": the process got
// >= 85% of threads x wall time of CPU (CLOCK_PROCESS_CPUTIME_ID), i.e. no other
// process took one of our cores; configurations short of R clean samples get
// extra rounds (up to 4R), and when fewer than R/2 are clean the median of all
// samples is reported with "noisy": true. "best_gflops" is the fastest sample.
// After a sample that used a library's own threads the bench sleeps --settle-ms,
// so that OpenMP/OpenBLAS workers still spinning do not steal the next sample's
// core. OPENBLAS_THREAD_TIMEOUT defaults to 20 here (2^20 cycles of spinning, not
// 2^28) for the same reason, unless already set.
//
// Output: one JSON object per line: a header (machine, library versions), the
// peak estimate (best GFLOP/s on a 2048^3 product, 1 and 2 threads), one line
// per shape x configuration, and a summary with the geometric mean GFLOP/s of
// each back end in each mode and the chosen default.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/gemm.h"
#include "runtime/thread_pool.h"
#include "vjit/error.h"

namespace {

using vjit::runtime::GemmBackend;
using vjit::runtime::GemmSplit;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// How a configuration runs one product.
enum class Mode { Single, Library, Rows, Cols, Auto, Fixed };

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Single: return "none";
    case Mode::Library: return "library";
    case Mode::Rows: return "rows";
    case Mode::Cols: return "cols";
    case Mode::Auto: return "auto";
    case Mode::Fixed: return "fixed";
  }
  return "?";
}

// Summary key of a mode: "1t", "2t_library", "2t_rows", "2t_cols", "2t_auto".
std::string mode_key(Mode mode) { return mode == Mode::Single ? "1t" : std::string("2t_") + mode_name(mode); }

struct Config {
  GemmBackend backend;
  Mode mode;
  int threads() const { return mode == Mode::Single ? 1 : 2; }
};

struct Product {
  std::string op;
  int64_t h;
  bool trans_a, trans_b;
  int64_t m, n, k;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

struct Buffer {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  size_t size = 0;
  explicit Buffer(size_t n, uint64_t seed = 0) : size(n) {
    const size_t bytes = ((std::max<size_t>(n, 1) * sizeof(float) + 63) / 64) * 64;
    p.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!p) throw std::bad_alloc();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) p.get()[i] = seed ? uniform(rng) : 0.0f;
  }
  float* data() { return p.get(); }
};

struct Options {
  bool quick = false;
  bool h1024 = false;
  int reps = 7;
  double sample_ms = 4.0;
  double settle_ms = 10.0;
  std::vector<GemmBackend> only;  // --backends (empty = all available)
  std::vector<std::string> modes;  // --modes (empty = all)
};

class Bench {
 public:
  explicit Bench(const Options& o) : opt_(o), pool_(2) {
    for (GemmBackend b : vjit::runtime::kGemmBackends)
      if (b != GemmBackend::Reference && vjit::runtime::gemm_backend_available(b) &&
          (o.only.empty() || std::find(o.only.begin(), o.only.end(), b) != o.only.end()))
        backends_.push_back(b);
    for (GemmBackend b : backends_) {
      for (Mode mode : {Mode::Single, Mode::Library, Mode::Rows, Mode::Cols, Mode::Auto, Mode::Fixed}) {
        if (mode == Mode::Library && !vjit::runtime::gemm_backend_has_library_threading(b)) continue;
        if (!o.modes.empty() && std::find(o.modes.begin(), o.modes.end(), mode_name(mode)) == o.modes.end()) continue;
        configs_.push_back({b, mode});
      }
    }
  }

  const std::vector<GemmBackend>& backends() const { return backends_; }

  // Runs every configuration on `p`; returns the median ms per call of each.
  // `only` restricts the modes (empty = all). Prints one line per configuration.
  std::vector<double> measure(const Product& p, const std::vector<Mode>& only = {}, bool print = true) {
    std::vector<Config> configs;
    for (const Config& c : configs_)
      if (only.empty() || std::find(only.begin(), only.end(), c.mode) != only.end()) configs.push_back(c);
    last_configs_ = configs;
    if (configs.empty()) return {};
    const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
    const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
    Buffer a(size_t(a_rows * a_cols), 11), b(size_t(b_rows * b_cols), 12), c(size_t(p.m * p.n));
    Buffer reference(size_t(p.m * p.n));
    auto call = [&](const Config& cfg, float* out) {
      run(cfg, p, a.data(), a_cols, b.data(), b_cols, out);
    };

    // Check: every configuration against the first, before any timing.
    std::vector<int64_t> calls(configs.size(), 1);
    for (size_t i = 0; i < configs.size(); ++i) {
      float* out = i == 0 ? reference.data() : c.data();
      const auto t0 = Clock::now();
      call(configs[i], out);
      const double ms = elapsed_ms(t0);
      settle(configs[i]);
      calls[i] = std::max<int64_t>(1, int64_t(std::llround(opt_.sample_ms / std::max(ms, 1e-4))));
      if (i > 0) check(p, configs[i], configs[0], c.data(), reference.data());
    }

    // Rounds: every configuration once per round, rotated and alternating in
    // direction so that no configuration always follows the same one. A sample
    // is "clean" when the process got the CPU time its threads could use
    // (process CPU time >= 85% of threads x wall time): on a shared machine a
    // sample during which another process took one of the two cores measures
    // the neighbour, not the library. Rounds continue (up to 4x the planned
    // number) for the configurations that still lack `reps` clean samples.
    std::vector<std::vector<double>> all(configs.size()), clean(configs.size());
    const int max_rounds = 4 * opt_.reps;
    for (int rep = 0; rep < max_rounds; ++rep) {
      bool any = false;
      for (size_t j = 0; j < configs.size(); ++j) {
        const size_t idx = ((rep % 2 == 0 ? j : configs.size() - 1 - j) + size_t(rep)) % configs.size();
        if (rep >= opt_.reps && int(clean[idx].size()) >= opt_.reps) continue;
        any = true;
        const double cpu0 = process_cpu_ms();
        const auto t0 = Clock::now();
        for (int64_t r = 0; r < calls[idx]; ++r) call(configs[idx], c.data());
        const double wall = elapsed_ms(t0);
        const double cpu = process_cpu_ms() - cpu0;
        const double ms = wall / double(calls[idx]);
        all[idx].push_back(ms);
        if (cpu >= 0.85 * configs[idx].threads() * wall) clean[idx].push_back(ms);
        settle(configs[idx]);
      }
      if (!any) break;
    }

    std::vector<double> medians;
    for (size_t i = 0; i < configs.size(); ++i) {
      const bool enough_clean = 2 * clean[i].size() >= size_t(opt_.reps);
      std::vector<double>& s = enough_clean ? clean[i] : all[i];
      std::sort(s.begin(), s.end());
      const double ms = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
      medians.push_back(ms);
      const double gflops = p.flops() / (ms * 1e6);
      if (print) {
        json line{{"backend", vjit::runtime::gemm_backend_name(configs[i].backend)},
                  {"threads", configs[i].threads()},
                  {"split", mode_name(configs[i].mode)},
                  {"op", p.op},
                  {"h", p.h},
                  {"m", p.m},
                  {"n", p.n},
                  {"k", p.k},
                  {"trans_a", p.trans_a},
                  {"trans_b", p.trans_b},
                  {"gflops", round3(gflops)},
                  {"ms", round3(ms * 1000.0) / 1000.0},
                  {"best_gflops", round3(p.flops() / (s.front() * 1e6))},
                  {"samples", all[i].size()},
                  {"clean", clean[i].size()}};
        if (!enough_clean) line["noisy"] = true;
        if (configs[i].mode == Mode::Auto)
          line["auto_choice"] = vjit::runtime::gemm_split_name(vjit::runtime::choose_gemm_split(2, p.m, p.n, p.k));
        if (configs[i].mode == Mode::Fixed) {
          const vjit::runtime::GemmBlocks blocks = vjit::runtime::fixed_gemm_blocks(p.m, p.n, p.k);
          line["fixed_blocks"] = std::string(vjit::runtime::gemm_split_name(blocks.split)) + " x" +
                                 std::to_string(blocks.count);
        }
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
        geo_[configs[i].backend][mode_key(configs[i].mode)].push_back(std::log(gflops));
        geo_op_[configs[i].backend][p.op + "/" + mode_key(configs[i].mode)].push_back(std::log(gflops));
      }
    }
    last_configs_ = configs;
    return medians;
  }

  const std::vector<Config>& last_configs() const { return last_configs_; }
  std::map<GemmBackend, std::map<std::string, std::vector<double>>>& geo() { return geo_; }
  std::map<GemmBackend, std::map<std::string, std::vector<double>>>& geo_op() { return geo_op_; }
  bool failed() const { return failed_; }

 private:
  static double elapsed_ms(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  static double process_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
  }
  static double round3(double x) { return std::round(x * 1000.0) / 1000.0; }

  void settle(const Config& cfg) const {
    if (cfg.mode == Mode::Library && opt_.settle_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt_.settle_ms));
  }

  void run(const Config& cfg, const Product& p, const float* a, int64_t lda, const float* b, int64_t ldb, float* c) {
    switch (cfg.mode) {
      case Mode::Single:
        vjit::runtime::sgemm(cfg.backend, p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a, lda, b, ldb, 0.0f, c, p.n);
        return;
      case Mode::Library:
        vjit::runtime::sgemm_library_threaded(cfg.backend, 2, p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a, lda, b, ldb,
                                     0.0f, c, p.n);
        return;
      case Mode::Rows:
      case Mode::Cols:
      case Mode::Auto:
      case Mode::Fixed: {
        const GemmSplit split = cfg.mode == Mode::Rows    ? GemmSplit::Rows
                                : cfg.mode == Mode::Cols  ? GemmSplit::Cols
                                : cfg.mode == Mode::Fixed ? GemmSplit::Fixed
                                                          : GemmSplit::Auto;
        vjit::runtime::parallel_sgemm(pool_, cfg.backend, p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a, lda, b, ldb, 0.0f, c,
                             p.n, split);
        return;
      }
    }
  }

  // Max |C - C_first| relative to max |C_first|; float products of length k
  // differ by ~k * 2^-24 at worst between libraries.
  void check(const Product& p, const Config& cfg, const Config& first, const float* c, const float* ref) {
    double max_ref = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < p.m * p.n; ++i) {
      max_ref = std::max(max_ref, double(std::fabs(ref[i])));
      const double d = std::fabs(double(c[i]) - double(ref[i]));
      max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
    }
    const double tol = 1e-6 * double(p.k) * std::max(max_ref, 1.0);
    if (!(max_diff <= tol)) {
      failed_ = true;
      json line{{"check_failed", true},
                {"backend", vjit::runtime::gemm_backend_name(cfg.backend)},
                {"split", mode_name(cfg.mode)},
                {"against", std::string(vjit::runtime::gemm_backend_name(first.backend)) + "/" + mode_name(first.mode)},
                {"op", p.op},
                {"m", p.m},
                {"n", p.n},
                {"k", p.k},
                {"max_diff", max_diff},
                {"tolerance", tol}};
      std::printf("%s\n", line.dump().c_str());
    }
  }

  Options opt_;
  vjit::runtime::ThreadPool pool_;
  std::vector<GemmBackend> backends_;
  std::vector<Config> configs_;
  std::vector<Config> last_configs_;
  std::map<GemmBackend, std::map<std::string, std::vector<double>>> geo_, geo_op_;
  bool failed_ = false;
};

double geomean(const std::vector<double>& logs) {
  if (logs.empty()) return 0.0;
  double s = 0.0;
  for (double x : logs) s += x;
  return std::round(std::exp(s / double(logs.size())) * 100.0) / 100.0;
}

std::vector<Product> products(const Options& o) {
  std::vector<int64_t> hs = o.quick ? std::vector<int64_t>{64, 512} : std::vector<int64_t>{64, 256, 512};
  if (o.h1024) hs.push_back(1024);
  const std::vector<int64_t> rows =
      o.quick ? std::vector<int64_t>{1, 32, 256} : std::vector<int64_t>{1, 8, 32, 64, 128, 256, 512};
  const std::vector<int64_t> grad_rows = o.quick ? std::vector<int64_t>{32, 512, 2048}
                                                 : std::vector<int64_t>{1, 8, 32, 64, 128, 256, 512, 1024, 2048};
  std::vector<Product> out;
  for (int64_t h : hs) {
    for (int64_t m : rows) out.push_back({"fwd", h, false, true, m, 4 * h, 2 * h});
    for (int64_t m : rows) out.push_back({"bwd_data", h, false, false, m, 2 * h, 4 * h});
    for (int64_t m : grad_rows) out.push_back({"bwd_weight", h, true, false, 4 * h, 2 * h, m});
  }
  return out;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--quick] [--h1024] [--reps N] [--sample-ms X] [--settle-ms X]\n"
               "       [--backends onednn,openblas,blis,libxsmm] [--modes none,library,rows,cols,auto,fixed]\n", argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--quick") {
      o.quick = true;
      o.reps = 5;
      o.sample_ms = 3.0;
    } else if (arg == "--h1024") {
      o.h1024 = true;
    } else if (arg == "--reps") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.reps = std::max(1, std::atoi(v));
    } else if (arg == "--sample-ms") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.sample_ms = std::atof(v);
    } else if (arg == "--backends") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      std::string list = v;
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        try {
          o.only.push_back(vjit::runtime::parse_gemm_backend(list.substr(pos, comma - pos)));
        } catch (const vjit::UserError& e) {
          std::fprintf(stderr, "gemm_bench: --backends: %s\n", e.what());
          return 2;
        }
        pos = comma + 1;
      }
    } else if (arg == "--modes") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      std::string list = v;
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        const std::string mode = list.substr(pos, comma - pos);
        if (mode != "none" && mode != "library" && mode != "rows" && mode != "cols" && mode != "auto" &&
            mode != "fixed") {
          std::fprintf(stderr, "gemm_bench: --modes: unknown mode '%s'; valid: none, library, rows, cols, auto, fixed\n",
                       mode.c_str());
          return 2;
        }
        o.modes.push_back(mode);
        pos = comma + 1;
      }
    } else if (arg == "--settle-ms") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.settle_ms = std::atof(v);
    } else {
      return usage(argv[0]);
    }
  }
  // Before OpenBLAS is loaded (it is dlopen'ed on first use).
  setenv("OPENBLAS_THREAD_TIMEOUT", "20", 0);

  try {
    Bench bench(o);
    json header{{"bench", "gemm"},
                {"quick", o.quick},
                {"reps", o.reps},
                {"sample_ms", o.sample_ms},
                {"settle_ms", o.settle_ms},
                {"hardware_threads", std::thread::hardware_concurrency()},
                {"openblas_thread_timeout", std::getenv("OPENBLAS_THREAD_TIMEOUT")}};
    for (GemmBackend b : vjit::runtime::kGemmBackends) header["libraries"][vjit::runtime::gemm_backend_name(b)] = vjit::runtime::gemm_backend_info(b);
    std::printf("%s\n", header.dump().c_str());
    std::fflush(stdout);

    // Peak estimate: a big square product, every back end, 1 and 2 threads.
    const Product square{"square", 0, false, false, 2048, 2048, 2048};
    const std::vector<double> ms = bench.measure(square, {Mode::Single, Mode::Library, Mode::Auto}, false);
    double peak1 = 0.0, peak2 = 0.0;
    json per_config = json::object();
    const auto& cfgs = bench.last_configs();
    for (size_t i = 0; i < ms.size(); ++i) {
      const double g = square.flops() / (ms[i] * 1e6);
      per_config[std::string(vjit::runtime::gemm_backend_name(cfgs[i].backend)) + "/" + mode_key(cfgs[i].mode)] =
          std::round(g * 10.0) / 10.0;
      (cfgs[i].threads() == 1 ? peak1 : peak2) = std::max(cfgs[i].threads() == 1 ? peak1 : peak2, g);
    }
    json peak{{"peak", true},
              {"shape", "2048x2048x2048"},
              {"gflops_1t", std::round(peak1 * 10.0) / 10.0},
              {"gflops_2t", std::round(peak2 * 10.0) / 10.0},
              {"by_config", per_config}};
    std::printf("%s\n", peak.dump().c_str());
    std::fflush(stdout);

    for (const Product& p : products(o)) bench.measure(p);

    json summary{{"summary", true}};
    GemmBackend best = vjit::runtime::GemmBackend::Reference;
    double best_geo = -1.0;
    for (auto& [backend, modes] : bench.geo()) {
      for (auto& [mode, logs] : modes) summary["geomean_gflops"][vjit::runtime::gemm_backend_name(backend)][mode] = geomean(logs);
      const double g = geomean(modes["2t_auto"]);
      if (g > best_geo) {
        best_geo = g;
        best = backend;
      }
    }
    for (auto& [backend, keys] : bench.geo_op())
      for (auto& [key, logs] : keys) summary["geomean_gflops_by_op"][vjit::runtime::gemm_backend_name(backend)][key] = geomean(logs);
    summary["peak_gflops_1t"] = std::round(peak1 * 10.0) / 10.0;
    summary["peak_gflops_2t"] = std::round(peak2 * 10.0) / 10.0;
    summary["best_by_measurement"] = vjit::runtime::gemm_backend_name(best);
    summary["rule"] = "highest geometric-mean GFLOP/s over all shapes with 2 threads, split=auto (what vjit runs)";
    summary["default"] = vjit::runtime::gemm_backend_name(vjit::runtime::default_gemm_backend());
    summary["checks_passed"] = !bench.failed();
    std::printf("%s\n", summary.dump().c_str());
    return bench.failed() ? 1 : 0;
  } catch (const vjit::Error& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
}
