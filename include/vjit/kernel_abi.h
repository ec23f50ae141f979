#pragma once
// The calling convention of generated elementwise kernels, shared by the code
// generators that make them and the executors that call them. Row r of a
// buffer is at data + r·ld; ld 0 means every row reads the same elements.
#include <cstdint>

namespace vjit {

struct KernelArgs {
  int64_t rows = 0;
  const float* const* inputs = nullptr;
  const int64_t* input_ld = nullptr;
  float* const* outputs = nullptr;
  const int64_t* output_ld = nullptr;
  // What the kernel itself needs beside its operands (the reference kernel
  // reads its spec here); generated code ignores it.
  const void* context = nullptr;
};

using KernelFn = void (*)(const KernelArgs*);

}  // namespace vjit
