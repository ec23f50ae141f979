#pragma once
// The accuracy measurement of the vector math of every ISA (tests/test_vmath.cpp
// for x86, tests/test_a64_vmath.cpp for AArch64): the reference, the ulp
// metric, the test points and the special values.
//
// Accuracy metric: the distance in ulps between the kernel's float result and
// the double-precision libm result rounded to float, counted as the number of
// representable floats between them (so in the denormal range an ulp is the
// denormal spacing 2^-149: denormal results are held to the same absolute
// standard, not flushed). Both NaN counts as 0; one NaN is a failure.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/vmath_constants.h"
#include "codegen/vmath_reference.h"

namespace vjit::codegen::vmath_accuracy {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr UnaryFn kAllFns[] = {UnaryFn::Exp, UnaryFn::Log, UnaryFn::Tanh, UnaryFn::Sigmoid};

// The largest ulp error the accuracy test accepts, for every function and ISA.
constexpr std::int64_t kMaxUlp = 4;

inline float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }
inline std::uint32_t to_bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// ---------------------------------------------------------------------------
// Reference and metric

// The reference is the C library in double, rounded to float.
inline double reference(UnaryFn fn, double x) { return vjit::codegen::unary_reference(fn, x); }

using vjit::codegen::float_ordinal;

constexpr std::int64_t kNanMismatch = std::numeric_limits<std::int64_t>::max();

inline std::int64_t ulp_distance(float got, float want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) == std::isnan(want) ? 0 : kNanMismatch;
  const std::int64_t d = float_ordinal(got) - float_ordinal(want);
  return d < 0 ? -d : d;
}

// ---------------------------------------------------------------------------
// Test points, generated in chunks so neither inputs nor references are ever
// held all at once (~2.1e7 points).

// Floats a few thousand ulps either side of the places where something
// changes: overflow and underflow thresholds, branch switches, the denormal
// boundary, saturation, the clamps, 0 and 1.
inline std::vector<float> boundary_points() {
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
        const std::int64_t o = float_ordinal(centre) + k;
        if (o > float_ordinal(FLT_MAX) || o < float_ordinal(-FLT_MAX)) continue;
        points.push_back(o >= 0 ? from_bits(static_cast<std::uint32_t>(o))
                                : -from_bits(static_cast<std::uint32_t>(-o)));
      }
    }
  }
  return points;
}

inline std::vector<float> special_points() {
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
inline void for_each_chunk(const std::function<void(const std::vector<float>&)>& visit) {
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

// Special values: exact, NaN for NaN.
struct Special {
  float x;
  float want;
};

inline std::vector<Special> specials(UnaryFn fn) {
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

// Expects `kernel` (dst[i] = fn(src[i]) for i < n) to give every special
// value of `fn` exactly (a NaN for a NaN).
inline void expect_special_values_exact(UnaryFn fn,
                                        const std::function<void(const float*, float*, std::int64_t)>& kernel) {
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

// The largest ulp error of `kernel` (dst[i] = fn(src[i]) for i < n) over all
// test points, printed as a line of the ulp table ("[ vmath    ] exp avx2 max
// error ...") and recorded as test properties; expects at most kMaxUlp.
inline void expect_max_ulp_error(UnaryFn fn, const char* isa,
                                 const std::function<void(const float*, float*, std::int64_t)>& kernel) {
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
  std::printf("[ vmath    ] %-7s %-6s max error %s; denormal results: %s\n", unary_fn_name(fn), isa,
              normal.str().c_str(), denormal.str().c_str());
  testing::Test::RecordProperty("max_ulp", static_cast<int>(std::min<std::int64_t>(normal.ulp, 1 << 30)));
  testing::Test::RecordProperty("max_ulp_denormal", static_cast<int>(std::min<std::int64_t>(denormal.ulp, 1 << 30)));
  EXPECT_GE(normal.points + denormal.points, 20'000'000u);
  EXPECT_LE(normal.ulp, kMaxUlp) << normal.str();
  EXPECT_LE(denormal.ulp, kMaxUlp) << denormal.str();
}

}  // namespace vjit::codegen::vmath_accuracy
