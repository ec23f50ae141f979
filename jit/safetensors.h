#pragma once
// The safetensors file format (https://github.com/huggingface/safetensors),
// read and written here without the reference library:
//
//   8 bytes   N, the header's size, an unsigned little-endian integer
//   N bytes   the header: a JSON object, padded with spaces so that the data
//             starts at a multiple of 8. Per tensor, name → {"dtype": "F32",
//             "shape": [2, 3], "data_offsets": [begin, end]}, the offsets in
//             bytes from the start of the data; optionally "__metadata__" →
//             an object of strings.
//   the data  every tensor's values, row-major, little-endian, back to back.
//
// Reading validates the file as the reference reader does, before anything
// is returned: a regular file (a directory or FIFO is refused), a header no larger than the file (and than 100 MB), valid
// JSON of that form, known dtypes, shapes whose size matches the offsets, and
// offsets that lie inside the data and cover it exactly, without gaps or
// overlaps. Every error is a UserError naming the file and what is wrong
// (tensor, byte offset, sizes).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vjit::jit::safetensors {

struct Tensor {
  std::string name;
  std::string dtype;            // the spec's name: "F32", "I64", ...
  std::vector<int64_t> shape;   // empty for a scalar
  std::string_view bytes;       // read: into File::contents; written: the caller's memory
};

struct File {
  File() = default;
  File(File&&) = default;
  File& operator=(File&&) = default;
  File(const File&) = delete;  // the tensors point into `contents`
  File& operator=(const File&) = delete;

  std::string path;
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<Tensor> tensors;                  // in the order of their data
  std::vector<char> contents;                   // the whole file; Tensor::bytes point into it

  // The tensor of that name, or null.
  const Tensor* find(const std::string& name) const;
};

// The size in bytes of one element of `dtype`, or 0 for a dtype the spec does
// not define.
size_t dtype_size(std::string_view dtype);
// "[2, 3]".
std::string shape_string(const std::vector<int64_t>& shape);

File read(const std::string& path);
// Writes `tensors` in this order (the data 8-byte aligned when every tensor of
// an 8-byte dtype comes first) atomically (jit/atomic_file.h). `what` names
// the file in errors ("checkpoint").
void write(const std::string& path, const std::map<std::string, std::string>& metadata,
           const std::vector<Tensor>& tensors, const std::string& what);

}  // namespace vjit::jit::safetensors
