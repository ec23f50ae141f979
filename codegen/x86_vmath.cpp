#include "codegen/x86_vmath.h"

#include <algorithm>

#include "vjit/error.h"

namespace vjit::codegen {

namespace {

// vcmpps predicates (AVX encoding). O = ordered: false when either side is
// NaN; U = unordered: true when either side is NaN. Q = quiet (no signal).
constexpr int kCmpEqOq = 0x00;   // a == b
constexpr int kCmpLtOq = 0x11;   // a < b
constexpr int kCmpNgeUq = 0x19;  // !(a >= b): a < b or NaN

// vrndscaleps / vroundps immediate: round to nearest even, suppress the
// precision exception.
constexpr int kRoundNearest = 0x08;


}  // namespace

Vmm make_vmm(Isa isa, int idx) {
  VJIT_INTERNAL_CHECK(isa != Isa::Scalar, "no vector registers for the scalar ISA");
  if (isa == Isa::Avx512) return Xbyak::Zmm(idx);
  return Xbyak::Ymm(idx);
}

int vector_bytes(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return 4;
    case Isa::Avx2: return 32;
    case Isa::Avx512: return 64;
    case Isa::Neon: break;  // not an x86 ISA
  }
  return 4;
}

int vector_lanes(Isa isa) { return vector_bytes(isa) / 4; }

VMathEmitter::VMathEmitter(Xbyak::CodeGenerator& gen, Isa isa, const Xbyak::Reg64& table,
                           std::vector<int> scratch_vmms, std::vector<int> scratch_opmasks)
    : gen_(gen),
      isa_(isa),
      table_(table),
      scratch_vmms_(std::move(scratch_vmms)),
      scratch_opmasks_(std::move(scratch_opmasks)) {
  VJIT_INTERNAL_CHECK(isa != Isa::Scalar, "VMathEmitter needs a vector ISA");
  const int num_vmms = isa == Isa::Avx512 ? 32 : 16;
  for (int idx : scratch_vmms_) {
    VJIT_INTERNAL_CHECK(idx >= 0 && idx < num_vmms,
                        "scratch vector register " << idx << " does not exist on " << isa_name(isa));
  }
  for (int idx : scratch_opmasks_) {
    VJIT_INTERNAL_CHECK(isa == Isa::Avx512 && idx >= 1 && idx <= 7,
                        "scratch opmask k" << idx << " is not usable on " << isa_name(isa));
  }
}

ScratchNeeds VMathEmitter::scratch_needs(UnaryFn fn, Isa isa) {
  const VMathScratch needs = vmath_scratch(fn);
  if (isa == Isa::Avx512) return {needs.values, needs.masks};
  return {needs.values + needs.masks, 0};
}

// ---------------------------------------------------------------------------
// Registers and constants

Vmm VMathEmitter::scratch(int i, int needed) const {
  VJIT_INTERNAL_CHECK(i < needed && i < static_cast<int>(scratch_vmms_.size()),
                      "VMathEmitter: scratch vector register " << i << " not provided");
  return make_vmm(isa_, scratch_vmms_[static_cast<std::size_t>(i)]);
}

// Masks come from the opmask list on Avx512 and from the end of the vector
// list on Avx2, so they never overlap the value scratch registers.
VMathEmitter::Mask VMathEmitter::mask(int i) const {
  if (isa_ == Isa::Avx512) return {scratch_opmasks_.at(static_cast<std::size_t>(i))};
  return {scratch_vmms_.at(scratch_vmms_.size() - 1 - static_cast<std::size_t>(i))};
}

void VMathEmitter::check_operands(UnaryFn fn, const Vmm& x) const {
  const ScratchNeeds needs = scratch_needs(fn, isa_);
  VJIT_INTERNAL_CHECK(static_cast<int>(scratch_vmms_.size()) >= needs.vmms &&
                          static_cast<int>(scratch_opmasks_.size()) >= needs.opmasks,
                      "VMathEmitter: " << unary_fn_name(fn) << " on " << isa_name(isa_) << " needs "
                                       << needs.vmms << " scratch vector and " << needs.opmasks
                                       << " opmask registers");
  VJIT_INTERNAL_CHECK(isa_ == Isa::Avx512 ? x.isZMM() : x.isYMM(),
                      "VMathEmitter: " << x.toString() << " is not a " << isa_name(isa_)
                                       << " register");
  const bool clash = std::find(scratch_vmms_.begin(), scratch_vmms_.end(), x.getIdx()) !=
                     scratch_vmms_.end();
  VJIT_INTERNAL_CHECK(!clash, "VMathEmitter: argument " << x.toString() << " is a scratch register");
  VJIT_INTERNAL_CHECK(!table_emitted_, "VMathEmitter: code emitted after the constant table");
}

Xbyak::Address VMathEmitter::table_entry(VMathConst c) {
  auto it = std::find(slots_.begin(), slots_.end(), c);
  if (it == slots_.end()) it = slots_.insert(slots_.end(), c);
  const int offset = static_cast<int>(it - slots_.begin()) * vector_bytes(isa_);
  return gen_.ptr[table_ + offset];
}

void VMathEmitter::load_table_address() { gen_.lea(table_, gen_.ptr[gen_.rip + table_label_]); }

void VMathEmitter::emit_table() {
  VJIT_INTERNAL_CHECK(!table_emitted_, "VMathEmitter: constant table emitted twice");
  table_emitted_ = true;
  gen_.align(64);
  gen_.L(table_label_);
  for (VMathConst c : slots_) {
    for (int lane = 0; lane < vector_lanes(isa_); ++lane) {
      gen_.dd(vmath_constant_bits(c));
    }
  }
}

// ---------------------------------------------------------------------------
// Building blocks over Avx2 / Avx512

void VMathEmitter::load(const Vmm& dst, VMathConst c) { gen_.vmovaps(dst, table_entry(c)); }

void VMathEmitter::compare(Mask m, const Vmm& a, VMathConst b, int predicate) {
  if (isa_ == Isa::Avx512) {
    gen_.vcmpps(Xbyak::Opmask(m.idx), a, table_entry(b), static_cast<std::uint8_t>(predicate));
  } else {
    gen_.vcmpps(make_vmm(isa_, m.idx), a, table_entry(b), static_cast<std::uint8_t>(predicate));
  }
}

void VMathEmitter::blend(const Vmm& dst, Mask m, const Xbyak::Operand& src) {
  if (isa_ == Isa::Avx512) {
    gen_.vblendmps(dst | Xbyak::Opmask(m.idx), dst, src);
  } else {
    gen_.vblendvps(dst, dst, src, make_vmm(isa_, m.idx));
  }
}

void VMathEmitter::select(const Vmm& dst, Mask m, const Vmm& if_true, const Vmm& if_false) {
  if (isa_ == Isa::Avx512) {
    gen_.vblendmps(dst | Xbyak::Opmask(m.idx), if_false, if_true);
  } else {
    gen_.vblendvps(dst, if_false, if_true, make_vmm(isa_, m.idx));
  }
}

void VMathEmitter::round_nearest(const Vmm& dst, const Vmm& src) {
  if (isa_ == Isa::Avx512) {
    gen_.vrndscaleps(dst, src, kRoundNearest);
  } else {
    gen_.vroundps(dst, src, kRoundNearest);
  }
}

// ---------------------------------------------------------------------------
// The functions

void VMathEmitter::emit(UnaryFn fn, const Vmm& x) {
  switch (fn) {
    case UnaryFn::Exp: emit_exp(x); return;
    case UnaryFn::Log: emit_log(x); return;
    case UnaryFn::Tanh: emit_tanh(x); return;
    case UnaryFn::Sigmoid: emit_sigmoid(x); return;
  }
}

// exp(x) = 2^n * exp(r), n = round(x * log2(e)), r = x - n * ln 2.
//   - x is first clamped to [-104, 89] (NaN passes through: vminps/vmaxps return
//     their second operand when either is NaN, and x is the second). Past 89
//     exp overflows to +inf, below -104 it underflows to 0, so the clamp
//     changes no result but keeps n small enough for the reduction and scaling.
//   - exp_reduce, exp_series: exp(r) = 1 + r + r^2 v (below).
//   - 2^n: vscalefps on Avx512 (exact, rounds once into the denormal range,
//     gives +inf on overflow). On Avx2, 2^n is built in the exponent field as
//     2^n1 * 2^n2 with n1 = n >> 1, n2 = n - n1, so both factors are normal
//     floats for n in [-150, 128] and the one rounding happens last.
// Registers: x = argument and result; t0 = n; t1 = polynomial.
void VMathEmitter::exp_core(const Vmm& x, const Vmm& t0, const Vmm& t1) {
  auto& g = gen_;
  load(t0, VMathConst::ExpMaxArg);
  g.vminps(x, t0, x);
  load(t0, VMathConst::ExpMinArg);
  g.vmaxps(x, t0, x);

  exp_reduce(x, t0);
  exp_of_reduced(t1, x);

  if (isa_ == Isa::Avx512) {
    g.vscalefps(x, t1, t0);  // exp(r) * 2^n
  } else {
    scale_by_pow2_avx2(x, t1, t0);
  }
}

// n = round(x * log2(e)) into `n`; x becomes r = x - n*Ln2Hi - n*Ln2Lo.
// x - n*Ln2Hi is exact (FMA, and x and n*Ln2Hi agree in their top bits);
// subtracting n*Ln2Lo supplies the rest of ln 2. |r| <= ln2/2.
void VMathEmitter::exp_reduce(const Vmm& x, const Vmm& n) {
  auto& g = gen_;
  g.vmulps(n, x, table_entry(VMathConst::Log2e));
  round_nearest(n, n);
  g.vfnmadd231ps(x, n, table_entry(VMathConst::Ln2Hi));  // x - n*Ln2Hi
  g.vfnmadd231ps(x, n, table_entry(VMathConst::Ln2Lo));  // r
}

// v = c2 + c3 r + ... + c6 r^4, the minimax exp(r) = 1 + r + r^2 v on
// |r| <= ln2/2 (relative error 2.6e-9), by Horner; r is left as it is.
void VMathEmitter::exp_series(const Vmm& v, const Vmm& r) {
  auto& g = gen_;
  load(v, VMathConst::ExpC6);  // v = v*r + c
  g.vfmadd213ps(v, r, table_entry(VMathConst::ExpC5));
  g.vfmadd213ps(v, r, table_entry(VMathConst::ExpC4));
  g.vfmadd213ps(v, r, table_entry(VMathConst::ExpC3));
  g.vfmadd213ps(v, r, table_entry(VMathConst::ExpC2));
}

// p = exp(r) = 1 + r (1 + r v) for a reduced r (exp_reduce); r is left as it is.
void VMathEmitter::exp_of_reduced(const Vmm& p, const Vmm& r) {
  exp_series(p, r);
  gen_.vfmadd213ps(p, r, table_entry(VMathConst::One));
  gen_.vfmadd213ps(p, r, table_entry(VMathConst::One));
}

// dst = the float 2^(k + bias - 127) for the integer lanes k, built in the
// exponent field; valid while k + bias is in [1, 254] (a normal float).
void VMathEmitter::pow2_of_int(const Vmm& dst, const Vmm& k, VMathConst bias) {
  gen_.vpaddd(dst, k, table_entry(bias));
  gen_.vpslld(dst, dst, 23);
}

// x = p * 2^n for n (a float holding an integer in [-150, 128]); clobbers p, n.
void VMathEmitter::scale_by_pow2_avx2(const Vmm& x, const Vmm& p, const Vmm& n) {
  auto& g = gen_;
  g.vcvtps2dq(n, n);
  g.vpsrad(x, n, 1);  // n1 = floor(n / 2)
  g.vpsubd(n, n, x);  // n2 = n - n1
  pow2_of_int(x, x, VMathConst::ExpBias);  // 2^n1
  pow2_of_int(n, n, VMathConst::ExpBias);  // 2^n2
  g.vmulps(p, p, x);   // exact: the product stays normal
  g.vmulps(x, p, n);   // the one rounding (into denormals, or to +inf)
}

void VMathEmitter::emit_exp(const Vmm& x) {
  check_operands(UnaryFn::Exp, x);
  const int n = vmath_scratch(UnaryFn::Exp).values;
  exp_core(x, scratch(0, n), scratch(1, n));
}

// log(x) = k ln 2 + log(m), x = 2^k m, m in [sqrt(1/2), sqrt(2)).
//   - Denormal x is first scaled by 2^23 (and k lowered by 23), so the integer
//     split below always sees a normal number.
//   - The split is integer arithmetic on the bits (musl's logf): subtracting
//     the bits of sqrt(1/2) makes the exponent field of the difference k.
//   - log(m) as in FreeBSD's e_logf.c: f = m - 1, s = f / (2 + f), z = s^2,
//     R = z (Lg1 + z (Lg2 + z (Lg3 + z Lg4))), hfsq = f^2 / 2,
//     log(m) = f - hfsq + s (hfsq + R), which keeps the leading f exact.
//   - k ln 2 is added in two parts, the large one last by one FMA.
//   - Special inputs are fixed at the end from the saved input: x < 0 or NaN
//     gives NaN (the input's payload for a NaN), ±0 gives -inf, +inf gives +inf.
// Registers: t0 = the input; t1 = k; t2 = s; t3 = z, then hfsq; t4 = R and the
// sum; m0 = denormal lanes, then the special-case lanes.
void VMathEmitter::emit_log(const Vmm& x) {
  check_operands(UnaryFn::Log, x);
  auto& g = gen_;
  const int n = vmath_scratch(UnaryFn::Log).values;
  const Vmm t0 = scratch(0, n), t1 = scratch(1, n), t2 = scratch(2, n), t3 = scratch(3, n),
            t4 = scratch(4, n);
  const Mask m0 = mask(0);

  g.vmovaps(t0, x);
  compare(m0, x, VMathConst::FltMin, kCmpLtOq);  // denormal (also 0 and x < 0: fixed below)
  if (isa_ == Isa::Avx512) {
    g.vmulps(x | Xbyak::Opmask(m0.idx), x, table_entry(VMathConst::TwoP23));
  } else {
    g.vmulps(t1, x, table_entry(VMathConst::TwoP23));
    blend(x, m0, t1);
  }

  g.vpsubd(t1, x, table_entry(VMathConst::SqrtHalfBits));
  g.vpsrad(t1, t1, 23);  // k (integer)
  g.vpslld(t2, t1, 23);
  g.vpsubd(x, x, t2);  // m = x / 2^k
  g.vcvtdq2ps(t1, t1);
  if (isa_ == Isa::Avx512) {
    g.vsubps(t1 | Xbyak::Opmask(m0.idx), t1, table_entry(VMathConst::TwentyThree));
  } else {
    const Vmm m0v = make_vmm(isa_, m0.idx);
    g.vandps(m0v, m0v, table_entry(VMathConst::TwentyThree));  // 23 in denormal lanes, else 0
    g.vsubps(t1, t1, m0v);
  }

  g.vsubps(x, x, table_entry(VMathConst::One));  // f
  g.vaddps(t2, x, table_entry(VMathConst::Two));
  g.vdivps(t2, x, t2);  // s
  g.vmulps(t3, t2, t2);  // z
  load(t4, VMathConst::LogLg4);
  g.vfmadd213ps(t4, t3, table_entry(VMathConst::LogLg3));
  g.vfmadd213ps(t4, t3, table_entry(VMathConst::LogLg2));
  g.vfmadd213ps(t4, t3, table_entry(VMathConst::LogLg1));
  g.vmulps(t4, t4, t3);  // R
  g.vmulps(t3, x, x);
  g.vmulps(t3, t3, table_entry(VMathConst::Half));  // hfsq
  g.vaddps(t4, t4, t3);
  g.vmulps(t4, t4, t2);                                    // s (hfsq + R)
  g.vfmadd231ps(t4, t1, table_entry(VMathConst::Ln2Lo));  // + k Ln2Lo
  g.vsubps(t4, t4, t3);                                    // - hfsq
  g.vaddps(x, x, t4);                                      // + f
  g.vfmadd231ps(x, t1, table_entry(VMathConst::Ln2Hi));   // + k Ln2Hi

  compare(m0, t0, VMathConst::Zero, kCmpNgeUq);  // x < 0 or NaN
  g.vorps(t1, t0, table_entry(VMathConst::QuietNan));
  blend(x, m0, t1);
  compare(m0, t0, VMathConst::Zero, kCmpEqOq);  // ±0
  blend(x, m0, table_entry(VMathConst::NegInf));
  compare(m0, t0, VMathConst::PosInf, kCmpEqOq);
  blend(x, m0, t0);
}

// tanh(x) = sign(x) tanh(a), a = min(|x|, 9.5) (tanh rounds to 1 above
// 9.011). With y = 2a reduced as in exp, y = n ln 2 + r, s = 2^n and
// q = expm1(r) = r + r (r v) (exp_series; the last FMA adds the exact r, so q
// is rounded once):
//   exp(y) - 1 = s q + (s - 1),   exp(y) + 1 = s q + (s + 1),
//   tanh(a) = (exp(y) - 1) / (exp(y) + 1),
// each side one FMA over exact terms (s - 1 and s + 1 are exact: n <= 28, and
// n > 24 only where the result rounds to 1). Near 0 (n = 0) this is q / (q + 2)
// with q accurate to the last bits, so there is no cancellation and tiny and
// denormal a come out as a; nothing overflows. NaN propagates through the
// clamp (vminps returns its second operand, a) into q. x's sign bit is OR-ed
// in at the end, so tanh(-0) = -0.
// Registers: t0 = a, then y and r, then the denominator; t1 = n, then s;
// t2 = v, then q; t3 = the numerator.
void VMathEmitter::emit_tanh(const Vmm& x) {
  check_operands(UnaryFn::Tanh, x);
  auto& g = gen_;
  const int n = vmath_scratch(UnaryFn::Tanh).values;
  const Vmm t0 = scratch(0, n), t1 = scratch(1, n), t2 = scratch(2, n), t3 = scratch(3, n);

  g.vandps(t0, x, table_entry(VMathConst::AbsMask));
  load(t1, VMathConst::TanhMaxArg);
  g.vminps(t0, t1, t0);  // a
  g.vaddps(t0, t0, t0);  // y = 2a
  exp_reduce(t0, t1);
  exp_series(t2, t0);
  g.vmulps(t2, t2, t0);
  g.vfmadd213ps(t2, t0, t0);  // q = expm1(r)

  g.vcvtps2dq(t1, t1);
  pow2_of_int(t1, t1, VMathConst::ExpBias);  // s = 2^n, n in [0, 28]
  g.vsubps(t3, t1, table_entry(VMathConst::One));
  g.vaddps(t0, t1, table_entry(VMathConst::One));
  g.vfmadd231ps(t3, t1, t2);  // exp(y) - 1
  g.vfmadd231ps(t0, t1, t2);  // exp(y) + 1
  g.vdivps(t0, t3, t0);       // tanh(a)

  g.vandps(x, x, table_entry(VMathConst::SignMask));
  g.vorps(x, x, t0);
}

// exp(x) for x <= 0 or NaN (sigmoid's -|x|), shorter than exp_core: no upper
// clamp, and on Avx2 2^n in one step as 2^(n + 64) * 2^-64: for n in
// [-150, 0] the first factor is a normal float, the product exp(r) 2^(n + 64)
// is exact and multiplying by 2^-64 rounds once, into the denormal range too.
// Registers: x = argument and result; t0 = n; t1 = polynomial.
void VMathEmitter::exp_nonpositive(const Vmm& x, const Vmm& t0, const Vmm& t1) {
  auto& g = gen_;
  load(t0, VMathConst::ExpMinArg);
  g.vmaxps(x, t0, x);  // NaN passes: vmaxps returns its second operand
  exp_reduce(x, t0);
  exp_of_reduced(t1, x);
  if (isa_ == Isa::Avx512) {
    g.vscalefps(x, t1, t0);
    return;
  }
  g.vcvtps2dq(t0, t0);
  pow2_of_int(t0, t0, VMathConst::ExpBiasPlus64);  // 2^(n + 64)
  g.vmulps(t1, t1, t0);
  g.vmulps(x, t1, table_entry(VMathConst::TwoM64));
}

// sigmoid(x) = 1 / (1 + z) for x >= 0 and z / (1 + z) for x < 0, z = exp(-|x|)
// in (0, 1]: no overflow anywhere, and for very negative x the result is z
// itself, accurate into the denormal range. NaN propagates through z.
// Registers: t0 = -|x|, then z; t1 = 1 + z; t2 = the numerator; m0 = x < 0.
void VMathEmitter::emit_sigmoid(const Vmm& x) {
  check_operands(UnaryFn::Sigmoid, x);
  auto& g = gen_;
  const int n = vmath_scratch(UnaryFn::Sigmoid).values;
  const Vmm t0 = scratch(0, n), t1 = scratch(1, n), t2 = scratch(2, n);
  const Mask m0 = mask(0);

  g.vorps(t0, x, table_entry(VMathConst::SignMask));  // -|x|
  exp_nonpositive(t0, t1, t2);                         // z
  g.vaddps(t1, t0, table_entry(VMathConst::One));
  compare(m0, x, VMathConst::Zero, kCmpLtOq);
  load(t2, VMathConst::One);
  blend(t2, m0, t0);
  g.vdivps(x, t2, t1);
}

}  // namespace vjit::codegen
