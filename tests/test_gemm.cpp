// GEMM back ends (runtime/gemm.h) and the thread pool / parallel GEMM
// (runtime/thread_pool.h).
//
// Every available back end is compared with the Reference back end (double
// accumulation) on every trans_a x trans_b combination and on odd shapes.
// Tolerance, per element of C:
//
//   |C - C_ref| <= 1e-5 * (|alpha| * sum_p |op(A)_ip| * |op(B)_pj| + |beta| * |C0_ij|)
//
// i.e. relative to the magnitude of the terms summed, which is what float
// rounding scales with; a plain relative error on C would be unbounded where the
// terms cancel. (The a-priori bound of a float dot product is k * 2^-24 ~ 6e-5
// times that sum for k = 1024; blocked sums of random-sign data come out well
// below 1e-5.)
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/gemm.h"
#include "runtime/thread_pool.h"
#include "vjit/error.h"
#include "vjit/vjit.h"

namespace vjit::runtime {
namespace {

constexpr double kRelTol = 1e-5;

struct Shape {
  int64_t m, n, k;
};

// A row-major operand of `rows` x `cols` with leading dimension `ld`, filled
// with uniform values in [-1, 1]; the padding holds NaN so a read past a row is seen.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 1;
  std::vector<float> data;
  Matrix(int64_t r, int64_t c, int64_t pad, uint64_t seed) : rows(r), cols(c), ld(std::max<int64_t>(1, c + pad)) {
    data.assign(size_t(std::max<int64_t>(1, rows * ld)), std::numeric_limits<float>::quiet_NaN());
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) data[size_t(i * ld + j)] = uniform(rng);
  }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
  float at(int64_t i, int64_t j) const { return data[size_t(i * ld + j)]; }
};

// One product's operands: A stored [m,k] or [k,m], B stored [k,n] or [n,k], C [m,n].
struct Problem {
  bool trans_a, trans_b;
  Shape s;
  Matrix a, b, c0;
  Problem(bool ta, bool tb, Shape shape, int64_t pad = 3, uint64_t seed = 1)
      : trans_a(ta),
        trans_b(tb),
        s(shape),
        a(ta ? shape.k : shape.m, ta ? shape.m : shape.k, pad, seed * 3 + 1),
        b(tb ? shape.n : shape.k, tb ? shape.k : shape.n, pad, seed * 3 + 2),
        c0(shape.m, shape.n, pad, seed * 3 + 3) {}
  float op_a(int64_t i, int64_t p) const { return trans_a ? a.at(p, i) : a.at(i, p); }
  float op_b(int64_t p, int64_t j) const { return trans_b ? b.at(j, p) : b.at(p, j); }
};

std::vector<float> run(GemmBackend backend, const Problem& p, float alpha, float beta,
                       const std::vector<float>* c_init = nullptr) {
  std::vector<float> c = c_init ? *c_init : p.c0.data;
  sgemm(backend, p.trans_a, p.trans_b, p.s.m, p.s.n, p.s.k, alpha, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld, beta,
        c.data(), p.c0.ld);
  return c;
}

// Checks `got` against `want` (the Reference result) element by element with the
// tolerance of the file comment; the padding of C must be left untouched.
double expect_close(const Problem& p, float alpha, float beta, const std::vector<float>& c_before,
                    const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  int bad = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < p.s.m; ++i) {
    for (int64_t j = 0; j < p.s.n; ++j) {
      double scale = 0.0;
      for (int64_t q = 0; q < p.s.k; ++q) scale += std::fabs(double(p.op_a(i, q)) * double(p.op_b(q, j)));
      scale = std::fabs(alpha) * scale;
      if (beta != 0.0f) scale += std::fabs(double(beta) * double(c_before[size_t(i * p.c0.ld + j)]));
      const size_t at = size_t(i * p.c0.ld + j);
      const double err = std::fabs(double(got[at]) - double(want[at]));
      const double allowed = kRelTol * scale + 1e-30;
      worst = std::max(worst, scale > 0 ? err / scale : err);
      if (!(err <= allowed) && bad++ < 5)
        ADD_FAILURE() << what << ": C[" << i << "," << j << "] = " << got[at] << ", reference " << want[at]
                      << ", error " << err << " > " << allowed;
    }
    for (int64_t j = p.s.n; j < p.c0.ld; ++j)
      EXPECT_TRUE(std::isnan(got[size_t(i * p.c0.ld + j)])) << what << ": padding of C row " << i << " was written";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance (worst error/scale " << worst << ")";
  return worst;
}

// The float-exact back ends usable here (the bf16 one has its own tolerance).
std::vector<GemmBackend> available_backends() {
  std::vector<GemmBackend> out;
  for (GemmBackend b : kGemmBackends)
    if (gemm_backend_available(b) && !gemm_backend_rounds_operands(b)) out.push_back(b);
  return out;
}

std::string label(GemmBackend b, const Problem& p) {
  return std::string(gemm_backend_name(b)) + (p.trans_a ? " A^T" : " A") + (p.trans_b ? " B^T" : " B") + " m=" +
         std::to_string(p.s.m) + " n=" + std::to_string(p.s.n) + " k=" + std::to_string(p.s.k);
}

// --- names, defaults, environment -------------------------------------------

TEST(GemmNames, ParseRoundTripsAndIsCaseInsensitive) {
  for (GemmBackend b : kGemmBackends) {
    EXPECT_EQ(parse_gemm_backend(gemm_backend_name(b)), b);
    std::string upper = gemm_backend_name(b);
    for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(parse_gemm_backend(upper), b);
  }
  EXPECT_EQ(parse_gemm_backend("auto"), default_gemm_backend());
  EXPECT_EQ(kGemmBackends.back(), GemmBackend::Reference);
}

TEST(GemmNames, UnknownNameListsTheValidOnes) {
  try {
    parse_gemm_backend("mkl");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'mkl'"), std::string::npos) << msg;
    for (const char* name : {"auto", "onednn", "openblas", "blis", "libxsmm", "onednn_bf16", "reference"})
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

// bf16 products: A and B rounded to bfloat16 (8 significant bits), products
// summed in float. Each term a·b is then off by at most about 2^-8 of |a·b|,
// so |C − C_ref| ≤ 2^-7 · Σ|a||b| with margin. Runs only where the CPU has
// AVX-512 BF16 or AMX; elsewhere using it is a UserError that says so.
TEST(Bf16Gemm, MatchesTheReferenceWithinBf16Rounding) {
  const std::string why = gemm_backend_unavailable_reason(GemmBackend::OneDnnBf16);
  if (!why.empty()) {
    EXPECT_THROW(select_gemm_backend("onednn_bf16"), UserError);
    GTEST_SKIP() << "skipped: onednn_bf16 unavailable here: " << why;
  }
  EXPECT_TRUE(gemm_backend_rounds_operands(GemmBackend::OneDnnBf16));
  EXPECT_NE(default_gemm_backend(), GemmBackend::OneDnnBf16) << "auto never picks a rounding back end";
  double worst_seen = 0;
  // The back end makes one primitive per (transposes, n, k, alpha, beta) and
  // leaves m and the leading dimensions to each call: the second and third
  // [·, 200, 65] products reuse the first one's primitive with other row
  // counts and padding.
  struct Case {
    Shape s;
    int64_t pad;
  };
  for (const Case& c : std::vector<Case>{{{1, 1, 1}, 3}, {{7, 13, 5}, 3}, {{37, 200, 65}, 3}, {{90, 200, 65}, 11},
                                         {{5, 200, 65}, 0}, {{64, 768, 512}, 3}}) {
    const Shape& s = c.s;
    for (int t = 0; t < 4; ++t) {
      const Problem p(t & 1, t & 2, s, c.pad);
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}}) {
        const std::vector<float> want = run(GemmBackend::Reference, p, alpha, beta);
        const std::vector<float> got = run(GemmBackend::OneDnnBf16, p, alpha, beta);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double scale = 0;
            for (int64_t q = 0; q < s.k; ++q) scale += std::fabs(double(p.op_a(i, q)) * double(p.op_b(q, j)));
            scale = std::fabs(alpha) * scale + std::fabs(beta * double(p.c0.data[size_t(i * p.c0.ld + j)]));
            const size_t at = size_t(i * p.c0.ld + j);
            const double err = std::fabs(double(got[at]) - double(want[at]));
            worst_seen = std::max(worst_seen, scale > 0 ? err / scale : err);
            EXPECT_LE(err, std::ldexp(1.0, -7) * scale + 1e-30) << label(GemmBackend::OneDnnBf16, p);
          }
      }
    }
  }
  std::cout << "bf16 GEMM: worst error / Σ|a||b| = " << worst_seen << "\n";
}

TEST(GemmNames, DefaultIsAvailable) {
  EXPECT_TRUE(gemm_backend_available(default_gemm_backend()));
  for (GemmBackend b : available_backends()) EXPECT_FALSE(gemm_backend_info(b).empty()) << gemm_backend_name(b);
}

// Options::gemm (VJIT_GEMM, parsed by jit/options.cpp) picks the back end; the
// runtime itself reads no environment variable.
TEST(GemmNames, OptionSelectsTheBackEnd) {
  EXPECT_EQ(select_gemm_backend(""), default_gemm_backend());
  EXPECT_EQ(select_gemm_backend("auto"), default_gemm_backend());
  EXPECT_EQ(select_gemm_backend("Reference"), GemmBackend::Reference);
  for (GemmBackend b : available_backends()) EXPECT_EQ(select_gemm_backend(gemm_backend_name(b)), b);
  try {
    select_gemm_backend("cublas");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("VJIT_GEMM=cublas"), std::string::npos) << msg;
    EXPECT_NE(msg.find("onednn"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reference"), std::string::npos) << msg;
  }
}

// The Engine takes the back end from its Options, whatever the environment says.
TEST(GemmNames, EngineUsesTheOption) {
  setenv("VJIT_GEMM", "no-such-backend", 1);
  Model model(1);
  Param w = model.add("W", vjit::Shape::mat(3, 4));
  Program program(model);
  program.add_type("leaf", [&](Builder& b) { b.add_loss(b.sum(b.matmul(w, b.pull(4)))); });
  Options options = Options::defaults();
  options.tuning.gemm = vjit::Options::Gemm::Reference;
  EXPECT_NO_THROW({ Engine engine(program, options); });
  options.tuning.gemm = vjit::Options::Gemm::Auto;
  EXPECT_NO_THROW({ Engine engine(program, options); });
  unsetenv("VJIT_GEMM");
}

TEST(GemmNames, UnbuiltBackendIsAClearUserError) {
  int unbuilt = 0;
  float one = 1.0f, out = 0.0f;
  for (GemmBackend b : kGemmBackends) {
    if (gemm_backend_available(b)) continue;
    ++unbuilt;
    try {
      sgemm(b, false, false, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &out, 1);
      FAIL() << "expected UserError for " << gemm_backend_name(b);
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(gemm_backend_name(b)), std::string::npos) << msg;
      if (!gemm_backend_built(b)) {
        EXPECT_NE(msg.find("not built"), std::string::npos) << msg;
      }
    }
    EXPECT_THROW(select_gemm_backend(gemm_backend_name(b)), UserError);
  }
  if (unbuilt == 0)
    GTEST_SKIP() << "every back end is built here; configure with e.g. "
                    "-DVJIT_BLIS_LIBRARY=VJIT_BLIS_LIBRARY-NOTFOUND to exercise this";
}

TEST(GemmArgs, BadArgumentsAreUserErrors) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  const GemmBackend be = GemmBackend::Reference;
  EXPECT_THROW(sgemm(be, false, false, -1, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2), UserError);
  EXPECT_THROW(sgemm(be, false, false, 2, 2, 3, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2), UserError);
  EXPECT_THROW(sgemm(be, true, false, 3, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2), UserError);
  EXPECT_THROW(sgemm(be, false, true, 2, 3, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 3), UserError);
  EXPECT_THROW(sgemm(be, false, false, 2, 3, 2, 1.0f, a.data(), 2, b.data(), 3, 0.0f, c.data(), 2), UserError);
  EXPECT_THROW(sgemm(be, false, false, 2, 2, 2, 1.0f, nullptr, 2, b.data(), 2, 0.0f, c.data(), 2), UserError);
}

// --- every back end against the reference ------------------------------------

TEST(GemmBackends, MatchReferenceOnOddShapesAndAllTransposes) {
  const std::vector<Shape> shapes{{1, 1, 1}, {7, 13, 5}, {64, 1024, 512}, {0, 5, 3}, {5, 0, 3}, {3, 17, 1}};
  std::map<std::string, double> worst;
  for (const Shape& s : shapes) {
    for (int t = 0; t < 4; ++t) {
      const Problem p(t & 1, t & 2, s);
      const std::vector<float> want = run(GemmBackend::Reference, p, 1.0f, 0.0f);
      for (GemmBackend b : available_backends()) {
        if (b == GemmBackend::Reference) continue;
        const double w = expect_close(p, 1.0f, 0.0f, p.c0.data, run(b, p, 1.0f, 0.0f), want, label(b, p));
        worst[gemm_backend_name(b)] = std::max(worst[gemm_backend_name(b)], w);
      }
    }
  }
  for (const auto& [name, w] : worst) std::printf("  %-9s worst |error| / scale = %.2e (tolerance %.0e)\n", name.c_str(), w, kRelTol);
}

TEST(GemmBackends, GeneralAlphaBeta) {
  for (int t = 0; t < 4; ++t) {
    const Problem p(t & 1, t & 2, Shape{33, 70, 41});
    for (auto [alpha, beta] : {std::pair{-1.5f, 0.5f}, std::pair{0.25f, 0.0f}, std::pair{1.0f, -2.0f}}) {
      const std::vector<float> want = run(GemmBackend::Reference, p, alpha, beta);
      for (GemmBackend b : available_backends())
        expect_close(p, alpha, beta, p.c0.data, run(b, p, alpha, beta), want,
                     label(b, p) + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta));
    }
  }
}

TEST(GemmBackends, BetaZeroIgnoresNaNInC) {
  for (int t = 0; t < 4; ++t) {
    const Problem p(t & 1, t & 2, Shape{9, 40, 17});
    std::vector<float> garbage(p.c0.data.size(), std::numeric_limits<float>::quiet_NaN());
    for (size_t i = 0; i < garbage.size(); i += 3) garbage[i] = std::numeric_limits<float>::infinity();
    // Padding must stay NaN for expect_close, so only the m x n block changes.
    const std::vector<float> want = run(GemmBackend::Reference, p, 1.0f, 0.0f);
    for (GemmBackend b : available_backends()) {
      const std::vector<float> got = run(b, p, 1.0f, 0.0f, &garbage);
      for (int64_t i = 0; i < p.s.m; ++i)
        for (int64_t j = 0; j < p.s.n; ++j)
          ASSERT_TRUE(std::isfinite(got[size_t(i * p.c0.ld + j)])) << label(b, p) << " C[" << i << "," << j << "]";
      std::vector<float> got_padded = got;
      for (int64_t i = 0; i < p.s.m; ++i)
        for (int64_t j = p.s.n; j < p.c0.ld; ++j) got_padded[size_t(i * p.c0.ld + j)] = std::nanf("");
      expect_close(p, 1.0f, 0.0f, garbage, got_padded, want, label(b, p) + " beta=0 over NaN");
    }
  }
  // k == 0 with beta == 0 writes zeros, also over NaN.
  for (GemmBackend b : available_backends()) {
    std::vector<float> c(6, std::numeric_limits<float>::quiet_NaN());
    sgemm(b, false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.0f, c.data(), 3);
    for (float x : c) EXPECT_EQ(x, 0.0f) << gemm_backend_name(b);
  }
}

TEST(GemmBackends, BetaOneAccumulates) {
  for (int t = 0; t < 4; ++t) {
    const Problem p(t & 1, t & 2, Shape{20, 48, 130});
    const std::vector<float> want = run(GemmBackend::Reference, p, 1.0f, 1.0f);
    for (GemmBackend b : available_backends()) {
      // Twice: C0 + P + P, checks that the second call reads what the first wrote.
      const std::vector<float> once = run(b, p, 1.0f, 1.0f);
      expect_close(p, 1.0f, 1.0f, p.c0.data, once, want, label(b, p) + " beta=1");
      const std::vector<float> twice = run(b, p, 1.0f, 1.0f, &once);
      const std::vector<float> want_twice = run(GemmBackend::Reference, p, 1.0f, 1.0f, &want);
      expect_close(p, 1.0f, 1.0f, want, twice, want_twice, label(b, p) + " beta=1 twice");
    }
  }
}

// --- thread pool --------------------------------------------------------------

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(size_t(std::max<int64_t>(n, 1)));
      std::atomic<int> bad_thread{0};
      pool.parallel_for(n, [&](int64_t task, int thread) {
        hits[size_t(task)].fetch_add(1);
        if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << "task " << i;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobs) {
  ThreadPool pool(3, /*spin_us=*/0);  // no spinning: every job goes through the futex path
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 2000; ++round) pool.parallel_for(3, [&](int64_t task) { sum.fetch_add(task + 1); });
  EXPECT_EQ(sum.load(), 2000 * 6);
}

// Jobs whose task counts change from one to the next, as the executor's GEMM
// blocks and row blocks do: a worker that wakes late for a finished job must
// not take a task of the next one, larger, job (it once did, reading the new
// job's count with the old job's claim word: a task ran twice and the caller
// waited forever for a count it had passed).
TEST(ThreadPool, JobsOfChangingSizesRunEveryTaskOnce) {
  // A lost job hangs the caller: give up after two minutes, saying why.
  std::promise<void> finished;
  std::thread watchdog([done = finished.get_future()] {
    if (done.wait_for(std::chrono::minutes(2)) == std::future_status::ready) return;
    std::fprintf(stderr, "ThreadPool.JobsOfChangingSizesRunEveryTaskOnce: a parallel_for never returned\n");
    std::abort();
  });
  const int64_t sizes[] = {2, 3, 4, 8, 2, 5, 3, 2, 7, 4};
  for (int threads : {2, 3, 4}) {
    for (int spin_us : {0, 50}) {
      ThreadPool pool(threads, spin_us);
      std::vector<std::atomic<int>> hits(8), busy(8);
      int bad = 0;
      for (int round = 0; round < 20000 && bad == 0; ++round) {
        const int64_t n = sizes[round % std::size(sizes)];
        for (int64_t i = 0; i < n; ++i) hits[size_t(i)].store(0);
        pool.parallel_for(n, [&](int64_t task) {
          hits[size_t(task)].fetch_add(1);
          // Uneven tasks, so that workers take part and some come late.
          for (int spin = 0; spin < 300 * int(task % 3); ++spin) busy[size_t(task)].fetch_add(1, std::memory_order_relaxed);
        });
        for (int64_t i = 0; i < n; ++i)
          if (hits[size_t(i)].load() != 1 && bad++ == 0)
            ADD_FAILURE() << "threads=" << threads << " spin_us=" << spin_us << " round " << round << ": task "
                          << i << " of " << n << " ran " << hits[size_t(i)].load() << " times";
      }
    }
  }
  finished.set_value();
  watchdog.join();
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(8,
                                 [&](int64_t task) {
                                   ran.fetch_add(1);
                                   if (task == 3) throw UserError("task 3 failed");
                                 }),
               UserError);
  EXPECT_EQ(ran.load(), 8);
  std::atomic<int> again{0};
  pool.parallel_for(4, [&](int64_t) { again.fetch_add(1); });
  EXPECT_EQ(again.load(), 4);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](int64_t) { pool.parallel_for(3, [&](int64_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 12);
}

// --- parallel_sgemm -----------------------------------------------------------

// Calls check(pool, problem, backend, split, what) for 1-3 threads, every
// shape, transpose combination, available back end and split.
template <typename Check>
void for_each_parallel_case(const std::vector<Shape>& shapes, Check&& check) {
  const GemmSplit splits[] = {GemmSplit::Auto, GemmSplit::Rows, GemmSplit::Cols, GemmSplit::None};
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (const Shape& s : shapes)
      for (int t = 0; t < 4; ++t) {
        const Problem p(t & 1, t & 2, s);
        for (GemmBackend b : available_backends())
          for (GemmSplit split : splits)
            check(pool, p, b, split,
                  label(b, p) + " threads=" + std::to_string(threads) + " split=" + gemm_split_name(split));
      }
  }
}

TEST(ParallelSgemm, EqualsTheSingleCall) {
  const std::vector<Shape> shapes{{1, 1, 1}, {1, 1000, 64}, {7, 13, 5}, {37, 200, 65}, {130, 96, 40}, {0, 4, 4}};
  for_each_parallel_case(shapes, [](ThreadPool& pool, const Problem& p, GemmBackend b, GemmSplit split,
                                    const std::string& what) {
    const Shape& s = p.s;
    const std::vector<float> single = run(b, p, 0.5f, 1.0f);
    std::vector<float> c = p.c0.data;
    parallel_sgemm(pool, b, p.trans_a, p.trans_b, s.m, s.n, s.k, 0.5f, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld, 1.0f,
                   c.data(), p.c0.ld, split);
    if (b == GemmBackend::Reference) {
      // Same loop per element: bit-identical, padding (NaN) included.
      EXPECT_EQ(std::memcmp(c.data(), single.data(), c.size() * sizeof(float)), 0) << what;
    } else {
      expect_close(p, 0.5f, 1.0f, p.c0.data, c, single, what);
    }
  });
}

// The bias epilogue equals C = bias rows, then one product with beta = 1.
TEST(ParallelSgemm, BiasEpilogueEqualsTheBiasThenTheProduct) {
  const std::vector<Shape> shapes{{1, 1, 1}, {37, 200, 65}, {130, 96, 40}, {0, 4, 4}, {5, 3, 0}};
  for_each_parallel_case(shapes, [](ThreadPool& pool, const Problem& p, GemmBackend b, GemmSplit split,
                                    const std::string& what) {
    const Shape& s = p.s;
    std::vector<float> bias(size_t(std::max<int64_t>(s.n, 1)));
    for (size_t j = 0; j < bias.size(); ++j) bias[j] = 0.25f * float(j % 7) - 0.5f;
    std::vector<float> with_bias = p.c0.data;  // rows start as the bias, the product added
    for (int64_t r = 0; r < s.m; ++r) std::copy(bias.begin(), bias.begin() + s.n, with_bias.begin() + r * p.c0.ld);
    std::vector<float> want = with_bias;
    sgemm(b, p.trans_a, p.trans_b, s.m, s.n, s.k, 1.0f, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld, 1.0f, want.data(),
          p.c0.ld);
    std::vector<float> c = p.c0.data;
    parallel_sgemm_bias(pool, b, p.trans_a, p.trans_b, s.m, s.n, s.k, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld,
                        bias.data(), 0, c.data(), p.c0.ld, split);
    expect_close(p, 1.0f, 1.0f, with_bias, c, want, what);
  });
}

// A per-row bias (bias_ld > 0: row r of C takes row r of the bias) equals C =
// those rows, then one product with beta = 1; a bias that is C itself
// (bias_ld = ldc) leaves C's rows as they are and adds the product.
TEST(ParallelSgemm, PerRowBiasEqualsTheRowsThenTheProduct) {
  const std::vector<Shape> shapes{{1, 1, 1}, {37, 200, 65}, {130, 96, 40}, {0, 4, 4}, {5, 3, 0}};
  for_each_parallel_case(shapes, [](ThreadPool& pool, const Problem& p, GemmBackend b, GemmSplit split,
                                    const std::string& what) {
    const Shape& s = p.s;
    const int64_t bias_ld = s.n + 5;  // another stride than C's
    std::vector<float> bias(size_t(std::max<int64_t>(s.m * bias_ld, 1)));
    for (size_t j = 0; j < bias.size(); ++j) bias[j] = 0.125f * float(j % 11) - 0.5f;
    std::vector<float> with_bias = p.c0.data;
    for (int64_t r = 0; r < s.m; ++r)
      std::copy_n(bias.begin() + r * bias_ld, s.n, with_bias.begin() + r * p.c0.ld);
    std::vector<float> want = with_bias;
    sgemm(b, p.trans_a, p.trans_b, s.m, s.n, s.k, 1.0f, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld, 1.0f, want.data(),
          p.c0.ld);
    std::vector<float> c = p.c0.data;
    parallel_sgemm_bias(pool, b, p.trans_a, p.trans_b, s.m, s.n, s.k, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld,
                        bias.data(), bias_ld, c.data(), p.c0.ld, split);
    expect_close(p, 1.0f, 1.0f, with_bias, c, want, what + " per-row bias");
    std::vector<float> in_place = with_bias;  // C's rows are the bias
    parallel_sgemm_bias(pool, b, p.trans_a, p.trans_b, s.m, s.n, s.k, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld,
                        in_place.data(), p.c0.ld, in_place.data(), p.c0.ld, split);
    expect_close(p, 1.0f, 1.0f, with_bias, in_place, want, what + " bias in C");
  });
}

TEST(ParallelSgemm, ValidatesBeforeSplitting) {
  ThreadPool pool(2);
  std::vector<float> a(64), b(64), c(64);
  EXPECT_THROW(parallel_sgemm(pool, GemmBackend::Reference, false, false, 4, 4, 4, 1.0f, a.data(), 3, b.data(), 4,
                              0.0f, c.data(), 4),
               UserError);
}

TEST(ParallelSgemm, AutoSplitChoices) {
  EXPECT_EQ(choose_gemm_split(1, 512, 1024, 512), GemmSplit::None);
  EXPECT_EQ(choose_gemm_split(2, 1, 1, 1), GemmSplit::None);
  EXPECT_EQ(choose_gemm_split(2, 1, 256, 128), GemmSplit::None);     // 65 kflop: not worth a thread
  EXPECT_EQ(choose_gemm_split(2, 1, 2048, 1024), GemmSplit::Cols);   // forward, one row
  EXPECT_EQ(choose_gemm_split(2, 64, 1024, 512), GemmSplit::Cols);   // forward, m < n
  EXPECT_EQ(choose_gemm_split(2, 2048, 1024, 512), GemmSplit::Rows); // weight gradient, m = 4H > n = 2H
  EXPECT_EQ(choose_gemm_split(2, 3000, 8, 100), GemmSplit::Rows);    // too few columns to split
  for (int threads : {2, 3, 4})
    for (int64_t m : {1, 7, 64, 1000})
      for (int64_t n : {1, 16, 100, 4096}) {
        const GemmSplit s = choose_gemm_split(threads, m, n, 256);
        if (s == GemmSplit::Rows) {
          EXPECT_GE(m, threads);
        }
        if (s == GemmSplit::Cols) {
          EXPECT_GE(n, 16 * threads);
        }
      }
}

// GemmSplit::Fixed: the blocks are a function of (m, n, k) alone, cover C
// exactly once, and are aligned like the per-thread splits.
TEST(ParallelSgemm, FixedBlocksDependOnTheShapeOnly) {
  const std::vector<Shape> shapes{{1, 1, 1},      {1, 256, 128},    {1, 2048, 1024}, {58, 1024, 512},
                                  {7, 13, 5},     {37, 200, 65},    {130, 96, 40},   {1024, 512, 2000},
                                  {3000, 8, 100}, {4096, 1024, 64}, {2, 20000, 300}, {0, 4, 4}};
  for (const Shape& s : shapes) {
    const std::string what = "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
    const GemmBlocks fixed = fixed_gemm_blocks(s.m, s.n, s.k);
    for (int threads : {1, 2, 3, 4, 7, 16}) {
      const GemmBlocks got = gemm_blocks(GemmSplit::Fixed, threads, s.m, s.n, s.k);
      EXPECT_EQ(got.split, fixed.split) << what << " threads=" << threads;
      EXPECT_EQ(got.size, fixed.size) << what << " threads=" << threads;
      EXPECT_EQ(got.count, fixed.count) << what << " threads=" << threads;
    }
    if (fixed.split == GemmSplit::None) {
      EXPECT_EQ(fixed.count, 1) << what;
      continue;
    }
    const int64_t extent = fixed.split == GemmSplit::Rows ? s.m : s.n;
    EXPECT_GE(fixed.count, 2) << what;
    EXPECT_LE(fixed.count, 4) << what;
    EXPECT_GE(fixed.size * fixed.count, extent) << what;
    EXPECT_LT(fixed.size * (fixed.count - 1), extent) << what;
    if (fixed.split == GemmSplit::Cols) {
      EXPECT_EQ(fixed.size % 16, 0) << what;
    }
    if (fixed.split == GemmSplit::Rows && fixed.size >= 8) {
      EXPECT_EQ(fixed.size % 8, 0) << what;
    }
    EXPECT_GE(2.0 * double(s.m) * double(s.n) * double(s.k), 5.0e5) << what << ": a small product is cut";
  }
  EXPECT_EQ(fixed_gemm_blocks(1, 256, 128).split, GemmSplit::None);    // 65 kflop: one call
  EXPECT_EQ(fixed_gemm_blocks(58, 1024, 512).split, GemmSplit::Cols);  // a task's forward product
  EXPECT_EQ(fixed_gemm_blocks(1024, 512, 2000).split, GemmSplit::Rows);  // a weight gradient
  EXPECT_EQ(fixed_gemm_blocks(1024, 512, 2000).count, 4);             // 2 GFLOP: four blocks
  EXPECT_EQ(fixed_gemm_blocks(58, 256, 256).count, 2);                // 7.6 MFLOP: two blocks
}

// GemmSplit::Fixed gives the same bits on every pool size and on the calling
// thread alone (serial_sgemm), with and without the bias epilogue, for every
// back end usable here, the bf16 one included.
TEST(ParallelSgemm, FixedSplitIsBitwiseTheSameOnAnyPool) {
  // K kept small: the split is over M and N, and under ASan (CI) the reference back end is slow.
  const std::vector<Shape> shapes{{58, 1024, 96}, {300, 512, 128}, {37, 200, 65}, {130, 96, 40}, {3, 2000, 70}};
  std::vector<GemmBackend> backends = available_backends();
  if (gemm_backend_available(GemmBackend::OneDnnBf16)) backends.push_back(GemmBackend::OneDnnBf16);
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int threads : {1, 2, 3, 4}) pools.push_back(std::make_unique<ThreadPool>(threads));
  for (const Shape& s : shapes)
    for (int t = 0; t < 4; ++t) {
      const Problem p(t & 1, t & 2, s);
      std::vector<float> bias(size_t(s.n));
      for (size_t j = 0; j < bias.size(); ++j) bias[j] = 0.125f * float(j % 5) - 0.25f;
      for (GemmBackend b : backends) {
        const std::string what = label(b, p);
        std::vector<float> want = p.c0.data, want_bias = p.c0.data;
        serial_sgemm(b, p.trans_a, p.trans_b, s.m, s.n, s.k, 0.5f, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld, 1.0f,
                     want.data(), p.c0.ld, GemmSplit::Fixed);
        serial_sgemm_bias(b, p.trans_a, p.trans_b, s.m, s.n, s.k, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld, bias.data(),
                          0, want_bias.data(), p.c0.ld, GemmSplit::Fixed);
        for (auto& pool : pools) {
          std::vector<float> c = p.c0.data, c_bias = p.c0.data;
          parallel_sgemm(*pool, b, p.trans_a, p.trans_b, s.m, s.n, s.k, 0.5f, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld,
                         1.0f, c.data(), p.c0.ld, GemmSplit::Fixed);
          parallel_sgemm_bias(*pool, b, p.trans_a, p.trans_b, s.m, s.n, s.k, p.a.ptr(), p.a.ld, p.b.ptr(), p.b.ld,
                              bias.data(), 0, c_bias.data(), p.c0.ld, GemmSplit::Fixed);
          // memcmp: bit for bit, the NaN padding included.
          EXPECT_EQ(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)), 0)
              << what << " threads=" << pool->size();
          EXPECT_EQ(std::memcmp(c_bias.data(), want_bias.data(), c.size() * sizeof(float)), 0)
              << what << " bias threads=" << pool->size();
        }
        if (!gemm_backend_rounds_operands(b)) {
          const std::vector<float> single = run(b, p, 0.5f, 1.0f);
          expect_close(p, 0.5f, 1.0f, p.c0.data, want, single, what + " fixed blocks against one call");
        }
      }
    }
}

}  // namespace
}  // namespace vjit::runtime
