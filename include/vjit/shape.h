#pragma once
// The shape of one vertex's value: a scalar, a vector [n] or a matrix [m, n],
// stored row-major. The batch dimension is implicit: a batched buffer holds one
// row of numel() floats per vertex.
#include <array>
#include <cstdint>
#include <string>

namespace vjit {

/// The shape of one vertex's value: a scalar (rank 0), a vector [n] (rank 1)
/// or a matrix [m, n] (rank 2), row-major.
struct Shape {
  int rank = 0;  ///< 0: scalar, 1: vector, 2: matrix
  std::array<int, 2> dims{1, 1};  ///< the first `rank` entries are the extents

  static Shape scalar() { return Shape{}; }  ///< a single value
  static Shape vec(int n) { return Shape{1, {n, 1}}; }  ///< a vector [n]
  static Shape mat(int m, int n) { return Shape{2, {m, n}}; }  ///< a matrix [m, n]

  /// The number of elements: 1, n or m·n.
  int64_t numel() const {
    if (rank == 0) return 1;
    if (rank == 1) return dims[0];
    return int64_t(dims[0]) * dims[1];
  }
  /// Rows and columns when the value is read as a matrix (a vector is one row).
  int rows() const { return rank == 2 ? dims[0] : 1; }
  int cols() const { return rank == 0 ? 1 : (rank == 1 ? dims[0] : dims[1]); }  ///< see rows()

  /// Equal rank and extents.
  bool operator==(const Shape& other) const {
    if (rank != other.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != other.dims[i]) return false;
    return true;
  }
  bool operator!=(const Shape& other) const { return !(*this == other); }  ///< not ==

  /// The extents in brackets: "[]", "[64]", "[3,64]".
  std::string str() const {
    std::string out = "[";
    for (int i = 0; i < rank; ++i) {
      if (i) out += ",";
      out += std::to_string(dims[size_t(i)]);
    }
    out += "]";
    return out;
  }
};

}  // namespace vjit
