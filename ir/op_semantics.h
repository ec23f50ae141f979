#pragma once
// The scalar semantics of the elementwise ops, written once. The reference
// interpreter (ir/interpreter.cpp, in double and in float), the runtime's
// elementwise kernels when fusion is off (runtime/kernels.cpp) and codegen's
// reference kernel (codegen/kernel_spec.cpp) all compute each element here, so
// in float they agree bit for bit.
//
// The JIT kernels (codegen/x86_*, codegen/a64_*) are compared against the reference kernel:
// Neg, Relu, Step, Scale, AddScalar, Sqrt, Add, Sub, Mul and Div must stay the
// single IEEE float operation written here; Sigmoid, Tanh, Exp and Log are
// within the tolerances of tests/test_fused_kernel.cpp.
//
// The ops with semantics here are exactly the fusable ones (is_fusable_op):
// a new fusable op needs its line below and its x86 emission.
#include <cmath>
#include <type_traits>

#include "ir/ops.h"
#include "vjit/error.h"

namespace vjit::ir {

// Whether a unary op reads a constant attribute (Scale's factor, AddScalar's addend).
constexpr bool has_unary_constant(Op op) {
  const AttrSet attrs = op_info(op).attributes;
  return attrs.has(Attr::Factor) || attrs.has(Attr::Addend);
}

// That constant, the attribute its op reads; 0 for the other ops.
inline double unary_constant(const Node& n) {
  const AttrSet attrs = op_info(n.op).attributes;
  return attrs.has(Attr::Factor) ? n.factor : attrs.has(Attr::Addend) ? n.addend : 0.0;
}

template <Op op>
inline constexpr bool kHasNoSemantics = false;

// y = op(x), with c = unary_constant(node) in T.
template <Op op, typename T>
inline T apply_unary(T x, T c) {
  if constexpr (op == Op::Neg) return -x;                                         // y = −x
  else if constexpr (op == Op::Sigmoid) return T(1) / (T(1) + std::exp(-x));      // y = 1 / (1 + e^−x)
  else if constexpr (op == Op::Tanh) return std::tanh(x);                         // y = tanh x
  else if constexpr (op == Op::Relu) return x > T(0) ? x : T(0);                  // y = max(x, 0); 0 for NaN
  else if constexpr (op == Op::Exp) return std::exp(x);                           // y = e^x
  else if constexpr (op == Op::Log) return std::log(x);                           // y = ln x
  else if constexpr (op == Op::Sqrt) return std::sqrt(x);                         // y = √x
  else if constexpr (op == Op::Step) return x > T(0) ? T(1) : T(0);               // y = [x > 0]
  else if constexpr (op == Op::Scale) return x * c;                               // y = x · factor
  else if constexpr (op == Op::AddScalar) return x + c;                           // y = x + addend
  else static_assert(kHasNoSemantics<op>, "not a unary op with scalar semantics");
}

// y = a op b (broadcasting is the caller's: see Op::Add).
template <Op op, typename T>
inline T apply_binary(T a, T b) {
  if constexpr (op == Op::Add) return a + b;       // y = a + b
  else if constexpr (op == Op::Sub) return a - b;  // y = a − b
  else if constexpr (op == Op::Mul) return a * b;  // y = a · b
  else if constexpr (op == Op::Div) return a / b;  // y = a / b
  else static_assert(kHasNoSemantics<op>, "not a binary op with scalar semantics");
}

// Calls f(std::integral_constant<Op, op>{}) with `op` as a compile-time constant,
// so that a loop inside f is compiled once per op with no switch in it.
// InternalError when `op` is not a fusable unary op.
template <typename F>
decltype(auto) visit_unary(Op op, F&& f) {
  switch (op) {
#define VJIT_X(name, ...)                                                             \
  case Op::name:                                                                      \
    if constexpr (is_fusable_op(Op::name) && op_kind(Op::name) == OpKind::Unary) \
      return f(std::integral_constant<Op, Op::name>{});                              \
    break;
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
  }
  VJIT_INTERNAL_CHECK(false, "not a unary op with scalar semantics: " << op_name(op));
}

// visit_unary for the fusable binary ops.
template <typename F>
decltype(auto) visit_binary(Op op, F&& f) {
  switch (op) {
#define VJIT_X(name, ...)                                                              \
  case Op::name:                                                                       \
    if constexpr (is_fusable_op(Op::name) && op_kind(Op::name) == OpKind::Binary) \
      return f(std::integral_constant<Op, Op::name>{});                               \
    break;
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
  }
  VJIT_INTERNAL_CHECK(false, "not a binary op with scalar semantics: " << op_name(op));
}

// The same with `op` known only at run time (one switch per call).
template <typename T>
inline T apply_unary(Op op, T x, T c) {
  return visit_unary(op, [&](auto o) { return apply_unary<decltype(o)::value>(x, c); });
}
template <typename T>
inline T apply_binary(Op op, T a, T b) {
  return visit_binary(op, [&](auto o) { return apply_binary<decltype(o)::value>(a, b); });
}

}  // namespace vjit::ir
