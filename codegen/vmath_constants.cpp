#include "codegen/vmath_constants.h"

namespace vjit::codegen {

namespace {

// The IEEE-754 bits of each VMathConst, in enum order.
constexpr std::uint32_t kConstBits[] = {
#define VJIT_VMATH_BITS(name, bits) bits,
    VJIT_VMATH_CONSTANTS(VJIT_VMATH_BITS)
#undef VJIT_VMATH_BITS
};

}  // namespace

const char* unary_fn_name(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Exp: return "exp";
    case UnaryFn::Log: return "log";
    case UnaryFn::Tanh: return "tanh";
    case UnaryFn::Sigmoid: return "sigmoid";
  }
  return "unknown";
}

VMathScratch vmath_scratch(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Exp: return {2, 0};
    case UnaryFn::Log: return {5, 1};
    case UnaryFn::Tanh: return {4, 0};
    case UnaryFn::Sigmoid: return {3, 1};
  }
  return {0, 0};
}

std::uint32_t vmath_constant_bits(VMathConst c) { return kConstBits[static_cast<int>(c)]; }

}  // namespace vjit::codegen
