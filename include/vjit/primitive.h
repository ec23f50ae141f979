#pragma once
// Primitives: the units of work a device runs for an engine. Every step of a
// plan that does work issues one — a GEMM, a generated fused kernel, a copy or
// an add of rows, a reduction — and so does every optimizer update and every
// copy between host and device. The count of a training step is what a GPU
// pays in launches; EngineStats::primitives sums them by kind, and
// VJIT_LOG=primitives prints each call's list (docs/architecture.md).
#include <array>
#include <cstdint>
#include <string_view>

namespace vjit {

enum class Primitive : uint8_t {
  Gemm,            ///< one matrix product over the rows (a weight's product, a weight's gradient)
  GemmBatched,     ///< several independent products over the same rows, of one shape, in one call
  VertexProducts,  ///< a small product per vertex (matrix by vector, or matrix by matrix)
  Outer,           ///< an outer product u·vᵀ per vertex (and the symmetric one)
  Fused,           ///< a generated kernel over the rows: a fused elementwise group
  Elementwise,     ///< one elementwise op over the rows, unfused
  MoveRows,        ///< rows copied: gathers, pulls, pushes, concats, pads, slices, transposes
  AddRows,         ///< rows added into others: children's sums, gradients into the children's rows
  Reduce,          ///< sums over rows or columns: losses, bias gradients, Sum, max over children
  SoftmaxCE,       ///< softmax cross-entropy over each row (and its gradient)
  Fill,            ///< rows set to a constant (zeroed gradients, constants, child counts)
  OptimizerStep,   ///< an update of the parameters by their gradients
  Upload,          ///< a copy from the host to the device
  Download,        ///< a copy from the device to the host
};
inline constexpr int kPrimitiveKinds = int(Primitive::Download) + 1;

/// The kind's name as logs and benchmarks print it ("gemm", "move_rows").
constexpr std::string_view primitive_name(Primitive kind) {
  switch (kind) {  // no default: a new kind without a name does not compile (-Wswitch)
    case Primitive::Gemm: return "gemm";
    case Primitive::GemmBatched: return "gemm_batched";
    case Primitive::VertexProducts: return "vertex_products";
    case Primitive::Outer: return "outer";
    case Primitive::Fused: return "fused";
    case Primitive::Elementwise: return "elementwise";
    case Primitive::MoveRows: return "move_rows";
    case Primitive::AddRows: return "add_rows";
    case Primitive::Reduce: return "reduce";
    case Primitive::SoftmaxCE: return "softmax_ce";
    case Primitive::Fill: return "fill";
    case Primitive::OptimizerStep: return "optimizer_step";
    case Primitive::Upload: return "upload";
    case Primitive::Download: return "download";
  }
  return "?";
}

/// How many primitives of each kind ran.
struct PrimitiveCounts {
  std::array<int64_t, kPrimitiveKinds> count{};  ///< indexed by Primitive

  int64_t operator[](Primitive kind) const { return count[size_t(kind)]; }  ///< the count of one kind
  void add(Primitive kind, int64_t n = 1) { count[size_t(kind)] += n; }  ///< counts n more of a kind
  /// The count of every kind together.
  int64_t total() const {
    int64_t sum = 0;
    for (int64_t n : count) sum += n;
    return sum;
  }
  /// Adds other's counts, kind by kind.
  PrimitiveCounts& operator+=(const PrimitiveCounts& other) {
    for (size_t i = 0; i < count.size(); ++i) count[i] += other.count[i];
    return *this;
  }
};

}  // namespace vjit
