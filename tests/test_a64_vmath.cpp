// Tests of the AArch64 vector math (codegen/a64_vmath.h) through the fused
// kernels that carry it: the ulp error of exp / log / tanh / sigmoid against
// double-precision libm over the test points of the x86 test
// (tests/vmath_accuracy.h), and the special values; and the array kernel of
// one function (codegen/a64_unary_kernel.h, the softmax's exp) against them. Built on AArch64 only; on
// an x86 host it runs under qemu-aarch64 (ctest label `aarch64`).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/a64_unary_kernel.h"
#include "codegen/isa.h"
#include "codegen/jit_kernels.h"
#include "codegen/kernel_spec.h"
#include "tests/guarded_pages.h"
#include "tests/vmath_accuracy.h"
#include "vjit/error.h"

namespace vjit::codegen {
namespace {

using namespace vmath_accuracy;

TEST(Isa, NeonIsTheBestIsaOfAnAArch64Cpu) {
  EXPECT_TRUE(cpu_has(Isa::Neon));
  EXPECT_FALSE(cpu_has(Isa::Avx2));
  EXPECT_FALSE(cpu_has(Isa::Avx512));
  EXPECT_EQ(best_isa(), Isa::Neon);
  EXPECT_EQ(parse_isa("auto"), Isa::Neon);
  EXPECT_EQ(parse_isa("NEON"), Isa::Neon);
  EXPECT_THROW(require_isa(Isa::Avx2), UserError);
}

ir::Op op_of(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Exp: return ir::Op::Exp;
    case UnaryFn::Log: return ir::Op::Log;
    case UnaryFn::Tanh: return ir::Op::Tanh;
    case UnaryFn::Sigmoid: return ir::Op::Sigmoid;
  }
  return ir::Op::Neg;
}

// dst[i] = fn(src[i]) for i < n: a fused kernel of the one op over one row n
// wide (compiled once per width).
class ArrayFunction {
 public:
  explicit ArrayFunction(UnaryFn fn) : fn_(fn) {}

  void operator()(const float* src, float* dst, int64_t n) {
    std::shared_ptr<const FusedKernel>& kernel = kernels_[n];
    if (!kernel) {
      KernelSpec spec;
      spec.width = n;
      spec.inputs = {{false}};
      spec.instrs = {{op_of(fn_), 0, -1, 0.0f}};
      spec.outputs = {0};
      kernel = compile_fused_kernel(spec, Isa::Neon);
    }
    const float* inputs[] = {src};
    float* outputs[] = {dst};
    const int64_t ld[] = {n};
    ir::KernelArgs args;
    args.rows = 1;
    args.inputs = inputs;
    args.input_ld = ld;
    args.outputs = outputs;
    args.output_ld = ld;
    kernel->function()(&args);
  }

 private:
  UnaryFn fn_;
  std::map<int64_t, std::shared_ptr<const FusedKernel>> kernels_;
};

class A64VMath : public testing::TestWithParam<UnaryFn> {};

std::string fn_param_name(const testing::TestParamInfo<UnaryFn>& info) { return unary_fn_name(info.param); }

// The ulp table of the AArch64 vector math, "[ vmath    ] <fn> neon max error
// ..." lines; the bound is the x86 emitters' (<= 4 ulp accepted).
TEST_P(A64VMath, MaxUlpErrorOverTheFloatLine) {
  ArrayFunction kernel(GetParam());
  expect_max_ulp_error(GetParam(), "neon", std::ref(kernel));
}

TEST_P(A64VMath, SpecialValuesAreExact) {
  ArrayFunction kernel(GetParam());
  expect_special_values_exact(GetParam(), std::ref(kernel));
}

// The array kernel equals the fused kernel of the one op bit for bit (so the
// ulp table above holds for it), for every count of tail lanes, and reads and
// writes nothing past n: source and destination end at a PROT_NONE page.
TEST_P(A64VMath, ArrayKernelEqualsTheFusedKernelAndStaysInsideN) {
  const UnaryFn fn = GetParam();
  const A64UnaryKernel kernel(fn);
  EXPECT_GT(kernel.code_size(), 0u);
  ArrayFunction fused(fn);
  std::vector<float> points = special_points();
  for (int i = 0; i < 64; ++i) points.push_back(-20.0f + 0.6571f * float(i));
  test_util::GuardedPages src_pages, dst_pages;
  constexpr float kCanary = -12345.0f;
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(7), size_t(8),
                   size_t(9), points.size()}) {
    std::vector<float> want(n);
    if (n > 0) fused(points.data(), want.data(), int64_t(n));
    float* src = src_pages.array_at_end(n);
    float* dst = dst_pages.array_at_end(n);
    std::copy(points.begin(), points.begin() + std::ptrdiff_t(n), src);
    std::fill(dst, dst + n, kCanary);
    kernel(src, dst, int64_t(n));
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(to_bits(dst[i]), to_bits(want[i])) << unary_fn_name(fn) << "(" << src[i] << "), n=" << n << " i=" << i;
    // In place.
    kernel(src, src, int64_t(n));
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(to_bits(src[i]), to_bits(want[i])) << "in place, n=" << n << " i=" << i;
  }
  // A count below zero does nothing.
  std::vector<float> untouched(8, kCanary);
  kernel(points.data(), untouched.data(), -3);
  for (float v : untouched) EXPECT_EQ(to_bits(v), to_bits(kCanary));
}

INSTANTIATE_TEST_SUITE_P(Neon, A64VMath, testing::ValuesIn(kAllFns), fn_param_name);

// The softmax's exp (compile_exp_kernel, which the engine's plan holds) is
// the array kernel on Neon, and absent only for the reference kernels.
TEST(A64ExpKernel, CompiledForNeonOnly) {
  ArrayKernel exp = compile_exp_kernel(Isa::Neon, false);
  ASSERT_NE(exp.entry, nullptr);
  const A64UnaryKernel reference(UnaryFn::Exp);
  const float x[] = {-3.0f, -0.5f, 0.0f, 0.25f, 1.0f, 10.0f};
  float got[6], want[6];
  exp.entry(x, got, 6);
  reference(x, want, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(to_bits(got[i]), to_bits(want[i])) << "exp(" << x[i] << ")";
  EXPECT_EQ(compile_exp_kernel(Isa::Scalar, false).entry, nullptr);
}

}  // namespace
}  // namespace vjit::codegen
