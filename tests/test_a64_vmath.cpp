// Tests of the AArch64 vector math (codegen/a64_vmath.h) through the fused
// kernels that carry it: the ulp error of exp / log / tanh / sigmoid against
// double-precision libm over the test points of the x86 test
// (tests/vmath_accuracy.h), and the special values. Built on AArch64 only; on
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

#include "codegen/isa.h"
#include "codegen/jit_kernels.h"
#include "codegen/kernel_spec.h"
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

INSTANTIATE_TEST_SUITE_P(Neon, A64VMath, testing::ValuesIn(kAllFns), fn_param_name);

}  // namespace
}  // namespace vjit::codegen
