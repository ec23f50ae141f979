// Tests of the x86 vector math: ISA detection and parsing, the accuracy of the
// exp / log / tanh / sigmoid emitters against double-precision libm, their
// special values, the masked tails of the unary kernel, and the perf map.
//
// Accuracy metric: the distance in ulps between the kernel's float result and
// the double-precision libm result rounded to float, counted as the number of
// representable floats between them (so in the denormal range an ulp is the
// denormal spacing 2^-149: denormal results are held to the same absolute
// standard, not flushed). Both NaN counts as 0; one NaN is a failure.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/x86_isa.h"
#include "codegen/x86_unary_kernel.h"
#include "codegen/x86_vmath.h"
#include "vjit/error.h"

namespace vjit::codegen {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr UnaryFn kAllFns[] = {UnaryFn::Exp, UnaryFn::Log, UnaryFn::Tanh, UnaryFn::Sigmoid};

// The largest ulp error the accuracy test accepts, for every function and ISA.
constexpr std::int64_t kMaxUlp = 4;

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t to_bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// ---------------------------------------------------------------------------
// Reference and metric

double reference(UnaryFn fn, double x) {
  switch (fn) {
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
  }
  return x;
}

// Floats ordered as integers: +-0 -> 0, each next float +1.
std::int64_t ordinal(float x) {
  const auto bits = static_cast<std::int32_t>(to_bits(x));
  return bits >= 0 ? bits : -static_cast<std::int64_t>(bits & 0x7fffffff);
}

constexpr std::int64_t kNanMismatch = std::numeric_limits<std::int64_t>::max();

std::int64_t ulp_distance(float got, float want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) == std::isnan(want) ? 0 : kNanMismatch;
  const std::int64_t d = ordinal(got) - ordinal(want);
  return d < 0 ? -d : d;
}

// ---------------------------------------------------------------------------
// Test points, generated in chunks so neither inputs nor references are ever
// held all at once (~2.1e7 points).

// Floats a few thousand ulps either side of the places where something
// changes: overflow and underflow thresholds, branch switches, the denormal
// boundary, saturation, the clamps, 0 and 1.
std::vector<float> boundary_points() {
  const float centres[] = {
      88.72283935546875f,  // first float with exp(x) = +inf
      89.0f, -104.0f,      // exp's clamps
      -87.33654475f,       // exp(x) = FLT_MIN: results turn denormal below
      -103.2789307f,       // exp(x) = smallest denormal
      -103.9720771f,       // exp(x) = 2^-150: results round to 0 below
      0.0f, 1.0f, 0.5f, 2.0f,
      0.70710677f, 1.41421354f,  // log's reduction interval
      FLT_MIN, FLT_MAX, from_bits(1),  // denormal boundary, largest, smallest denormal
      0.625f,                          // tanh: polynomial / exp switch
      9.010913f,                       // tanh(x) rounds to 1 above
      17.32868f,                       // sigmoid(x) rounds to 1 above
      0.34657359f,                     // ln2/2: edge of exp's reduced range
  };
  constexpr int kHalfWidth = 4096;
  std::vector<float> points;
  for (float c : centres) {
    for (float centre : {c, -c}) {
      for (int k = -kHalfWidth; k <= kHalfWidth; ++k) {
        const std::int64_t o = ordinal(centre) + k;
        if (o > ordinal(FLT_MAX) || o < ordinal(-FLT_MAX)) continue;
        points.push_back(o >= 0 ? from_bits(static_cast<std::uint32_t>(o))
                                : -from_bits(static_cast<std::uint32_t>(-o)));
      }
    }
  }
  return points;
}

std::vector<float> special_points() {
  return {0.0f,   -0.0f,      kInf,     -kInf,   kNaN,           -kNaN,
          from_bits(0x7f800001) /* signalling NaN */, from_bits(1), -from_bits(1),
          FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 1.0f, -1.0f};
}

// Calls `visit(const std::vector<float>& chunk)` over all test points:
//   1. every 257th float bit pattern over the whole line (16.7e6 points:
//      every binade, both signs, denormals, infinities and NaNs),
//   2. 4e6 points evenly spaced in value over [-110, 110], where the functions
//      change the most,
//   3. the boundary neighbourhoods and the special values.
void for_each_chunk(const std::function<void(const std::vector<float>&)>& visit) {
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<float> chunk;
  chunk.reserve(kChunk);
  auto push = [&](float x) {
    chunk.push_back(x);
    if (chunk.size() == kChunk) {
      visit(chunk);
      chunk.clear();
    }
  };
  constexpr std::uint64_t kStride = 257;
  for (std::uint64_t bits = 0; bits <= 0xffffffffull; bits += kStride) {
    push(from_bits(static_cast<std::uint32_t>(bits)));
  }
  constexpr int kLinear = 4'000'000;
  for (int i = 0; i <= kLinear; ++i) push(static_cast<float>(-110.0 + 220.0 * i / kLinear));
  for (float x : boundary_points()) push(x);
  for (float x : special_points()) push(x);
  if (!chunk.empty()) visit(chunk);
}

// ---------------------------------------------------------------------------
// ISA detection and parsing

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_EQ(parse_isa("AVX512"), Isa::Avx512);
  EXPECT_EQ(parse_isa("auto"), best_isa());
}

TEST(Isa, UnknownNameListsTheValidOnes) {
  try {
    parse_isa("sse9");
    FAIL() << "parse_isa accepted 'sse9'";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sse9"), std::string::npos) << msg;
    for (const char* name : {"auto", "scalar", "avx2", "avx512"}) {
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
    }
  }
}

TEST(Isa, BestIsaIsAvailableAndOrdered) {
  EXPECT_TRUE(cpu_has(Isa::Scalar));
  EXPECT_TRUE(cpu_has(best_isa()));
  if (cpu_has(Isa::Avx512)) {
    EXPECT_TRUE(cpu_has(Isa::Avx2));
  }
  EXPECT_NO_THROW(require_isa(best_isa()));
}

TEST(Isa, RequireMissingIsaNamesWhatTheCpuHas) {
  if (cpu_has(Isa::Avx512)) GTEST_SKIP() << "this CPU has every ISA; nothing is missing";
  try {
    require_isa(Isa::Avx512);
    FAIL() << "require_isa(avx512) passed on a CPU without it";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("avx512"), std::string::npos) << msg;
    EXPECT_NE(msg.find(isa_name(best_isa())), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------
// Accuracy

struct FnIsa {
  UnaryFn fn;
  Isa isa;
};

std::string param_name(const testing::TestParamInfo<FnIsa>& info) {
  return std::string(unary_fn_name(info.param.fn)) + "_" + isa_name(info.param.isa);
}

std::vector<FnIsa> vector_cases() {
  std::vector<FnIsa> cases;
  for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
    for (UnaryFn fn : kAllFns) cases.push_back({fn, isa});
  }
  return cases;
}

class VMathAccuracy : public testing::TestWithParam<FnIsa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam().isa)) {
      GTEST_SKIP() << "this CPU lacks " << isa_name(GetParam().isa) << " (best: "
                   << isa_name(best_isa()) << ")";
    }
  }
};

// The worst point of one output range.
struct Worst {
  std::int64_t ulp = 0;
  float x = 0.0f, got = 0.0f, want = 0.0f;
  std::size_t points = 0;

  void update(std::int64_t d, float x_, float got_, float want_) {
    ++points;
    if (d > ulp) {
      ulp = d;
      x = x_;
      got = got_;
      want = want_;
    }
  }
  std::string str() const {
    std::ostringstream out;
    out.precision(9);
    out << ulp << " ulp over " << points << " points";
    if (ulp > 0) out << " (worst x=" << x << " got=" << got << " want=" << want << ")";
    return out.str();
  }
};

TEST_P(VMathAccuracy, MaxUlpErrorOverTheFloatLine) {
  // Not a structured binding: the lambda below captures fn, which clang before 16 refuses for bindings.
  const UnaryFn fn = GetParam().fn;
  const Isa isa = GetParam().isa;
  const UnaryKernel kernel(isa, fn);
  Worst normal, denormal;  // by the reference's range
  std::vector<float> got;
  for_each_chunk([&](const std::vector<float>& xs) {
    got.resize(xs.size());
    kernel(xs.data(), got.data(), static_cast<std::int64_t>(xs.size()));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float want = static_cast<float>(reference(fn, xs[i]));
      const std::int64_t d = ulp_distance(got[i], want);
      (std::fabs(want) < FLT_MIN && want != 0.0f ? denormal : normal).update(d, xs[i], got[i], want);
    }
  });
  std::printf("[ vmath    ] %-7s %-6s max error %s; denormal results: %s\n", unary_fn_name(fn),
              isa_name(isa), normal.str().c_str(), denormal.str().c_str());
  RecordProperty("max_ulp", static_cast<int>(std::min<std::int64_t>(normal.ulp, 1 << 30)));
  RecordProperty("max_ulp_denormal", static_cast<int>(std::min<std::int64_t>(denormal.ulp, 1 << 30)));
  EXPECT_GE(normal.points + denormal.points, 20'000'000u);
  EXPECT_LE(normal.ulp, kMaxUlp) << normal.str();
  EXPECT_LE(denormal.ulp, kMaxUlp) << denormal.str();
}

// Every one of the 2^32 inputs (about 3 minutes per function on one core):
// run with --gtest_also_run_disabled_tests --gtest_filter='*Exhaustive*'.
TEST_P(VMathAccuracy, DISABLED_ExhaustiveMaxUlpError) {
  const auto [fn, isa] = GetParam();
  const UnaryKernel kernel(isa, fn);
  Worst normal, denormal;
  constexpr std::uint64_t kChunk = 1 << 20;
  std::vector<float> xs(kChunk), got(kChunk);
  for (std::uint64_t base = 0; base < (1ull << 32); base += kChunk) {
    for (std::uint64_t i = 0; i < kChunk; ++i) xs[i] = from_bits(static_cast<std::uint32_t>(base + i));
    kernel(xs.data(), got.data(), static_cast<std::int64_t>(kChunk));
    for (std::uint64_t i = 0; i < kChunk; ++i) {
      const float want = static_cast<float>(reference(fn, xs[i]));
      const std::int64_t d = ulp_distance(got[i], want);
      (std::fabs(want) < FLT_MIN && want != 0.0f ? denormal : normal).update(d, xs[i], got[i], want);
    }
  }
  std::printf("[ vmath    ] exhaustive %-7s %-6s max error %s; denormal results: %s\n",
              unary_fn_name(fn), isa_name(isa), normal.str().c_str(), denormal.str().c_str());
  EXPECT_LE(normal.ulp, kMaxUlp) << normal.str();
  EXPECT_LE(denormal.ulp, kMaxUlp) << denormal.str();
}

// Special values: exact, NaN for NaN.
struct Special {
  float x;
  float want;
};

std::vector<Special> specials(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Exp:
      return {{kNaN, kNaN},         {-kNaN, kNaN},           {-kInf, 0.0f},
              {kInf, kInf},         {0.0f, 1.0f},            {-0.0f, 1.0f},
              {88.72283935546875f, kInf} /* first overflow */,
              {88.72283172607421875f, 3.40279851e38f} /* last finite */,
              {FLT_MAX, kInf},      {-FLT_MAX, 0.0f},        {-104.0f, 0.0f},
              {from_bits(1), 1.0f}, {-from_bits(1), 1.0f}};
    case UnaryFn::Log:
      return {{kNaN, kNaN},         {-kNaN, kNaN},  {0.0f, -kInf},  {-0.0f, -kInf},
              {-1.0f, kNaN},        {-kInf, kNaN},  {-from_bits(1), kNaN},
              {kInf, kInf},         {1.0f, 0.0f},
              {from_bits(1), static_cast<float>(std::log(static_cast<double>(from_bits(1))))},
              {FLT_MIN, static_cast<float>(std::log(static_cast<double>(FLT_MIN)))},
              {FLT_MAX, static_cast<float>(std::log(static_cast<double>(FLT_MAX)))}};
    case UnaryFn::Tanh:
      return {{kNaN, kNaN},  {-kNaN, kNaN},  {kInf, 1.0f},       {-kInf, -1.0f},
              {0.0f, 0.0f},  {-0.0f, -0.0f}, {FLT_MAX, 1.0f},    {-FLT_MAX, -1.0f},
              {20.0f, 1.0f}, {-20.0f, -1.0f}, {from_bits(1), from_bits(1)}};
    case UnaryFn::Sigmoid:
      return {{kNaN, kNaN},     {-kNaN, kNaN},     {-kInf, 0.0f},  {kInf, 1.0f},
              {0.0f, 0.5f},     {-0.0f, 0.5f},     {FLT_MAX, 1.0f}, {-FLT_MAX, 0.0f},
              {-200.0f, 0.0f},  {40.0f, 1.0f}};
  }
  return {};
}

TEST_P(VMathAccuracy, SpecialValuesAreExact) {
  const auto [fn, isa] = GetParam();
  const UnaryKernel kernel(isa, fn);
  for (const Special& s : specials(fn)) {
    float got = 0.0f;
    kernel(&s.x, &got, 1);
    if (std::isnan(s.want)) {
      EXPECT_TRUE(std::isnan(got)) << unary_fn_name(fn) << "(" << s.x << ") = " << got;
    } else {
      EXPECT_EQ(to_bits(got), to_bits(s.want))
          << unary_fn_name(fn) << "(" << s.x << ") = " << got << ", want " << s.want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vector, VMathAccuracy, testing::ValuesIn(vector_cases()), param_name);

// ---------------------------------------------------------------------------
// Tails: masked loads and stores stay inside [0, n)

// Two pages, the second PROT_NONE: an array ending at the first page's end
// faults on any access past it.
class GuardedPages {
 public:
  GuardedPages() : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    void* p = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(p);
    if (mprotect(base_ + page_, page_, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
  }
  ~GuardedPages() { munmap(base_, 2 * page_); }
  GuardedPages(const GuardedPages&) = delete;
  GuardedPages& operator=(const GuardedPages&) = delete;

  // n floats ending exactly at the guard page.
  float* array_at_end(std::size_t n) { return reinterpret_cast<float*>(base_ + page_) - n; }
  std::size_t page_floats() const { return page_ / sizeof(float); }

 private:
  std::size_t page_;
  char* base_ = nullptr;
};

class UnaryKernelTail : public testing::TestWithParam<FnIsa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam().isa)) {
      GTEST_SKIP() << "this CPU lacks " << isa_name(GetParam().isa) << " (best: "
                   << isa_name(best_isa()) << ")";
    }
  }
};

std::vector<FnIsa> all_cases() {
  std::vector<FnIsa> cases = vector_cases();
  for (UnaryFn fn : kAllFns) cases.push_back({fn, Isa::Scalar});
  return cases;
}

float tail_input(UnaryFn fn, std::size_t i) {
  const float x = 0.37f * static_cast<float>(i) - 3.0f;
  return fn == UnaryFn::Log ? std::fabs(x) + 0.01f : x;
}

TEST_P(UnaryKernelTail, NoAccessPastN) {
  const auto [fn, isa] = GetParam();
  const UnaryKernel kernel(isa, fn);
  GuardedPages src_pages, dst_pages;
  constexpr float kCanary = -12345.0f;
  for (std::size_t n : {0, 1, 15, 16, 17, 33}) {
    // Reference results: the same kernel over a larger array (full vectors
    // and the scalar path give the same bits per element).
    std::vector<float> in(64), want(64);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = tail_input(fn, i);
    kernel(in.data(), want.data(), static_cast<std::int64_t>(in.size()));

    // 1. Source and destination end at a PROT_NONE page: any read or write
    //    past n faults.
    float* src = src_pages.array_at_end(n);
    float* dst = dst_pages.array_at_end(n);
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n), src);
    std::fill(dst, dst + n, kCanary);
    kernel(src, dst, static_cast<std::int64_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(to_bits(dst[i]), to_bits(want[i])) << "n=" << n << " i=" << i;
    }

    // 2. Bytes past dst[n - 1] inside a buffer are unchanged.
    std::vector<float> buf(n + 64, kCanary);
    kernel(in.data(), buf.data(), static_cast<std::int64_t>(n));
    for (std::size_t i = n; i < buf.size(); ++i) {
      EXPECT_EQ(to_bits(buf[i]), to_bits(kCanary)) << "n=" << n << " wrote dst[" << i << "]";
    }
  }
}

TEST_P(UnaryKernelTail, InPlaceAndNegativeCount) {
  const auto [fn, isa] = GetParam();
  const UnaryKernel kernel(isa, fn);
  std::vector<float> in(100), want(100);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = tail_input(fn, i);
  kernel(in.data(), want.data(), 100);
  std::vector<float> data = in;
  kernel(data.data(), data.data(), 100);
  for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(to_bits(data[i]), to_bits(want[i]));
  kernel(in.data(), data.data(), -5);  // does nothing
  for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(to_bits(data[i]), to_bits(want[i]));
}

INSTANTIATE_TEST_SUITE_P(All, UnaryKernelTail, testing::ValuesIn(all_cases()), param_name);

// The scalar kernel agrees with the float std:: functions it wraps.
TEST(UnaryKernelScalar, MatchesStdFunctions) {
  const float xs[] = {-3.5f, -0.25f, 0.0f, 0.5f, 2.0f, 7.0f};
  for (UnaryFn fn : kAllFns) {
    const UnaryKernel kernel(Isa::Scalar, fn);
    EXPECT_EQ(kernel.code_size(), 0u);
    for (float x : xs) {
      float got = 0.0f;
      kernel(&x, &got, 1);
      const float want = static_cast<float>(reference(fn, x));
      if (fn == UnaryFn::Log && x < 0.0f) {
        EXPECT_TRUE(std::isnan(got));
      } else {
        EXPECT_LE(ulp_distance(got, want), 4) << unary_fn_name(fn) << "(" << x << ")";
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Emitter interface

TEST(VMathEmitter, ScratchNeedsCountMasksAsVectorsOnAvx2) {
  for (UnaryFn fn : kAllFns) {
    const ScratchNeeds avx512 = VMathEmitter::scratch_needs(fn, Isa::Avx512);
    const ScratchNeeds avx2 = VMathEmitter::scratch_needs(fn, Isa::Avx2);
    EXPECT_EQ(avx2.opmasks, 0);
    EXPECT_EQ(avx2.vmms, avx512.vmms + avx512.opmasks);
  }
}

TEST(VMathEmitter, RejectsTooFewScratchRegisters) {
  Xbyak::CodeGenerator gen;
  VMathEmitter vmath(gen, Isa::Avx2, gen.r8, {1});
  EXPECT_THROW(vmath.emit_log(Xbyak::Ymm(0)), InternalError);
  EXPECT_THROW(vmath.emit_exp(Xbyak::Ymm(1)), InternalError);  // argument is scratch
}

// ---------------------------------------------------------------------------
// Perf map

TEST(PerfMap, NamesKernelsWhenEnabled) {
  if (!cpu_has(Isa::Avx2)) GTEST_SKIP() << "this CPU lacks avx2 (best: " << isa_name(best_isa()) << ")";
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::remove(path.c_str());
  const UnaryKernel kernel(Isa::Avx2, UnaryFn::Tanh, /*perf_map=*/true);

  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " was not written";
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.find(kernel.name()) != std::string::npos) found = line;
  }
  std::remove(path.c_str());
  ASSERT_FALSE(found.empty()) << "no line for " << kernel.name();
  std::istringstream fields(found);
  std::string addr, size, name;
  fields >> addr >> size >> name;
  EXPECT_EQ(std::stoull(addr, nullptr, 16), reinterpret_cast<std::uintptr_t>(kernel.entry()));
  EXPECT_EQ(std::stoull(size, nullptr, 16), kernel.code_size());
  EXPECT_EQ(name, "vjit_unary_tanh_avx2");
}

// Off by default, whatever VJIT_PERF_MAP says: codegen reads no environment
// (Options::perf_map is parsed in jit/options.cpp and passed down).
TEST(PerfMap, NothingWrittenWhenDisabled) {
  if (!cpu_has(Isa::Avx2)) GTEST_SKIP() << "this CPU lacks avx2 (best: " << isa_name(best_isa()) << ")";
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::remove(path.c_str());
  setenv("VJIT_PERF_MAP", "1", 1);
  const UnaryKernel kernel(Isa::Avx2, UnaryFn::Exp);
  unsetenv("VJIT_PERF_MAP");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) EXPECT_EQ(line.find(kernel.name()), std::string::npos) << line;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace vjit::codegen
