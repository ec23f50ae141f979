#pragma once
// Instruction sets the code generators target, and what this CPU has.
//
//   Scalar  plain C++ (std:: functions); runs everywhere, the reference kernel
//           every dispatch list ends in (STYLE 8)
//   Avx2    x86: 256-bit ymm registers, AVX2 integer ops and FMA3
//   Avx512  x86: 512-bit zmm registers and opmask registers k1..k7: AVX-512 F,
//           BW, DQ, VL
//   Neon    AArch64: Advanced SIMD, 128-bit v registers (4 floats), FMA
//
// A build generates code for its own architecture only: on x86-64 the x86
// levels (ordered: a CPU that has Avx512 also has Avx2, checked, not assumed;
// detected with CPUID and XGETBV, the OS must save the registers), on AArch64
// Neon (part of every AArch64 CPU that Linux runs on). cpu_has is false for
// the other architecture's sets.
#include <string>

namespace vjit::codegen {

enum class Isa { Scalar, Avx2, Avx512, Neon };

// Lower-case name: "scalar", "avx2", "avx512", "neon".
const char* isa_name(Isa isa);

// True when this CPU (and OS) can run code generated for `isa`.
bool cpu_has(Isa isa);

// The widest level this CPU has.
Isa best_isa();

// Parses a name as VJIT_ISA spells it: "scalar", "avx2", "avx512", "neon", or
// "auto" (= best_isa()); case-insensitive. Throws vjit::UserError listing the
// valid names for anything else. Does not check the CPU; see require_isa.
Isa parse_isa(const std::string& name);

// Throws vjit::UserError naming the level asked for and the best level this CPU
// has when it lacks `isa`.
void require_isa(Isa isa);

}  // namespace vjit::codegen
