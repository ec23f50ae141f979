#include "codegen/jit_kernels.h"

#include "vjit/error.h"

#if defined(__x86_64__)
#include "codegen/x86_fused_kernel.h"
#include "codegen/x86_unary_kernel.h"
#elif defined(__aarch64__)
#include "codegen/a64_fused_kernel.h"
#include "codegen/a64_unary_kernel.h"
#endif

namespace vjit::codegen {

std::shared_ptr<const FusedKernel> compile_fused_kernel(const KernelSpec& spec, Isa isa, bool perf_map) {
#if defined(__x86_64__)
  if (isa == Isa::Avx2 || isa == Isa::Avx512) return compile_x86_fused_kernel(spec, isa, perf_map);
#elif defined(__aarch64__)
  if (isa == Isa::Neon) return compile_a64_fused_kernel(spec, perf_map);
#endif
  VJIT_INTERNAL_CHECK(false, "compile_fused_kernel: no JIT for ISA '" << isa_name(isa)
                                                                      << "' in this build (the reference kernel runs it)");
  return nullptr;
}

// "vjit_fused_avx512_w64_sigmoid3_tanh2_mul3_add1_9f3c21d0": ISA, width, op
// counts in order of first use (at most six kinds), and a hash of the key so
// that different kernels have different names in a profile.
std::string fused_kernel_name(const KernelSpec& spec, Isa isa) { return kernel_name(spec, isa_name(isa)); }

ArrayKernel compile_exp_kernel(Isa isa, bool perf_map) {
#if defined(__x86_64__)
  if (isa == Isa::Avx2 || isa == Isa::Avx512) {
    auto exp = std::make_shared<UnaryKernel>(isa, UnaryFn::Exp, perf_map);
    return {exp->entry(), exp};
  }
#elif defined(__aarch64__)
  if (isa == Isa::Neon) {
    auto exp = std::make_shared<A64UnaryKernel>(UnaryFn::Exp, perf_map);
    return {exp->entry(), exp};
  }
#endif
  return {};
}

}  // namespace vjit::codegen
