#include "codegen/x86_jit_generator.h"

#include "codegen/perf_map.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

bool is_callee_saved(const Xbyak::Reg64& reg) {
  using Xbyak::Operand;
  switch (reg.getIdx()) {
    case Operand::RBX:
    case Operand::RBP:
    case Operand::R12:
    case Operand::R13:
    case Operand::R14:
    case Operand::R15: return true;
    default: return false;
  }
}

}  // namespace

JitGenerator::JitGenerator(std::string name, std::size_t max_code_size)
    // DontSetProtectRWE: the buffer stays read+write while generating;
    // create_kernel() turns it read+execute.
    : Xbyak::CodeGenerator(max_code_size, Xbyak::DontSetProtectRWE), name_(std::move(name)) {}

const std::uint8_t* JitGenerator::create_kernel(bool perf_map) {
  VJIT_INTERNAL_CHECK(entry_ == nullptr, "kernel '" << name_ << "' generated twice");
  try {
    generate();
  } catch (const Xbyak::Error& e) {
    VJIT_INTERNAL_CHECK(false, "xbyak failed generating '" << name_ << "': " << e.what());
  }
  setProtectModeRE();
  entry_ = getCode();
  if (perf_map) register_perf_map(entry_, getSize(), name_);
  return entry_;
}

void JitGenerator::preamble(std::initializer_list<Xbyak::Reg64> used) {
  saved_.assign(used.begin(), used.end());
  for (const Xbyak::Reg64& reg : saved_) {
    VJIT_INTERNAL_CHECK(is_callee_saved(reg),
                        "kernel '" << name_ << "' asks to save caller-saved " << reg.toString());
    push(reg);
  }
}

void JitGenerator::postamble() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) pop(*it);
  vzeroupper();  // avoid AVX-SSE transition penalties in the caller
  ret();
}

}  // namespace vjit::codegen
