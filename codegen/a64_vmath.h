#pragma once
// Vectorised float math for the AArch64 code generator: emitters that compute
// exp, log, tanh and sigmoid in place on one Advanced SIMD register (4 floats),
// written for asmjit's a64 assembler. The algorithms and constants are those
// of the x86 emitters (x86_vmath.h, vmath_constants.h): the same range
// reduction, polynomials, fused multiply-adds and special-value fixes, in the
// same order, with AVX2's forms where AVX-512 has an instruction of its own
// (2^n built in the exponent field in two steps, comparisons into vector
// masks). IEEE operations and FMAs round alike on both architectures, so the
// results equal the AVX2 kernels' bit for bit except for the payload of a NaN
// (Advanced SIMD min/max return the NaN operand quieted, not their second
// operand) and hence share their accuracy: exp, log <= 1 ulp; sigmoid <= 2 ulp;
// tanh <= 3 ulp; special values exact (x86_vmath.h lists them). Denormals are
// produced and read exactly with FPCR's default FZ = 0, as Linux starts every
// thread.
//
// A kernel generator owns the registers. It hands the emitter a general-purpose
// register for the constant table's address and the vector registers it may
// clobber:
//
//   A64VMathEmitter vmath(assembler, x4, {25, 26, 27, 28, 29, 30, 31});
//   vmath.load_table_address();   // once, before the loop: adr x4, table
//   ... vmath.emit(UnaryFn::Exp, 0) ...   // v0 = exp(v0), in the loop
//   vmath.emit_table();           // once, after the code (after ret)
#include <vector>

#include <asmjit/arm/a64assembler.h>

#include "codegen/vmath_constants.h"

namespace vjit::codegen {

class A64VMathEmitter {
 public:
  // `scratch` lists vector register indices (0..31) the emitters may clobber.
  A64VMathEmitter(asmjit::a64::Assembler& a, const asmjit::a64::GpX& table, std::vector<int> scratch);

  // Vector registers one emit(fn, ...) clobbers besides its argument: the
  // values of the x86 emitters, one register per comparison mask, and one for
  // the constant an instruction reads (Advanced SIMD has no memory operands).
  static int scratch_needs(UnaryFn fn);

  // adr table, <constant table>.
  void load_table_address();

  // v<x> = fn(v<x>) for every lane; x must not be a scratch register.
  void emit(UnaryFn fn, int x);

  // The constants used, each replicated to 16 bytes, 16-byte aligned. Emit
  // once, after the last instruction that runs.
  void emit_table();

 private:
  using Vec = asmjit::a64::VecV;

  Vec scratch(int i) const;
  // The register holding the constant instructions read: the last scratch one.
  Vec constant_register() const;
  // The constant register loaded with c; returned.
  Vec load_constant(VMathConst c);
  void load(const Vec& dst, VMathConst c);
  // dst = dst * r + c (x86's vfmadd213ps with a memory constant), one rounding.
  void multiply_add_constant(const Vec& dst, const Vec& r, VMathConst c);

  void exp_core(const Vec& x, const Vec& t0, const Vec& t1);
  void exp_reduce(const Vec& x, const Vec& n);
  void exp_series(const Vec& v, const Vec& r);
  void exp_of_reduced(const Vec& p, const Vec& r);
  void exp_nonpositive(const Vec& x, const Vec& t0, const Vec& t1);
  void scale_by_pow2(const Vec& x, const Vec& p, const Vec& n);
  void pow2_of_int(const Vec& dst, const Vec& k, VMathConst bias);

  void emit_exp(const Vec& x);
  void emit_log(const Vec& x);
  void emit_tanh(const Vec& x);
  void emit_sigmoid(const Vec& x);

  asmjit::a64::Assembler& a_;
  asmjit::a64::GpX table_;
  std::vector<int> scratch_;
  asmjit::Label table_label_;
  std::vector<VMathConst> slots_;  // table order: first use first
  bool table_emitted_ = false;
};

}  // namespace vjit::codegen
