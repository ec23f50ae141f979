#include "codegen/isa.h"

#include <algorithm>
#include <cctype>

#if defined(__x86_64__)
#include <xbyak/xbyak_util.h>
#endif

#include "vjit/error.h"

namespace vjit::codegen {

namespace {

#if defined(__x86_64__)
using Cpu = Xbyak::util::Cpu;

const Cpu& host_cpu() {
  static const Cpu cpu;  // CPUID + XGETBV once
  return cpu;
}

bool has_avx2() { return host_cpu().has(Cpu::tAVX2) && host_cpu().has(Cpu::tFMA); }

bool has_avx512() {
  const Cpu& cpu = host_cpu();
  return has_avx2() && cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512BW) &&
         cpu.has(Cpu::tAVX512DQ) && cpu.has(Cpu::tAVX512VL);
}
#else
bool has_avx2() { return false; }
bool has_avx512() { return false; }
#endif

// Advanced SIMD is mandatory in the AArch64 Linux ABI.
#if defined(__aarch64__)
bool has_neon() { return true; }
#else
bool has_neon() { return false; }
#endif

constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
  }
  return "unknown";
}

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return has_avx2();
    case Isa::Avx512: return has_avx512();
    case Isa::Neon: return has_neon();
  }
  return false;
}

Isa best_isa() {
  if (cpu_has(Isa::Avx512)) return Isa::Avx512;
  if (cpu_has(Isa::Avx2)) return Isa::Avx2;
  if (cpu_has(Isa::Neon)) return Isa::Neon;
  return Isa::Scalar;
}

Isa parse_isa(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "auto") return best_isa();
  for (Isa isa : kAllIsas) {
    if (lower == isa_name(isa)) return isa;
  }
  throw UserError("unknown ISA '" + name + "'; valid values are: auto, scalar, avx2, avx512, neon");
}

void require_isa(Isa isa) {
  VJIT_USER_CHECK(cpu_has(isa), "ISA '" << isa_name(isa) << "' was requested but this CPU lacks it"
                                        << " (the best it has is '" << isa_name(best_isa())
                                        << "')");
}

}  // namespace vjit::codegen
