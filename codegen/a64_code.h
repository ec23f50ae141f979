#pragma once
// Machine code written with asmjit's a64 assembler, placed in pages of its own
// that are never writable and executable at once: what the AArch64 generators
// (a64_fused_kernel.h, a64_unary_kernel.h) hand out.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <asmjit/arm/a64assembler.h>

namespace vjit::codegen {

class A64Code {
 public:
  // Runs `emit` on an a64 assembler, then copies the code into its pages.
  // InternalError naming `name` when asmjit refuses an instruction (it reports
  // instead of throwing) or the pages cannot be had. With `perf_map` the code
  // is named `name` in the perf map.
  A64Code(const std::string& name, const std::function<void(asmjit::a64::Assembler&)>& emit, bool perf_map);
  ~A64Code();
  A64Code(const A64Code&) = delete;
  A64Code& operator=(const A64Code&) = delete;

  const std::uint8_t* data() const { return memory_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* memory_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace vjit::codegen
