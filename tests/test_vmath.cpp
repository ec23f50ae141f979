// Tests of the x86 vector math: ISA detection and parsing, the accuracy of the
// exp / log / tanh / sigmoid emitters against double-precision libm, their
// special values, the masked tails of the unary kernel, and the perf map.
//
// The accuracy metric and the test points: tests/vmath_accuracy.h.
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

#include "codegen/isa.h"
#include "codegen/x86_unary_kernel.h"
#include "codegen/x86_vmath.h"
#include "vjit/error.h"
#include "tests/guarded_pages.h"
#include "tests/vmath_accuracy.h"

namespace vjit::codegen {
namespace {

using namespace vmath_accuracy;

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

TEST_P(VMathAccuracy, MaxUlpErrorOverTheFloatLine) {
  const UnaryKernel kernel(GetParam().isa, GetParam().fn);
  expect_max_ulp_error(GetParam().fn, isa_name(GetParam().isa), kernel.entry());
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

TEST_P(VMathAccuracy, SpecialValuesAreExact) {
  const auto [fn, isa] = GetParam();
  const UnaryKernel kernel(isa, fn);
  expect_special_values_exact(fn, kernel.entry());
}

INSTANTIATE_TEST_SUITE_P(Vector, VMathAccuracy, testing::ValuesIn(vector_cases()), param_name);

// ---------------------------------------------------------------------------
// Tails: masked loads and stores stay inside [0, n)

using test_util::GuardedPages;

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
