#pragma once
// What the vector-math emitters of every ISA share: the functions they
// compute and their constants. The algorithms (range reduction, polynomial,
// special cases) are the same on x86 (x86_vmath.h) and AArch64 (a64_vmath.h),
// and so are the constants, each defined once here.
#include <cstdint>

namespace vjit::codegen {

// The elementwise functions the emitters provide.
enum class UnaryFn { Exp, Log, Tanh, Sigmoid };

// Lower-case name: "exp", "log", "tanh", "sigmoid".
const char* unary_fn_name(UnaryFn fn);

// The constants the vector-math emitters of every ISA use (x86_vmath.h,
// a64_vmath.h), in one table: X(name, IEEE-754 bits), the decimal value in
// the comment. Entries that are integers for integer instructions say so.
#define VJIT_VMATH_CONSTANTS(X)                                                    \
  X(One, 0x3f800000)            /* 1.0 */                                          \
  X(Two, 0x40000000)            /* 2.0 */                                          \
  X(Half, 0x3f000000)           /* 0.5 */                                          \
  X(Zero, 0x00000000)           /* 0.0 */                                          \
  X(SignMask, 0x80000000)       /* -0.0: the sign bit */                           \
  X(AbsMask, 0x7fffffff)        /* all bits but the sign */                        \
  X(PosInf, 0x7f800000)         /* +inf */                                         \
  X(NegInf, 0xff800000)         /* -inf */                                         \
  X(QuietNan, 0x7fc00000)       /* NaN; OR-ed into x it makes any x a NaN */       \
  X(Log2e, 0x3fb8aa3b)          /* 1.44269502 = log2(e) */                         \
  X(Ln2Hi, 0x3f317218)          /* 0.693147182 = ln 2 rounded to float */          \
  X(Ln2Lo, 0xb102e308)          /* -1.90465421e-09 = ln 2 - Ln2Hi */               \
  X(ExpMaxArg, 0x42b20000)      /* 89.0: exp(x) = +inf above 88.7228 */           \
  X(ExpMinArg, 0xc2d00000)      /* -104.0: exp(x) rounds to 0 below -103.9721 */  \
  X(ExpC2, 0x3f000001)          /* 0.500000060 exp(r) minimax on [-ln2/2, ln2/2] */ \
  X(ExpC3, 0x3e2aa9e1)          /* 0.166663662 */                                  \
  X(ExpC4, 0x3d2aa8af)          /* 0.0416647755 */                                 \
  X(ExpC5, 0x3c09481f)          /* 0.00837901141 */                                \
  X(ExpC6, 0x3ab84db2)          /* 0.00140612409 */                                \
  X(ExpBias, 0x0000007f)        /* integer 127: the float exponent bias */         \
  X(ExpBiasPlus64, 0x000000bf)  /* integer 191: the bias of 2^(n + 64) */          \
  X(TwoM64, 0x1f800000)         /* 5.42101086e-20 = 2^-64 */                       \
  X(FltMin, 0x00800000)         /* 1.17549435e-38: smallest normal float */        \
  X(TwoP23, 0x4b000000)         /* 8388608.0 = 2^23 */                             \
  X(TwentyThree, 0x41b80000)    /* 23.0 */                                         \
  X(SqrtHalfBits, 0x3f3504f3)   /* integer bits of 0.707106769 = sqrt(1/2) */      \
  X(LogLg1, 0x3f2aaaaa)         /* 0.666666627 log: FreeBSD e_logf.c Lg1..Lg4 */  \
  X(LogLg2, 0x3eccce13)         /* 0.400009722 */                                  \
  X(LogLg3, 0x3e91e9ee)         /* 0.284987867 */                                  \
  X(LogLg4, 0x3e789e26)         /* 0.242790788 */                                  \
  X(TanhMaxArg, 0x41180000)     /* 9.5: tanh(x) rounds to 1 above 9.011 */

enum class VMathConst : int {
#define VJIT_VMATH_ENUM(name, bits) name,
  VJIT_VMATH_CONSTANTS(VJIT_VMATH_ENUM)
#undef VJIT_VMATH_ENUM
};

// Registers each emitter clobbers besides its argument, the same on every
// ISA: values, and comparison masks (opmask registers on AVX-512, vector
// registers elsewhere).
struct VMathScratch {
  int values;
  int masks;
};
VMathScratch vmath_scratch(UnaryFn fn);

// The IEEE-754 bits of `c`.
std::uint32_t vmath_constant_bits(VMathConst c);

// Entries of the table.
inline constexpr int kVMathConstants = 0
#define VJIT_VMATH_COUNT(name, bits) +1
    VJIT_VMATH_CONSTANTS(VJIT_VMATH_COUNT)
#undef VJIT_VMATH_COUNT
    ;

}  // namespace vjit::codegen
