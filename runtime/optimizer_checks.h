#pragma once
// What the optimizer's step (runtime/optimizer.cpp) and its rules
// (runtime/optimizer_rules.cpp) share: the check of a hyper-parameter and
// Adam's bias correction, which the host rule and the device step compute
// alike.
#include <cmath>
#include <cstdint>

#include "vjit/error.h"

namespace vjit::runtime {

inline void check_hyper(bool ok, const char* optimizer, const char* name, float value, const char* expected) {
  VJIT_USER_CHECK(ok, optimizer << ": " << name << "=" << value << " is not valid; expected " << expected);
}

inline bool finite(float x) { return std::isfinite(x); }

// Adam's 1 − βᵗ of step t, on the host and for the device's kernel alike.
inline float bias_correction(float beta, int64_t t) { return float(1.0 - std::pow(double(beta), double(t))); }

}  // namespace vjit::runtime
