#pragma once
// Row ops: ops whose value at a vertex is a function of its operands' whole
// values at that vertex — no graph, no parameter, no other vertex (SymOuter,
// LayerNorm and their gradients; the op table gives them kind Row). Each is
// defined in one unit, ir/op_<name>.cpp, by a RowOp: the shapes it accepts and
// the shape it makes, its semantics, its gradient, its FLOP count and how each
// device runs it. The Builder, verify, the reference interpreter, autodiff,
// the FLOP count, the CPU executor and the CUDA source generator read the
// definition through row_op(op) and name no row op themselves.
//
// The two semantics are independent on purpose: `reference` is the plain
// loop the interpreter runs (in double and in float), `cpu_rows` the device's
// float loop over many rows; the engine-equals-reference tests compare them.
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "ir/ops.h"
#include "vjit/primitive.h"

namespace vjit::ir {

inline constexpr int kMaxRowOperands = 2;

/// One vertex's operands and result, for the reference semantics.
template <typename T>
struct RowValues {
  std::span<const T> in[kMaxRowOperands];  ///< operand k's value (arity of them)
  std::span<T> out;                        ///< the result, to be written whole
};

/// Rows of floats for a device: row r of operand k at in[k] + r·in_ld[k]
/// (in_width[k] floats), of the result at out + r·out_ld (out_width floats).
struct RowBlock {
  int64_t rows = 0;
  const float* in[kMaxRowOperands] = {};
  int64_t in_ld[kMaxRowOperands] = {};
  int64_t in_width[kMaxRowOperands] = {};
  float* out = nullptr;
  int64_t out_ld = 0;
  int64_t out_width = 0;
};

/// What autodiff lends a gradient rule: ∂F as it is being written.
class GradientEmitter {
 public:
  /// Forward value `forward_id` read inside ∂F.
  virtual ValueId forward(ValueId forward_id) = 0;
  /// Appends a node to ∂F; the value it defines.
  virtual ValueId emit(Node node) = 0;
  /// Adds `gradient` (a ∂F value) to the gradient of forward value `forward_id`.
  virtual void add_gradient(ValueId forward_id, ValueId gradient) = 0;

 protected:
  ~GradientEmitter() = default;
};

/// How the CUDA kernel of a row op splits its work (codegen/cuda_source.h).
enum class CudaRowForm : uint8_t {
  Element,  ///< one thread per result element: `cuda` defines `__device__ float <kernel>_element(...)`
  Row,      ///< one thread per row: `cuda` defines `__device__ void <kernel>_row(...)`
};

/// The definition of one row op.
struct RowOp {
  /// Whether the op takes operands of these shapes (the Builder reports
  /// `expects` when not; verify checks it).
  bool (*accepts)(std::span<const Shape> operands);
  const char* expects;
  /// The shape of its value, for operands it accepts.
  Shape (*result_shape)(std::span<const Shape> operands);
  /// Its semantics at one vertex: what the reference interpreter computes.
  void (*reference_double)(const RowValues<double>& values);
  void (*reference_float)(const RowValues<float>& values);
  /// Writes its gradient into ∂F: `g` is the gradient of node `id` of F.
  void (*gradient)(GradientEmitter& df, const Function& forward, ValueId id, ValueId g);
  /// Useful floating-point operations at one vertex.
  int64_t (*flops)(std::span<const Shape> operands, const Shape& result);
  /// The primitive a device's run of it counts as.
  Primitive primitive;
  /// The CPU device: the op over a block of rows.
  void (*cpu_rows)(const RowBlock& rows);
  /// The CUDA device: the kernel's name, its form and the source of its device
  /// function (operand k as `const float* xk, long long nk`, its width), from
  /// which codegen/cuda_source.cpp makes the kernel.
  const char* cuda_kernel;
  CudaRowForm cuda_form;
  std::string_view cuda;
};

// VJIT_IF_ROW_<kind>(text): the text for kind Row, nothing for the others.
#define VJIT_IF_ROW_Row(...) __VA_ARGS__
#define VJIT_IF_ROW_Source(...)
#define VJIT_IF_ROW_Unary(...)
#define VJIT_IF_ROW_Binary(...)
#define VJIT_IF_ROW_Shape(...)
#define VJIT_IF_ROW_Reduce(...)
#define VJIT_IF_ROW_Contract(...)
#define VJIT_IF_ROW_Loss(...)
#define VJIT_IF_ROW_Sink(...)

// Each row op's definition, k<Name>Row, in its unit ir/op_<name>.cpp.
#define VJIT_X(name, kind, ...) VJIT_IF_ROW_##kind(extern const RowOp k##name##Row;)
VJIT_IR_OPS(VJIT_X)
#undef VJIT_X

/// The definition of a row op (kind Row); nullptr for any other op.
const RowOp* row_op(Op op);

/// `reference_double` or `reference_float`, by T.
template <typename T>
void row_reference(const RowOp& op, const RowValues<T>& values) {
  if constexpr (std::is_same_v<T, double>) op.reference_double(values);
  else op.reference_float(values);
}

}  // namespace vjit::ir
