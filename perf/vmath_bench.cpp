// vmath_bench: time the JIT unary kernels (codegen/x86_unary_kernel.h) against
// a scalar loop over the float std:: functions, after checking their results.
// Prints one JSON line per (function, ISA):
//   {"fn":"exp","isa":"avx512","n":16384,"max_ulp":1,"ns_per_elem":..,
//    "libm_ns_per_elem":..,"speedup":..}
// Usage: vmath_bench [n] (default 16384 floats: source and destination stay in
// the L2 cache, so this measures the math rather than memory bandwidth).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/isa.h"
#include "codegen/vmath_reference.h"
#include "codegen/x86_unary_kernel.h"

namespace {

using vjit::codegen::Isa;
using vjit::codegen::UnaryFn;
using vjit::codegen::UnaryKernel;

// Inputs where each function does real work (no saturation shortcuts).
std::vector<float> make_inputs(UnaryFn fn, std::size_t n) {
  std::mt19937 rng(42);
  float lo = -10.0f, hi = 10.0f;
  if (fn == UnaryFn::Exp) lo = -80.0f, hi = 80.0f;
  if (fn == UnaryFn::Log) lo = 1e-6f, hi = 1e6f;
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> xs(n);
  for (float& x : xs) x = dist(rng);
  return xs;
}

// Largest ulp distance from double libm rounded to float.
std::int64_t max_ulp(UnaryFn fn, const std::vector<float>& xs, const std::vector<float>& got) {
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(vjit::codegen::unary_reference<double>(fn, xs[i]));
    worst = std::max(worst, std::abs(vjit::codegen::float_ordinal(got[i]) - vjit::codegen::float_ordinal(want)));
  }
  return worst;
}

// Best-of-5 nanoseconds per element, each trial running >= 50 ms.
double ns_per_elem(const UnaryKernel& kernel, const std::vector<float>& xs, std::vector<float>& out) {
  using Clock = std::chrono::steady_clock;
  const auto n = static_cast<std::int64_t>(xs.size());
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    std::int64_t reps = 0;
    const auto start = Clock::now();
    auto now = start;
    do {
      for (int i = 0; i < 16; ++i) kernel(xs.data(), out.data(), n);
      reps += 16;
      now = Clock::now();
    } while (now - start < std::chrono::milliseconds(50));
    const double ns = std::chrono::duration<double, std::nano>(now - start).count();
    best = std::min(best, ns / static_cast<double>(reps * n));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 16384;
  int status = 0;
  for (UnaryFn fn : {UnaryFn::Exp, UnaryFn::Log, UnaryFn::Tanh, UnaryFn::Sigmoid}) {
    const std::vector<float> xs = make_inputs(fn, n);
    std::vector<float> out(n);
    const UnaryKernel libm(Isa::Scalar, fn);
    const double libm_ns = ns_per_elem(libm, xs, out);
    for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
      nlohmann::json line = {{"fn", vjit::codegen::unary_fn_name(fn)},
                             {"isa", vjit::codegen::isa_name(isa)},
                             {"n", n}};
      if (!vjit::codegen::cpu_has(isa)) {
        line["skipped"] = "this CPU lacks " + std::string(vjit::codegen::isa_name(isa));
        std::printf("%s\n", line.dump().c_str());
        continue;
      }
      const UnaryKernel kernel(isa, fn);
      kernel(xs.data(), out.data(), static_cast<std::int64_t>(n));
      const std::int64_t ulp = max_ulp(fn, xs, out);  // check before timing
      line["max_ulp"] = ulp;
      if (ulp > 4) {
        line["error"] = "results off by more than 4 ulp; not timed";
        status = 1;
      } else {
        const double ns = ns_per_elem(kernel, xs, out);
        line["ns_per_elem"] = ns;
        line["libm_ns_per_elem"] = libm_ns;
        line["speedup"] = libm_ns / ns;
      }
      std::printf("%s\n", line.dump().c_str());
    }
  }
  return status;
}
