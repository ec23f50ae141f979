#pragma once
// Vectorised float math for the x86 code generator: emitters that compute
// exp, log, tanh and sigmoid in place on one vector register (ymm for Avx2, zmm
// for Avx512), written for xbyak in the style of oneDNN's eltwise injector.
//
// A kernel generator (the unary kernel, the fused elementwise kernels) owns the
// registers. It hands a VMathEmitter the register that will hold the address of
// the constant table and a list of vector (and, for Avx512, opmask) registers
// the emitter may clobber; everything else is left untouched. Use:
//
//   VMathEmitter vmath(gen, Isa::Avx512, gen.r8, {1, 2, 3, 4, 5, 6}, {2, 3});
//   vmath.load_table_address();          // once, before the loop: lea r8, [rip + table]
//   ...  vmath.emit_exp(zmm0); ...       // inside the loop, zmm0 = exp(zmm0)
//   vmath.emit_table();                  // once, after the code (after ret)
//
// Accuracy against double-precision libm rounded to float, checked over all
// 2^32 inputs (the disabled ExhaustiveMaxUlpError test; tests/test_vmath.cpp
// re-checks 2.1e7 of them on every ISA the CPU has): exp, log <= 1 ulp;
// sigmoid <= 2 ulp; tanh <= 3 ulp (it trades two ulps for one division and no
// blend: 1.7x faster than the 1-ulp version); results in the denormal range
// <= 1 denormal ulp (2^-149). Special values are exact: NaN in gives NaN out;
// exp(-inf) = 0, exp(+inf) = +inf, exp(x > 88.7228) = +inf; log(±0) = -inf,
// log(x < 0) = NaN, log(+inf) = +inf; tanh(±inf) = ±1, tanh(±0) = ±0;
// sigmoid(-inf) = 0, sigmoid(+inf) = 1. The code assumes MXCSR's default
// round-to-nearest and leaves MXCSR alone.
//
// Denormals: results that fall in the denormal range (exp(x) for x below
// -87.34, sigmoid(x) below -87.34) are produced with one rounding, not flushed,
// and denormal inputs to log are handled exactly (scaled by 2^23 first) — as
// long as the caller runs with MXCSR's default FTZ = DAZ = 0. With FTZ set,
// denormal results become ±0; with DAZ set, denormal inputs read as 0.
#include <cstdint>
#include <vector>

#include <xbyak/xbyak.h>

#include "codegen/isa.h"
#include "codegen/vmath_constants.h"

namespace vjit::codegen {

// A vector register of the ISA's width: an Xbyak::Ymm or Xbyak::Zmm held as its
// base class Xbyak::Xmm (xbyak encodes the width from the register's kind).
using Vmm = Xbyak::Xmm;

// Vector register `idx` for `isa` (ymm for Avx2, zmm for Avx512).
Vmm make_vmm(Isa isa, int idx);

// Bytes and float lanes of one vector register.
int vector_bytes(Isa isa);
int vector_lanes(Isa isa);

// Scratch registers one emit_<fn> call clobbers, besides the register it
// computes in. On Avx2 comparisons produce vector masks, so every mask is a
// vector register there and `opmasks` is 0.
struct ScratchNeeds {
  int vmms = 0;
  int opmasks = 0;
};

class VMathEmitter {
 public:
  // `table`: a general-purpose register the emitters read constants through
  // (load_table_address() sets it; the caller must not clobber it in between).
  // `scratch_vmms`: indices of vector registers the emitters may clobber (< 16
  // on Avx2, < 32 on Avx512). `scratch_opmasks`: indices of opmask registers
  // (1..7) they may clobber; Avx512 only.
  VMathEmitter(Xbyak::CodeGenerator& gen, Isa isa, const Xbyak::Reg64& table,
               std::vector<int> scratch_vmms, std::vector<int> scratch_opmasks = {});

  // What emit(fn, ...) needs on `isa`.
  static ScratchNeeds scratch_needs(UnaryFn fn, Isa isa);

  // lea table, [rip + constant table].
  void load_table_address();

  // x = fn(x) for every lane. x must not be one of the scratch registers.
  void emit(UnaryFn fn, const Vmm& x);
  void emit_exp(const Vmm& x);
  void emit_log(const Vmm& x);
  void emit_tanh(const Vmm& x);
  void emit_sigmoid(const Vmm& x);

  // The constant table: each constant the emitters used, replicated to a full
  // vector, 64-byte aligned. Emit once, after the last instruction that runs.
  void emit_table();

 private:
  // A comparison result: an opmask register on Avx512, a vector of all-ones /
  // all-zeros lanes on Avx2.
  struct Mask {
    int idx;
  };

  Xbyak::Address table_entry(VMathConst c);
  Vmm scratch(int i, int needed) const;
  Mask mask(int i) const;
  void check_operands(UnaryFn fn, const Vmm& x) const;

  // Building blocks that hide the Avx2 / Avx512 differences.
  void load(const Vmm& dst, VMathConst c);
  void compare(Mask m, const Vmm& a, VMathConst b, int predicate);
  void blend(const Vmm& dst, Mask m, const Xbyak::Operand& src);  // dst = m ? src : dst
  void select(const Vmm& dst, Mask m, const Vmm& if_true, const Vmm& if_false);
  void round_nearest(const Vmm& dst, const Vmm& src);

  // exp with its scratch given explicitly, so sigmoid can call it on a
  // register of its own; exp_reduce and exp_series are its parts tanh shares.
  void exp_core(const Vmm& x, const Vmm& t0, const Vmm& t1);
  void exp_reduce(const Vmm& x, const Vmm& n);
  void exp_series(const Vmm& v, const Vmm& r);
  void exp_of_reduced(const Vmm& p, const Vmm& r);
  void exp_nonpositive(const Vmm& x, const Vmm& t0, const Vmm& t1);
  void scale_by_pow2_avx2(const Vmm& x, const Vmm& p, const Vmm& n);
  void pow2_of_int(const Vmm& dst, const Vmm& k, VMathConst bias);

  Xbyak::CodeGenerator& gen_;
  Isa isa_;
  Xbyak::Reg64 table_;
  std::vector<int> scratch_vmms_;
  std::vector<int> scratch_opmasks_;
  Xbyak::Label table_label_;
  std::vector<VMathConst> slots_;  // table order: first use first
  bool table_emitted_ = false;
};

}  // namespace vjit::codegen
