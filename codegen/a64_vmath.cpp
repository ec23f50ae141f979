#include "codegen/a64_vmath.h"

#include <algorithm>

#include "vjit/error.h"

namespace vjit::codegen {

namespace {

namespace a64 = asmjit::a64;

// Arrangements: 4 floats or 4 int32 (arithmetic), 16 bytes (bitwise ops).
a64::VecV s4(const a64::VecV& v) { return v.s4(); }
a64::VecV b16(const a64::VecV& v) { return v.b16(); }

}  // namespace

A64VMathEmitter::A64VMathEmitter(a64::Assembler& a, const a64::GpX& table, std::vector<int> scratch)
    : a_(a), table_(table), scratch_(std::move(scratch)), table_label_(a.newLabel()) {
  for (int idx : scratch_)
    VJIT_INTERNAL_CHECK(idx >= 0 && idx < 32, "A64VMathEmitter: scratch vector register v" << idx << " does not exist");
}

// The x86 emitters' values and masks (masks are vector registers here), and
// the constant register.
int A64VMathEmitter::scratch_needs(UnaryFn fn) {
  const VMathScratch needs = vmath_scratch(fn);
  return needs.values + needs.masks + 1;
}

A64VMathEmitter::Vec A64VMathEmitter::scratch(int i) const {
  VJIT_INTERNAL_CHECK(i >= 0 && i < static_cast<int>(scratch_.size()) - 1,
                      "A64VMathEmitter: scratch vector register " << i << " not provided");
  return Vec(static_cast<uint32_t>(scratch_[static_cast<size_t>(i)]));
}

A64VMathEmitter::Vec A64VMathEmitter::constant_register() const {
  VJIT_INTERNAL_CHECK(!scratch_.empty(), "A64VMathEmitter: no scratch registers");
  return Vec(static_cast<uint32_t>(scratch_.back()));
}

A64VMathEmitter::Vec A64VMathEmitter::load_constant(VMathConst c) {
  const Vec reg = constant_register();
  load(reg, c);
  return reg;
}

void A64VMathEmitter::load(const Vec& dst, VMathConst c) {
  auto it = std::find(slots_.begin(), slots_.end(), c);
  if (it == slots_.end()) it = slots_.insert(slots_.end(), c);
  a_.ldr(dst.q(), a64::ptr(table_, static_cast<int32_t>(it - slots_.begin()) * 16));
}

void A64VMathEmitter::multiply_add_constant(const Vec& dst, const Vec& r, VMathConst c) {
  const Vec k = load_constant(c);
  a_.fmla(s4(k), s4(dst), s4(r));  // k = c + dst * r
  a_.mov(b16(dst), b16(k));
}

void A64VMathEmitter::load_table_address() { a_.adr(table_, table_label_); }

void A64VMathEmitter::emit_table() {
  VJIT_INTERNAL_CHECK(!table_emitted_, "A64VMathEmitter: constant table emitted twice");
  table_emitted_ = true;
  a_.align(asmjit::AlignMode::kData, 16);
  a_.bind(table_label_);
  for (VMathConst c : slots_) a_.embedUInt32(vmath_constant_bits(c), 4);
}

void A64VMathEmitter::emit(UnaryFn fn, int x) {
  VJIT_INTERNAL_CHECK(static_cast<int>(scratch_.size()) >= scratch_needs(fn),
                      "A64VMathEmitter: " << unary_fn_name(fn) << " needs " << scratch_needs(fn)
                                          << " scratch vector registers, " << scratch_.size() << " given");
  VJIT_INTERNAL_CHECK(std::find(scratch_.begin(), scratch_.end(), x) == scratch_.end(),
                      "A64VMathEmitter: argument v" << x << " is a scratch register");
  VJIT_INTERNAL_CHECK(!table_emitted_, "A64VMathEmitter: code emitted after the constant table");
  const Vec v(static_cast<uint32_t>(x));
  switch (fn) {
    case UnaryFn::Exp: emit_exp(v); return;
    case UnaryFn::Log: emit_log(v); return;
    case UnaryFn::Tanh: emit_tanh(v); return;
    case UnaryFn::Sigmoid: emit_sigmoid(v); return;
  }
}

// exp(x) = 2^n exp(r), as x86_vmath.cpp's exp_core on AVX2: x clamped to
// [-104, 89] (NaN stays NaN: fmin and fmax return it), n = round(x log2 e),
// r = x - n ln 2 in two FMAs, exp(r) by the minimax polynomial, 2^n applied in
// two exact halves so that the one rounding comes last.
// Registers: x = argument and result; t0 = n; t1 = polynomial.
void A64VMathEmitter::exp_core(const Vec& x, const Vec& t0, const Vec& t1) {
  a_.fmin(s4(x), s4(load_constant(VMathConst::ExpMaxArg)), s4(x));
  a_.fmax(s4(x), s4(load_constant(VMathConst::ExpMinArg)), s4(x));
  exp_reduce(x, t0);
  exp_of_reduced(t1, x);
  scale_by_pow2(x, t1, t0);
}

// n = round(x log2 e) (ties to even, as vroundps); x becomes r = x - n Ln2Hi - n Ln2Lo.
void A64VMathEmitter::exp_reduce(const Vec& x, const Vec& n) {
  a_.fmul(s4(n), s4(x), s4(load_constant(VMathConst::Log2e)));
  a_.frintn(s4(n), s4(n));
  a_.fmls(s4(x), s4(n), s4(load_constant(VMathConst::Ln2Hi)));  // x - n Ln2Hi, fused
  a_.fmls(s4(x), s4(n), s4(load_constant(VMathConst::Ln2Lo)));  // r
}

// v = c2 + c3 r + ... + c6 r^4 by Horner; r is left as it is.
void A64VMathEmitter::exp_series(const Vec& v, const Vec& r) {
  load(v, VMathConst::ExpC6);
  multiply_add_constant(v, r, VMathConst::ExpC5);
  multiply_add_constant(v, r, VMathConst::ExpC4);
  multiply_add_constant(v, r, VMathConst::ExpC3);
  multiply_add_constant(v, r, VMathConst::ExpC2);
}

// p = exp(r) = 1 + r (1 + r v); r is left as it is.
void A64VMathEmitter::exp_of_reduced(const Vec& p, const Vec& r) {
  exp_series(p, r);
  multiply_add_constant(p, r, VMathConst::One);
  multiply_add_constant(p, r, VMathConst::One);
}

// dst = the float 2^(k + bias - 127) for integer lanes k, built in the exponent field.
void A64VMathEmitter::pow2_of_int(const Vec& dst, const Vec& k, VMathConst bias) {
  a_.add(s4(dst), s4(k), s4(load_constant(bias)));
  a_.shl(s4(dst), s4(dst), 23);
}

// x = p 2^n for n (a float holding an integer in [-150, 128]) as 2^n1 2^n2,
// n1 = n >> 1, n2 = n - n1: both normal, the product p 2^n1 exact; clobbers p, n.
void A64VMathEmitter::scale_by_pow2(const Vec& x, const Vec& p, const Vec& n) {
  a_.fcvtzs(s4(n), s4(n));  // exact: n is an integer
  a_.sshr(s4(x), s4(n), 1);
  a_.sub(s4(n), s4(n), s4(x));
  pow2_of_int(x, x, VMathConst::ExpBias);
  pow2_of_int(n, n, VMathConst::ExpBias);
  a_.fmul(s4(p), s4(p), s4(x));
  a_.fmul(s4(x), s4(p), s4(n));
}

void A64VMathEmitter::emit_exp(const Vec& x) { exp_core(x, scratch(0), scratch(1)); }

// log(x) = k ln 2 + log(m), as x86_vmath.cpp's emit_log on AVX2: denormals
// scaled by 2^23 first, k and m split on the bits, FreeBSD's log(m), the
// special inputs fixed from the saved input at the end.
// Registers: t0 = the input; t1 = k; t2 = s; t3 = z, then hfsq; t4 = R and the
// sum; m0 = denormal lanes, then the special-case lanes.
void A64VMathEmitter::emit_log(const Vec& x) {
  const Vec t0 = scratch(0), t1 = scratch(1), t2 = scratch(2), t3 = scratch(3), t4 = scratch(4), m0 = scratch(5);

  a_.mov(b16(t0), b16(x));
  a_.fcmgt(s4(m0), s4(load_constant(VMathConst::FltMin)), s4(x));  // x < FLT_MIN (false for NaN)
  a_.fmul(s4(t1), s4(x), s4(load_constant(VMathConst::TwoP23)));
  a_.bit(b16(x), b16(t1), b16(m0));

  a_.sub(s4(t1), s4(x), s4(load_constant(VMathConst::SqrtHalfBits)));
  a_.sshr(s4(t1), s4(t1), 23);  // k
  a_.shl(s4(t2), s4(t1), 23);
  a_.sub(s4(x), s4(x), s4(t2));  // m = x / 2^k
  a_.scvtf(s4(t1), s4(t1));
  a_.and_(b16(m0), b16(m0), b16(load_constant(VMathConst::TwentyThree)));  // 23 in denormal lanes
  a_.fsub(s4(t1), s4(t1), s4(m0));

  a_.fsub(s4(x), s4(x), s4(load_constant(VMathConst::One)));  // f
  a_.fadd(s4(t2), s4(x), s4(load_constant(VMathConst::Two)));
  a_.fdiv(s4(t2), s4(x), s4(t2));  // s
  a_.fmul(s4(t3), s4(t2), s4(t2));  // z
  load(t4, VMathConst::LogLg4);
  multiply_add_constant(t4, t3, VMathConst::LogLg3);
  multiply_add_constant(t4, t3, VMathConst::LogLg2);
  multiply_add_constant(t4, t3, VMathConst::LogLg1);
  a_.fmul(s4(t4), s4(t4), s4(t3));  // R
  a_.fmul(s4(t3), s4(x), s4(x));
  a_.fmul(s4(t3), s4(t3), s4(load_constant(VMathConst::Half)));  // hfsq
  a_.fadd(s4(t4), s4(t4), s4(t3));
  a_.fmul(s4(t4), s4(t4), s4(t2));                                 // s (hfsq + R)
  a_.fmla(s4(t4), s4(t1), s4(load_constant(VMathConst::Ln2Lo)));  // + k Ln2Lo
  a_.fsub(s4(t4), s4(t4), s4(t3));                                 // - hfsq
  a_.fadd(s4(x), s4(x), s4(t4));                                   // + f
  a_.fmla(s4(x), s4(t1), s4(load_constant(VMathConst::Ln2Hi)));   // + k Ln2Hi

  a_.fcmge(s4(m0), s4(t0), s4(load_constant(VMathConst::Zero)));  // x >= 0 (false for NaN)
  a_.orr(b16(t1), b16(t0), b16(load_constant(VMathConst::QuietNan)));
  a_.bif(b16(x), b16(t1), b16(m0));  // x < 0 or NaN: NaN
  a_.fcmeq(s4(m0), s4(t0), s4(load_constant(VMathConst::Zero)));
  a_.bit(b16(x), b16(load_constant(VMathConst::NegInf)), b16(m0));  // ±0: -inf
  a_.fcmeq(s4(m0), s4(t0), s4(load_constant(VMathConst::PosInf)));
  a_.bit(b16(x), b16(t0), b16(m0));  // +inf
}

// tanh(x) = sign(x) tanh(a), a = min(|x|, 9.5), as x86_vmath.cpp's emit_tanh:
// y = 2a reduced as in exp, q = expm1(r), s = 2^n, tanh(a) = (s q + (s - 1)) /
// (s q + (s + 1)).
// Registers: t0 = a, then y and r, then q; t1 = n, then s; t2 = v, then the
// denominator; t3 = the numerator.
void A64VMathEmitter::emit_tanh(const Vec& x) {
  const Vec t0 = scratch(0), t1 = scratch(1), t2 = scratch(2), t3 = scratch(3);

  a_.and_(b16(t0), b16(x), b16(load_constant(VMathConst::AbsMask)));
  a_.fmin(s4(t0), s4(load_constant(VMathConst::TanhMaxArg)), s4(t0));  // a
  a_.fadd(s4(t0), s4(t0), s4(t0));                                      // y = 2a
  exp_reduce(t0, t1);
  exp_series(t2, t0);
  a_.fmul(s4(t2), s4(t2), s4(t0));
  a_.fmla(s4(t0), s4(t2), s4(t0));  // q = r + (r v) r, one rounding

  a_.fcvtzs(s4(t1), s4(t1));
  pow2_of_int(t1, t1, VMathConst::ExpBias);  // s = 2^n, n in [0, 28]
  const Vec one = load_constant(VMathConst::One);
  a_.fsub(s4(t3), s4(t1), s4(one));
  a_.fadd(s4(t2), s4(t1), s4(one));
  a_.fmla(s4(t3), s4(t1), s4(t0));  // exp(y) - 1
  a_.fmla(s4(t2), s4(t1), s4(t0));  // exp(y) + 1
  a_.fdiv(s4(t0), s4(t3), s4(t2));  // tanh(a)

  a_.and_(b16(x), b16(x), b16(load_constant(VMathConst::SignMask)));
  a_.orr(b16(x), b16(x), b16(t0));
}

// exp(x) for x <= 0 or NaN (sigmoid's -|x|), as x86_vmath.cpp's
// exp_nonpositive on AVX2: 2^n as 2^(n + 64) 2^-64, one rounding last.
// Registers: x = argument and result; t0 = n; t1 = polynomial.
void A64VMathEmitter::exp_nonpositive(const Vec& x, const Vec& t0, const Vec& t1) {
  a_.fmax(s4(x), s4(load_constant(VMathConst::ExpMinArg)), s4(x));
  exp_reduce(x, t0);
  exp_of_reduced(t1, x);
  a_.fcvtzs(s4(t0), s4(t0));
  pow2_of_int(t0, t0, VMathConst::ExpBiasPlus64);  // 2^(n + 64)
  a_.fmul(s4(t1), s4(t1), s4(t0));
  a_.fmul(s4(x), s4(t1), s4(load_constant(VMathConst::TwoM64)));
}

// sigmoid(x) = 1 / (1 + z) for x >= 0 and z / (1 + z) for x < 0, z = exp(-|x|).
// Registers: t0 = -|x|, then z; t1 = 1 + z; t2 = the numerator; m0 = x < 0.
void A64VMathEmitter::emit_sigmoid(const Vec& x) {
  const Vec t0 = scratch(0), t1 = scratch(1), t2 = scratch(2), m0 = scratch(3);

  a_.orr(b16(t0), b16(x), b16(load_constant(VMathConst::SignMask)));  // -|x|
  exp_nonpositive(t0, t1, t2);                                         // z
  a_.fadd(s4(t1), s4(t0), s4(load_constant(VMathConst::One)));
  a_.fcmgt(s4(m0), s4(load_constant(VMathConst::Zero)), s4(x));  // x < 0
  load(t2, VMathConst::One);
  a_.bit(b16(t2), b16(t0), b16(m0));
  a_.fdiv(s4(x), s4(t2), s4(t1));
}

}  // namespace vjit::codegen
