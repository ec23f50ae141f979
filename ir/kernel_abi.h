#pragma once
// The calling convention of generated elementwise kernels, shared by the code
// generators that make them and the executors that call them. Row r of a
// buffer is at data + r·ld; ld 0 means every row reads the same elements; or,
// where the operand has a row table, at table[r].
#include <cstdint>

namespace vjit::ir {

struct KernelArgs {
  int64_t rows = 0;
  const float* const* inputs = nullptr;
  const int64_t* input_ld = nullptr;
  float* const* outputs = nullptr;
  const int64_t* output_ld = nullptr;
  // What the kernel itself needs beside its operands (the reference kernel
  // reads its spec here); generated code ignores it.
  const void* context = nullptr;
  // Null, or per operand (the inputs, then the outputs) a table of `rows` row
  // addresses or null: row r of an operand with a table is table[r], wherever
  // it lies (its pointer and ld are not read). The x86 and reference kernels
  // read it; the CUDA kernels do not.
  const float* const* const* row_tables = nullptr;
};

using KernelFn = void (*)(const KernelArgs*);

}  // namespace vjit::ir
