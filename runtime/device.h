#pragma once
// The primitives a device runs. The plan runner (runtime/runner.h) decides
// what each step means; runtime/steps.cpp turns the steps of every node kind
// into calls of these, each over the rows of a step. A device (the CPU's, the
// CUDA one) implements them and records each call it runs as one primitive
// (vjit/primitive.h) on the lane that issued it.
//
// Addresses in Views and row moves are the device's (float* whatever its
// address space); the index lists a primitive takes (labels, which sample a
// row is, host rows to upload) are host memory the device reads or copies as
// it needs before the call returns.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ir/row_op.h"
#include "runtime/executor.h"
#include "runtime/kernels.h"

namespace vjit::runtime {

// Row 0 of a value for the rows being run, in the device's memory (floats,
// whatever the device's address space); ld 0 for a uniform value.
struct View {
  float* data = nullptr;
  int64_t ld = 0;
  // A value read through a pointer per row (row_pointer_parts): row r's value
  // is `parts` equal parts, part q at pointers[r·parts + q] + offset, where it
  // lies (a child's scatter row); data is null then. In the backward, a
  // gradient written through one (GradientPointers).
  float** pointers = nullptr;
  int64_t parts = 0;
  int64_t offset = 0;
};

// Where row r of a value is written.
inline float* row_at(const View& v, int64_t r) {
  return v.pointers ? v.pointers[r * v.parts] + v.offset : v.data + r * v.ld;
}

// Row moves: dst = src (Copy) or dst += src (Add), `width` floats each.
struct RowMove {
  float* dst = nullptr;
  const float* src = nullptr;
};
enum class RowMode : uint8_t { Copy, Add };

// `width` columns of every row copied from one view into another.
struct ColumnCopy {
  View src, dst;
  int64_t width = 0;
};

// C = op(A)·op(B) + beta·C, row-major; with `bias`, row r of C = its product
// + row r of the bias, bias_ld floats apart (0: one bias row for every row;
// the bias may be C itself, bias_ld = ldc: C += the product); beta unused.
struct Gemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  const float* bias = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  // B is a weight that stays as it is through the pass, named by `weight`
  // (-1: not one) and multiplying `weight_rows` rows of its vertex type in the
  // batch: a device may read it from a transposed copy it keeps for the pass.
  int64_t weight = -1, weight_rows = 0;
  int64_t bias_ld = 0;
  // With a row table (c null): row r of C written at c_rows[r·c_parts] +
  // c_offset (a gradient the children's rows take where they lie,
  // GradientPointers), the product computed as if ldc were n.
  float** c_rows = nullptr;
  int64_t c_parts = 1, c_offset = 0;
};

// One sequence of issued work: the views it binds, its counters and the
// primitives it issues (where they come from and, with VJIT_LOG=primitives,
// their list).
struct Lane {
  std::vector<View> views[2];  // [pass][value id] of the rows being run
  ExecStats* stats = nullptr;
  PrimitiveRecorder primitives;
  // The runner's scratch for the index lists of the steps it issues here.
  std::vector<RowMove> moves;
  std::vector<ColumnCopy> copies;
  std::vector<View> operands;
  std::vector<Gemm> gemms;
  std::vector<const float*> sources;
  std::vector<int> ints;
  std::vector<uint8_t> keep;
  // The shape of the last product a GEMM primitive ran (per-vertex products:
  // each one's), for the trace (VJIT_TRACE).
  struct { int64_t m = 0, n = 0, k = 0; } last_gemm;
  // Counts `calls` products of m×n, inner k, in the stats and the trace.
  void count_gemms(int64_t calls, int64_t m, int64_t n, int64_t k) {
    stats->gemm_calls += calls;
    stats->gemm_flops += 2.0 * double(m) * double(n) * double(k) * double(calls);
    last_gemm = {m, n, k};
  }
  void issue(Primitive kind) { primitives.issue(stats->primitives, kind); }
  void at(Pass pass, int type, int task, int64_t rows, std::string_view what) {
    primitives.at(pass, type, task, rows, what);
  }
};

// One launch of a fused step's kernel over the rows: its operands, inputs
// first, each a view (a row table where it has pointers: the kernel reads
// and writes those rows where they lie).
struct KernelLaunch {
  const Kernel* kernel = nullptr;
  Pass pass = Pass::Forward;
  int type = 0;
  size_t index = 0;  // which fused step of the type's function plan
  int64_t rows = 0, width = 0;
  std::span<const View> operands;
  size_t inputs = 0;
};

// Per row r, the per-vertex product `node` C_r = op(A_r)·op(B_r) of operands
// shaped `a_shape` and `b_shape` (runtime/products.h). With `u` and `v`, the
// epilogue of an add the plan folded both into: out_r = the floats
// [slice_start, slice_start + slice_width) of C_r + u_r·v_rᵀ.
struct VertexProducts {
  const ir::Node* node = nullptr;
  Shape a_shape, b_shape;
  View a, b, out;
  const View* u = nullptr;
  const View* v = nullptr;
  int64_t slice_start = 0, slice_width = 0;
};

// The first NaN or ±Inf of some rows (row -1: none).
struct NonFinite {
  int64_t row = -1, element = 0;
  float value = 0.0f;
};

// Per-vertex indices a dropout mask is a function of (ir/dropout.h).
struct DropoutMask {
  std::span<const int> sample_vertex;  // per row: the sample (global index) and the vertex in it
  uint64_t seed = 0;
  int key = 0;
  double rate = 0;
  bool training = false;
};

class Device {
 public:
  virtual ~Device() = default;

  // Returns once the primitives the lane issued have run, so that the time
  // a step took is the device's (VJIT_PROFILE). The CPU's have run when they
  // return.
  virtual void finish(Lane&) {}

  virtual void launch_fused(Lane& lane, const KernelLaunch& launch) = 0;
  // Each move in turn; the moves of one call into one row are applied in
  // list order (Add sums in that order). A Copy call's destinations are
  // distinct. With `assign` (Add; null: none), a move flagged there is its
  // row's one contribution: it copies or adds, as the device zeroed the row
  // (zero_gradient_rows).
  virtual void move_rows(Lane& lane, std::span<const RowMove> moves, int64_t width, RowMode mode,
                         const uint8_t* assign) = 0;
  // Zeroes `rows` rows of `ld` floats at `data`, except that a row whose
  // `assigned` is set (null: none) may keep its first `width` floats: a
  // gradient row that one move will assign.
  virtual void zero_gradient_rows(Lane& lane, int64_t rows, int64_t ld, int64_t width, const uint8_t* assigned,
                                  float* data) = 0;
  // Row r of `out` (`row_width` floats) = the sum of its sources, each
  // `width` floats, sources[begin[r], begin[r+1]) added in order (`stack`:
  // the sources side by side, zeros after them). Rows whose `keep` is 0 (null:
  // none) are left as they are.
  virtual void sum_rows(Lane& lane, int64_t rows, int64_t width, int64_t row_width,
                        std::span<const float* const> sources, std::span<const int> begin, bool stack,
                        const uint8_t* keep, const View& out) = 0;
  // Rows of host memory (one address per row) copied to the rows of `out`.
  virtual void upload_rows(Lane& lane, std::span<const float* const> host_rows, int64_t width, const View& out) = 0;
  // For each copy, rows × its width floats from its src to its dst (strided
  // views): a Concat's parts, a Pad's one.
  virtual void copy_rows(Lane& lane, int64_t rows, std::span<const ColumnCopy> copies) = 0;
  // `width` floats of each row of `out` set to `value`; the CPU also writes
  // through a row table (out.pointers: the rows a step left scattered).
  virtual void fill_rows(Lane& lane, int64_t rows, int64_t width, float value, const View& out) = 0;
  // Element i of row r of `out` ([rows, width]) = src element i mod `period`
  // of row r (period 0: element 0).
  virtual void broadcast_rows(Lane& lane, int64_t rows, int64_t width, const View& src, int64_t period,
                              const View& out) = 0;
  // Element i of row r of `out` ([rows, width]) = Σ src_r[j] over j ≡ i mod
  // width, j < in_width, in order of j.
  virtual void sum_columns_mod(Lane& lane, int64_t rows, int64_t width, int64_t in_width, const View& src,
                               const View& out) = 0;
  // `node`'s unary or binary op over the rows (kernels.h's broadcasting).
  virtual void elementwise(Lane& lane, const ir::Node& node, int64_t rows, int64_t width, Operand a, Operand b,
                           const View& out) = 0;
  virtual void dropout(Lane& lane, int64_t rows, int64_t width, const View& x, const DropoutMask& mask,
                       const View& out) = 0;
  // Per row: out = a·bᵀ (a [m], b [n]), plus `addend` when given (the
  // epilogue of an add the plan folded the outer product into).
  virtual void outer(Lane& lane, int64_t rows, int64_t m, int64_t n, const View& a, const View& b,
                     const View* addend, const View& out) = 0;
  // Per row: the row op `op` (ir/row_op.h) of operand k's rows in[k]
  // (in_width[k] floats each) into `out` (`width` floats): the CPU runs its
  // loop, CUDA the kernel made around its device function.
  virtual void row_op(Lane& lane, const ir::RowOp& op, int64_t rows, std::span<const View> in,
                      std::span<const int64_t> in_width, int64_t width, const View& out) = 0;
  // Per row: −log softmax(logits)[label] (0 for label −1), or with `upstream`
  // the gradient by the logits, scaled by upstream's element 0.
  virtual void softmax_ce(Lane& lane, int64_t rows, int64_t classes, const View& logits, std::span<const int> labels,
                          const View* upstream, const View& out) = 0;
  // The objective += Σ_r element 0 of row r, summed in row order (in double).
  virtual void add_objective(Lane& lane, int64_t rows, const View& x) = 0;
  // VJIT_CHECK_FINITE: the first non-finite float of the rows ([rows, width]), row by row.
  virtual NonFinite find_non_finite(Lane& lane, int64_t rows, int64_t width, const View& x) = 0;

  virtual void gemm(Lane& lane, const Gemm& gemm) = 0;
  // GEMMs of one shape over the same rows, none reading another's output
  // (FunctionPlan's batched steps), issued as one primitive where the device
  // can.
  virtual void gemm_batched(Lane& lane, std::span<const Gemm> gemms) = 0;
  virtual void vertex_products(Lane& lane, int64_t rows, const VertexProducts& products) = 0;
  // grad += Σ_r op(A_r)·op(B_r), the per-vertex products never stored; the
  // order of the sum depends on the rows alone.
  virtual void accumulate_vertex_products(Lane& lane, int64_t rows, const ir::Node& product, const Shape& a_shape,
                                          const Shape& b_shape, const View& a, const View& b, float* grad) = 0;
  // dst += Σ_r row r of x ([rows, width]), summed in an order that depends on
  // the rows alone (pairwise on the CPU: rounding grows with log(rows)).
  virtual void reduce_rows(Lane& lane, int64_t rows, int64_t width, const View& x, float* dst) = 0;
  // `node`, an op of the children block (SliceCols, PadCols, Transpose,
  // ChildCount, MaxChildren, MaxChildrenGrad; ir/interpreter.cpp's meaning) over
  // the rows, whose variadic children number `children`; x shaped `in`, g
  // MaxChildrenGrad's upstream gradient.
  virtual void children_block(Lane& lane, const ir::Node& node, int64_t rows, const Shape& in, const View& x,
                              const View* g, std::span<const int> children, const View& out) = 0;
};

}  // namespace vjit::runtime
