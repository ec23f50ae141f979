#include "runtime/exec_plan.h"

namespace vjit::runtime {

const char* kernel_target_name(KernelTarget target) {
  switch (target) {
    case KernelTarget::HostReference: return "host-reference";
    case KernelTarget::X86Avx2: return "x86-avx2";
    case KernelTarget::X86Avx512: return "x86-avx512";
    case KernelTarget::A64Neon: return "a64-neon";
    case KernelTarget::Cuda: return "cuda";
  }
  return "unknown";
}

}  // namespace vjit::runtime
