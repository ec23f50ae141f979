#pragma once
// Base class of every x86 kernel vjit generates at run time (oneDNN's
// jit_generator pattern). It owns what all kernels share:
//   - the calling convention (System V AMD64: arguments in rdi, rsi, rdx, rcx,
//     r8, r9; rbx, rbp, r12-r15 callee-saved; all vector and opmask registers
//     caller-saved),
//   - the prologue/epilogue that save and restore the callee-saved registers a
//     kernel uses,
//   - finalisation: generate() once, make the code read+execute (never
//     writable and executable at once), and name it for profilers.
// A kernel derives, names its registers, and lays its code out in generate():
// prologue, vector loop, tail, epilogue, constant table.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <xbyak/xbyak.h>

#include "codegen/perf_map.h"

namespace vjit::codegen {

class JitGenerator : public Xbyak::CodeGenerator {
 public:
  // `name` identifies the kernel in errors and in the perf map.
  explicit JitGenerator(std::string name, std::size_t max_code_size = 16 * 1024);
  ~JitGenerator() override = default;
  JitGenerator(const JitGenerator&) = delete;
  JitGenerator& operator=(const JitGenerator&) = delete;

  const std::string& name() const { return name_; }

  // Runs generate(), seals the code (read+execute) and, with `perf_map`,
  // registers it in the perf map. Call once; returns the entry point.
  const std::uint8_t* create_kernel(bool perf_map = false);

  // The entry point as a function pointer; create_kernel() must have run.
  template <typename Fn>
  Fn entry() const {
    return reinterpret_cast<Fn>(const_cast<std::uint8_t*>(entry_));
  }

 protected:
  // System V AMD64 integer argument registers, in order.
  const Xbyak::Reg64 abi_param1{Xbyak::Operand::RDI};
  const Xbyak::Reg64 abi_param2{Xbyak::Operand::RSI};
  const Xbyak::Reg64 abi_param3{Xbyak::Operand::RDX};
  const Xbyak::Reg64 abi_param4{Xbyak::Operand::RCX};
  const Xbyak::Reg64 abi_param5{Xbyak::Operand::R8};
  const Xbyak::Reg64 abi_param6{Xbyak::Operand::R9};

  // Emits the kernel body (between preamble() and postamble()) and its data.
  virtual void generate() = 0;

  // Saves the callee-saved registers in `used` (any of rbx, rbp, r12-r15); a
  // caller-saved register there is an internal error.
  void preamble(std::initializer_list<Xbyak::Reg64> used = {});
  // Restores them in reverse order, clears the upper vector state and returns.
  void postamble();

 private:
  std::string name_;
  std::vector<Xbyak::Reg64> saved_;
  const std::uint8_t* entry_ = nullptr;
};

}  // namespace vjit::codegen
