// How the CPU device runs a step over a task's rows: a fused kernel (one call
// per block of rows, with row tables for operands read through pointers), or
// an unfused node of each kind — gathers, pulls, elementwise ops, reshapes,
// products on the GEMM back ends, softmax cross-entropy, sinks and gradients —
// split across the pool's threads where the rows are many.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "ir/dropout.h"
#include "ir/lane_sums.h"
#include "ir/vector_clones.h"
#include "ir/passes.h"
#include "runtime/batch_rows.h"
#include "runtime/cpu_executor.h"
#include "runtime/cpu_row_blocks.h"
#include "runtime/kernels.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;
using ir::is_copy;  // the op table's execution classes
using ir::is_view;

namespace {

// Softmax scratch of the calling thread (grows to the widest logits, once).
thread_local std::vector<float> t_softmax;

// The max over a row in independent partial results, as ir/lane_sums.h sums.
constexpr int64_t kLanes = ir::kLaneSums;

VJIT_VECTOR_CLONES float row_max(const float* x, int64_t n) {
  float lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = std::max(lanes[j], x[i + j]);
  float max = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) max = std::max(max, x[i]);
  for (int64_t j = 0; j < kLanes; ++j) max = std::max(max, lanes[j]);
  return max;
}

// out = x − shift, over n floats.
VJIT_VECTOR_CLONES void shifted_row(const float* x, float shift, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - shift;
}

// out = x · factor, over n floats.
VJIT_VECTOR_CLONES void scaled_row(const float* x, float factor, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}

// One row of Outer: dst = a·bᵀ ([m, n]), plus the addend x when there is one.
VJIT_VECTOR_CLONES void outer_row(const float* a, int64_t m, const float* b, int64_t n, const float* x, float* dst) {
  for (int64_t i = 0; i < m; ++i) {
    const float ai = a[i];
    float* out = dst + i * n;
    if (x == nullptr) {
      for (int64_t j = 0; j < n; ++j) out[j] = ai * b[j];
    } else {
      const float* xi = x + i * n;
      for (int64_t j = 0; j < n; ++j) out[j] = xi[j] + ai * b[j];
    }
  }
}

// Below this much work (rows × work per row: elements, or multiply-adds)
// waking a second thread costs more than it saves. Measured on a 2-core Zen 3
// (SST Tree-LSTM, hidden 256, batch 64: a task's fused gate kernel is ~58 rows
// × 256): 4096 made inference 8% faster than 16384, which left those kernels on
// one thread; 1024 was no better.
constexpr int64_t kParallelElements = 4096;

// VJIT_PRETRANSPOSE: a weight is read from a transposed copy by products of
// at most kPretransposeMaxRows rows (a task's; from about 2048 rows sgemm
// packs a large product's weight as fast either way, and a language model's
// output layer over every word would pay its 10 MB copy for nothing. Below
// that, x·Wᵀ ran at 72–95 GFLOP/s on one Zen 4 core where x·(Wᵀ copy) ran at
// 107–113, worst where x's rows are padded (pad_wide_rows: 1040 floats for a
// 1024-wide concat): a Tree-LSTM's 512–1242-row tasks at hidden 512 ran at
// 80), with at least kPretransposeMinOutputs columns (a 5-class
// classifier's Wᵀ is a 5-float-wide operand), when the vertex type multiplies
// at least kPretransposeMinRows rows by it in the batch, so that the copy (one
// read and one write of W) is small against the products. Decoding rounds of
// a few dozen rows stay below that.
constexpr int64_t kPretransposeMinRows = 128;
constexpr int64_t kPretransposeMaxRows = 2048;
constexpr int64_t kPretransposeMinOutputs = 16;

// Rows [begin, end) of t = wᵀ (w [n, k], leading dimension ldw; t [k, n]), in
// square tiles so that both the reads and the writes stay within a few lines.
void transpose_rows(const float* w, int64_t ldw, int64_t n, float* t, int64_t begin, int64_t end) {
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < n; i0 += kTile)
    for (int64_t j0 = begin; j0 < end; j0 += kTile)
      for (int64_t i = i0; i < std::min(i0 + kTile, n); ++i)
        for (int64_t j = j0; j < std::min(j0 + kTile, end); ++j) t[j * n + i] = w[i * ldw + j];
}

// Row blocks of a sum over rows whose result must not depend on the thread
// count (VJIT_DETERMINISTIC): a function of the rows and their work alone. One
// block where a second thread does not pay, else 2, 4 or 8 as the work grows
// (at least kFixedBlockWork per block beyond two), never more than the rows.
constexpr int64_t kFixedBlockWork = int64_t(1) << 20;
constexpr int64_t kMaxFixedRowBlocks = 8;

int64_t fixed_row_blocks(int64_t rows, int64_t work_per_row) {
  const int64_t work = rows * work_per_row;
  if (work < kParallelElements || rows < 2) return 1;
  int64_t blocks = 2;
  while (blocks < kMaxFixedRowBlocks && work >= kFixedBlockWork * 2 * blocks) blocks *= 2;
  return std::min(blocks, rows);
}

// y[m] = op(A)[m, k] · x[k] for one vertex, A's rows lda floats apart (op =
// transpose when `trans`: A stored [k, m]). A per-vertex matrix-vector product
// (MV-RNN's A b, the bilinear form's contraction) is too small for a library
// GEMM call to pay: these loops over the task's rows replace one sgemm per row.
VJIT_VECTOR_CLONES void matrix_vector(bool trans, int64_t m, int64_t k, const float* a, int64_t lda, const float* x, float* y) {
  if (trans) {  // y = Σ_j x[j] · row j of A
    std::fill_n(y, m, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float xj = x[j];
      const float* row = a + j * lda;
      for (int64_t i = 0; i < m; ++i) y[i] += xj * row[i];
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) y[i] = ir::lane_dot(a + i * lda, x, k);
}
}  // namespace

// Operands read or written through row pointers (where each child's row lies,
// or its parent's: gather pointers, forwarded parts) go to the kernel as a
// table of their rows' addresses (ir::KernelArgs::row_tables); the others as row
// 0 and ld. One call per block of rows.
void CpuExecutor::launch_fused(Lane& lane, const KernelLaunch& launch) {
  Frame& frame = start(lane, Primitive::Fused);
  ScopedTimer timer(frame.stats->elementwise_s);
  const std::span<const View> operands = launch.operands;
  const size_t n = operands.size(), n_in = launch.inputs, n_out = n - n_in;
  bool pointers = false;
  for (const View& v : operands) pointers = pointers || v.pointers;
  if (pointers) frame.row_addresses.resize(std::max(frame.row_addresses.size(), n * size_t(launch.rows)));
  for_row_blocks(frame, launch.rows, launch.width, [&](int64_t begin, int64_t count, int block) {
    const float** in = frame.inputs.data() + size_t(block) * n_in;
    float** out = frame.outputs.data() + size_t(block) * n_out;
    int64_t* ld = frame.operand_ld.data() + size_t(block) * n;
    const float* const** tables = frame.row_tables.data() + size_t(block) * n;
    for (size_t i = 0; i < n; ++i) {
      const View& v = operands[i];
      ld[i] = v.ld;
      tables[i] = nullptr;
      if (v.pointers) {
        const float** table = frame.row_addresses.data() + i * size_t(launch.rows) + begin;
        for (int64_t r = 0; r < count; ++r) table[r] = row_at(v, begin + r);
        tables[i] = table;
      }
      float* first = v.pointers ? nullptr : v.data + begin * v.ld;
      if (i < n_in) in[i] = first;
      else out[i - n_in] = first;
    }
    ir::KernelArgs args{count, in, ld, out, ld + n_in, launch.kernel->context, pointers ? tables : nullptr};
    launch.kernel->entry(&args);
  });
}

int64_t CpuExecutor::parallel_row_blocks(const Frame& frame, int64_t rows, int64_t work_per_row) const {
  const bool parallel = frame.use_pool && rows * work_per_row >= kParallelElements;
  return parallel ? std::max<int64_t>(1, std::min<int64_t>(pool_.size(), rows)) : 1;
}

// The semantics are the reference interpreter's (ir/interpreter.cpp), one row at a time.
void CpuExecutor::children_block(Lane& lane, const Node& node, int64_t rows, const Shape& in, const View& x,
                                 const View* g_view, std::span<const int> children, const View& out) {
  const bool reduces = node.op == Op::MaxChildren || node.op == Op::MaxChildrenGrad;
  Frame& frame = start(lane, node.op == Op::ChildCount ? Primitive::Fill : reduces ? Primitive::Reduce : Primitive::MoveRows);
  if (node.op == Op::ChildCount) {
    for (int64_t r = 0; r < rows; ++r) out.data[r * out.ld] = float(children[size_t(r)]);
    return;
  }
  for_row_blocks(frame, rows, node.shape.numel(), [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r) {
      const float* src = x.data + r * x.ld;
      float* dst = out.data + r * out.ld;
      switch (node.op) {
        case Op::SliceCols:
          for (int64_t i = 0; i < node.shape.dims[0]; ++i)
            std::memcpy(dst + i * node.shape.dims[1], src + i * in.dims[1] + node.start,
                        size_t(node.shape.dims[1]) * sizeof(float));
          break;
        case Op::PadCols:
          std::fill_n(dst, size_t(node.shape.numel()), 0.0f);
          for (int64_t i = 0; i < in.dims[0]; ++i)
            std::memcpy(dst + i * node.shape.dims[1] + node.start, src + i * in.dims[1], size_t(in.dims[1]) * sizeof(float));
          break;
        case Op::Transpose:
          for (int64_t i = 0; i < in.dims[0]; ++i)
            for (int64_t j = 0; j < in.dims[1]; ++j) dst[j * in.dims[0] + i] = src[i * in.dims[1] + j];
          break;
        default: {  // MaxChildren, MaxChildrenGrad: over the actual children's rows
          const int64_t k_children = std::min<int64_t>(children[size_t(r)], in.dims[0]);
          const int64_t cols = in.dims[1];
          const bool grad = node.op == Op::MaxChildrenGrad;
          const float* g = grad ? g_view->data + r * g_view->ld : nullptr;
          std::fill_n(dst, size_t(node.shape.numel()), 0.0f);
          for (int64_t j = 0; j < cols && k_children > 0; ++j) {
            int64_t best = 0;  // the first row of the largest value
            for (int64_t k = 1; k < k_children; ++k)
              if (src[k * cols + j] > src[best * cols + j]) best = k;
            if (grad) dst[best * cols + j] = g[j];
            else dst[j] = src[best * cols + j];
          }
          break;
        }
      }
    }
  });
}

namespace {
// The rows of a GEMM written through a row table (Gemm::c_rows), made whole
// first: each thread's own, reused.
thread_local std::vector<float> t_gemm_rows;
}  // namespace

// VJIT_PRETRANSPOSE: a weight's product over few enough rows of a type that
// multiplies enough of them reads the weight's transposed copy of the pass.
// A product written through a row table is computed into rows of its own,
// then each row copied where the table says, in the same primitive.
void CpuExecutor::gemm(Lane& lane, const Gemm& g) { run_gemm(start(lane, Primitive::Gemm), g); }

// One after another, each split across the pool as it would be alone: the
// same library calls as unbatched, so no slower.
void CpuExecutor::gemm_batched(Lane& lane, std::span<const Gemm> gemms) {
  Frame& frame = start(lane, Primitive::GemmBatched);
  for (const Gemm& g : gemms) run_gemm(frame, g);
}

void CpuExecutor::run_gemm(Frame& frame, const Gemm& in) {
  Gemm g = in;
  if (in.c_rows) {
    t_gemm_rows.resize(size_t(std::max<int64_t>(g.m * g.n, 1)));
    g.c = t_gemm_rows.data();
    g.ldc = g.n;
  }
  frame.count_gemms(1, g.m, g.n, g.k);
  const float* b = g.b;
  bool tb = g.tb;
  int64_t ldb = g.ldb;
  if (g.weight >= 0 && tb && pretranspose_ && g.n >= kPretransposeMinOutputs && g.m <= kPretransposeMaxRows &&
      g.weight_rows >= kPretransposeMinRows) {
    b = transposed_weight(g.weight, g.b, g.n, g.k, g.ldb, frame);
    tb = false;
    ldb = g.n;
  }
  VJIT_INTERNAL_CHECK(!in.c_rows || g.bias || g.beta == 0.0f, "a GEMM through a row table assigns its rows");
  if (g.bias == nullptr) {
    if (!frame.use_pool) serial_sgemm(gemm_backend_, g.ta, tb, g.m, g.n, g.k, 1.0f, g.a, g.lda, b, ldb, g.beta, g.c, g.ldc, gemm_split_);
    else parallel_sgemm(pool_, gemm_backend_, g.ta, tb, g.m, g.n, g.k, 1.0f, g.a, g.lda, b, ldb, g.beta, g.c, g.ldc, gemm_split_);
  } else if (frame.use_pool) {
    parallel_sgemm_bias(pool_, gemm_backend_, g.ta, tb, g.m, g.n, g.k, g.a, g.lda, b, ldb, g.bias, g.bias_ld, g.c,
                        g.ldc, gemm_split_);
  } else {
    serial_sgemm_bias(gemm_backend_, g.ta, tb, g.m, g.n, g.k, g.a, g.lda, b, ldb, g.bias, g.bias_ld, g.c, g.ldc,
                      gemm_split_);
  }
  if (in.c_rows)
    for (int64_t r = 0; r < g.m; ++r) std::copy_n(g.c + r * g.n, g.n, in.c_rows[r * in.c_parts] + in.c_offset);
}

// Wᵀ [k, n] of the weight w [n, k] (leading dimension ldw) as of this forward
// pass, made at its first use in the pass (WeightTransposes).
const float* CpuExecutor::transposed_weight(int64_t key, const float* w, int64_t n, int64_t k, int64_t ldw,
                                            Frame& frame) {
  std::lock_guard<std::mutex> lock(transposes_.mutex);
  WeightTransposes::Copy& copy = transposes_.copies[key];
  if (copy.pass != transposes_.pass) {
    copy.values.resize(size_t(n * k));
    float* t = copy.values.data();
    for_row_blocks(frame, k, n,
                   [&](int64_t begin, int64_t count, int) { transpose_rows(w, ldw, n, t, begin, begin + count); });
    copy.pass = transposes_.pass;
    ++frame.stats->pretransposed_weights;
    frame.issue(Primitive::MoveRows);
  }
  return copy.values.data();
}

// Σ_r A_r·B_rᵀ (A_r [m, k], B_r [n, k]: the gradient of a weight that
// multiplied per-vertex matrices from the left, MV-RNN's Σ_r dP_r·X_rᵀ) a
// group of G vertices per GEMM: Σ_g A_g·B_gᵀ = A'·B'ᵀ with row i of A' the
// group's rows i joined end to end ([m, G·k]), and B' likewise. As a loop of
// small products (k = 64) each call spends most of its time reading and
// writing the accumulator: on a Zen 4 core, 65 GFLOP/s for 64×128×64 products
// one by one, 77 in groups of 6, copies included. The depth G·k is fixed, so
// the sum's order depends on the rows alone.
namespace {

constexpr int64_t kJoinedReductionDepth = 384;
thread_local std::vector<float> t_joined_a, t_joined_b;

// Rows [0, rows) of `group` per-vertex operands (`k` floats each; row i of
// vertex g at row_of(g, i)), row i of each joined end to end into row i of
// `out` ([rows, group·k]).
template <typename RowOf>
void join_rows(RowOf row_of, int64_t rows, int64_t k, int64_t group, std::vector<float>& out) {
  if (out.size() < size_t(group * rows * k)) out.resize(size_t(group * rows * k));
  for (int64_t g = 0; g < group; ++g)
    for (int64_t i = 0; i < rows; ++i) std::copy_n(row_of(g, i), k, out.data() + (i * group + g) * k);
}

// C += Σ op(A_r)·op(B_r) over `rows` vertices (row i of vertex r's operands,
// as stored, at a_row(r, i) and b_row(r, i)), `group` vertices per GEMM
// (join_rows, on `backend`; a group of more than one only for A·Bᵀ), a
// vertex alone on `vertex_backend`. `contiguous`: each vertex's operands are
// whole matrices (their rows lda and ldb apart), so a group of one multiplies
// them where they lie; else its rows are joined too.
template <typename RowA, typename RowB>
void accumulate_product_rows(GemmBackend backend, GemmBackend vertex_backend, const Node& product,
                             const PerVertexProduct& p, RowA a_row, RowB b_row, int64_t rows, int64_t group,
                             bool contiguous, float* c) {
  for (int64_t r = 0; r < rows; r += group) {
    const int64_t g = std::min(group, rows - r);
    if (g == 1 && contiguous) {
      sgemm(vertex_backend, product.trans_a, product.trans_b, p.m, p.n, p.k, 1.0f, a_row(r, 0), p.lda, b_row(r, 0),
            p.ldb, 1.0f, c, p.n);
      continue;
    }
    join_rows([&](int64_t v, int64_t i) { return a_row(r + v, i); }, p.m, p.k, g, t_joined_a);
    join_rows([&](int64_t v, int64_t i) { return b_row(r + v, i); }, p.n, p.k, g, t_joined_b);
    sgemm(backend, false, true, p.m, p.n, g * p.k, 1.0f, t_joined_a.data(), g * p.k, t_joined_b.data(), g * p.k,
          1.0f, c, p.n);
  }
}

}  // namespace

// Σ_rows A_r·B_r into the gradient, the per-vertex products never stored:
// blocks of rows on the pool's threads, block 0 into the gradient itself and
// the others into their own zeroed scratch, added in block order at the end.
// Deterministic: the blocks depend on the rows alone, so the sum's order does
// not depend on the thread count (on one thread the blocks run in turn).
void CpuExecutor::accumulate_vertex_products(Lane& lane, int64_t rows, const Node& product, const Shape& sa,
                                             const Shape& sb, const View& a, const View& b, float* grad) {
  Frame& frame = start(lane, Primitive::VertexProducts);
  const PerVertexProduct p = per_vertex_product(product, sa, sb);
  const int64_t size = p.m * p.n;
  frame.count_gemms(rows, p.m, p.n, p.k);
  const int64_t work_per_row = p.m * p.n * p.k;
  const int64_t blocks = deterministic_ ? fixed_row_blocks(rows, work_per_row)
                                        : parallel_row_blocks(frame, rows, work_per_row);
  if (frame.scratch.size() < size_t(blocks)) frame.scratch.resize(size_t(blocks));
  for (int64_t block = 1; block < blocks; ++block)
    if (int64_t(frame.scratch[size_t(block)].size()) < size) frame.scratch[size_t(block)].resize(size_t(size));
  const bool joined = !product.trans_a && product.trans_b && sa.rank == 2 && sb.rank == 2;
  const int64_t group = joined ? std::max<int64_t>(1, kJoinedReductionDepth / p.k) : 1;
  const int64_t a_rows = product.trans_a ? p.k : p.m, b_rows = product.trans_b ? p.n : p.k;  // as stored
  VJIT_INTERNAL_CHECK(joined || (a.parts <= 1 && b.parts <= 1), "a weight gradient reads an operand in parts");
  run_row_blocks(frame, rows, blocks, [&](int64_t begin, int64_t count, int block) {
    float* c = grad;
    if (block > 0) {
      c = frame.scratch[size_t(block)].data();
      std::fill_n(c, size_t(size), 0.0f);
    }
    auto a_row = [&](int64_t r, int64_t i) { return stored_row(a, begin + r, i, a_rows, p.lda); };
    auto b_row = [&](int64_t r, int64_t i) { return stored_row(b, begin + r, i, b_rows, p.ldb); };
    accumulate_product_rows(gemm_backend_, vertex_gemm_backend_, product, p, a_row, b_row, count, group,
                            a.parts <= 1 && b.parts <= 1, c);
  });
  for (int64_t block = 1; block < blocks; ++block) add_row(frame.scratch[size_t(block)].data(), grad, size);
}

// Per vertex: a matrix-vector product in loops (too small for a library call
// to pay), a product of matrices on the vertex GEMM back end (B read in parts
// where it is a Concat read through row pointers: the inner dimension splits,
// Σ_q op(A)[:, k_q]·B_q, each part where it lies), or rows of one plus u·vᵀ,
// the rank-one update following while the rows are in cache. The rows'
// products are independent: blocks of rows run on the pool's threads.
void CpuExecutor::vertex_products(Lane& lane, int64_t rows, const VertexProducts& v) {
  Frame& frame = start(lane, Primitive::VertexProducts);
  const Node& node = *v.node;
  const Shape &sa = v.a_shape, &sb = v.b_shape;
  const View &a = v.a, &b = v.b, &out = v.out;
  const PerVertexProduct p = per_vertex_product(node, sa, sb);
  const int64_t a_rows = node.trans_a ? p.k : p.m;  // as stored
  if (v.u) {
    const int64_t first = v.slice_start / p.n, m = v.slice_width / p.n;
    const int64_t a_offset = node.trans_a ? first : first * p.lda;  // row `first` of op(A)
    frame.count_gemms(rows, m, p.n, p.k);
    for_row_blocks(frame, rows, m * p.n * p.k, [&](int64_t begin, int64_t count, int) {
      for (int64_t r = begin; r < begin + count; ++r) {
        float* y = row_at(out, r);
        sgemm(vertex_gemm_backend_, node.trans_a, node.trans_b, m, p.n, p.k, 1.0f, a.data + r * a.ld + a_offset,
              p.lda, b.data + r * b.ld, p.ldb, 0.0f, y, p.n);
        outer_row(v.u->data + r * v.u->ld, m, v.v->data + r * v.v->ld, p.n, y, y);
      }
    });
    return;
  }
  frame.count_gemms(rows, p.m, p.n, p.k);
  if (sb.rank == 1 || sa.rank == 1) {  // matrix times vector, or vector times matrix
    for_row_blocks(frame, rows, p.m * p.n * p.k, [&](int64_t begin, int64_t count, int) {
      for (int64_t r = begin; r < begin + count; ++r) {
        const float* pa = stored_row(a, r, 0, sa.rank == 2 ? a_rows : 1, p.lda);
        const float* pb = stored_row(b, r, 0, sb.rank == 2 ? sb.dims[0] : 1, p.ldb);
        float* y = row_at(out, r);
        if (sb.rank == 1) matrix_vector(node.trans_a, p.m, p.k, pa, p.lda, pb, y);
        else matrix_vector(!node.trans_b, p.n, p.k, pb, p.ldb, pa, y);  // yᵀ = op(B)ᵀ a
      }
    });
    return;
  }
  const int64_t parts = std::max<int64_t>(1, b.parts), k_part = p.k / parts;
  for_row_blocks(frame, rows, p.m * p.n * p.k, [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r)
      for (int64_t q = 0; q < parts; ++q)
        sgemm(vertex_gemm_backend_, node.trans_a, node.trans_b, p.m, p.n, k_part, 1.0f,
              stored_row(a, r, 0, a_rows, p.lda) + (node.trans_a ? q * k_part * p.lda : q * k_part), p.lda,
              stored_row(b, r, q * k_part, sb.dims[0], p.ldb), p.ldb, q == 0 ? 0.0f : 1.0f, row_at(out, r), p.n);
  });
}

// --- primitives (runtime/device.h) ---

CpuExecutor::Frame& CpuExecutor::start(Lane& lane, Primitive kind) {
  Frame& frame = static_cast<Frame&>(lane);
  ++frame.stats->kernels;
  frame.issue(kind);
  return frame;
}

void CpuExecutor::move_rows(Lane& lane, std::span<const RowMove> moves, int64_t width, RowMode mode,
                            const uint8_t* assign) {
  Frame& frame = start(lane, mode == RowMode::Add ? Primitive::AddRows : Primitive::MoveRows);
  const int64_t count = int64_t(moves.size());
  if (mode == RowMode::Copy) {  // each row written once: blocks of rows on the pool's threads
    for_row_blocks(frame, count, width, [&](int64_t begin, int64_t n, int) {
      for (int64_t i = begin; i < begin + n; ++i)
        std::memcpy(moves[size_t(i)].dst, moves[size_t(i)].src, size_t(width) * sizeof(float));
    });
    return;
  }
  // Moves into one row: blocks of columns in parallel, never blocks of moves,
  // so that no two threads write one float and each float is summed in the
  // same order as on one thread. A row assigned once was not zeroed.
  for_column_blocks(frame, count, width, [&](int64_t first, int64_t n) {
    for (size_t i = 0; i < moves.size(); ++i) {
      if (assign && assign[i]) std::copy_n(moves[i].src + first, n, moves[i].dst + first);
      else add_row(moves[i].src + first, moves[i].dst + first, n);
    }
  });
}

void CpuExecutor::sum_rows(Lane& lane, int64_t rows, int64_t width, int64_t row_width,
                           std::span<const float* const> sources, std::span<const int> begin, bool stack,
                           const uint8_t* keep, const View& out) {
  start(lane, stack ? Primitive::MoveRows : Primitive::AddRows);
  for (int64_t r = 0; r < rows; ++r) {
    if (keep && !keep[r]) continue;
    float* dst = out.data + r * out.ld;
    std::fill_n(dst, size_t(row_width), 0.0f);
    for (int i = begin[size_t(r)]; i < begin[size_t(r) + 1]; ++i)
      add_row(sources[size_t(i)], stack ? dst + int64_t(i - begin[size_t(r)]) * width : dst, width);
  }
}

void CpuExecutor::upload_rows(Lane& lane, std::span<const float* const> host_rows, int64_t width, const View& out) {
  Frame& frame = start(lane, Primitive::MoveRows);
  for_row_blocks(frame, int64_t(host_rows.size()), width, [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r)
      std::memcpy(out.data + r * out.ld, host_rows[size_t(r)], size_t(width) * sizeof(float));
  });
}

void CpuExecutor::copy_rows(Lane& lane, int64_t rows, std::span<const ColumnCopy> copies) {
  Frame& frame = start(lane, Primitive::MoveRows);  // one primitive for all the parts it copies
  for (const ColumnCopy& c : copies)
    for_row_blocks(frame, rows, c.width, [&](int64_t begin, int64_t count, int) {
      for (int64_t r = begin; r < begin + count; ++r) {
        float* dst = c.dst.data + r * c.dst.ld;
        if (c.src.data) std::memcpy(dst, c.src.data + r * c.src.ld, size_t(c.width) * sizeof(float));
        else std::fill_n(dst, size_t(c.width), 0.0f);
      }
    });
}

void CpuExecutor::fill_rows(Lane& lane, int64_t rows, int64_t width, float value, const View& out) {
  start(lane, Primitive::Fill);
  if (out.pointers == nullptr) runtime::fill_rows(rows, width, value, out.data, out.ld);
  else
    for (int64_t r = 0; r < rows; ++r) std::fill_n(row_at(out, r), size_t(width), value);
}

void CpuExecutor::broadcast_rows(Lane& lane, int64_t rows, int64_t width, const View& src, int64_t period,
                                 const View& out) {
  Frame& frame = start(lane, Primitive::MoveRows);
  for_row_blocks(frame, rows, width, [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r) {
      const float* x = src.data + r * src.ld;
      float* dst = out.data + r * out.ld;
      if (period == 0) std::fill_n(dst, size_t(width), x[0]);
      else
        for (int64_t i = 0; i < width; i += period) std::memcpy(dst + i, x, size_t(period) * sizeof(float));
    }
  });
}

void CpuExecutor::sum_columns_mod(Lane& lane, int64_t rows, int64_t width, int64_t in_width, const View& src,
                                  const View& out) {
  Frame& frame = start(lane, Primitive::Reduce);
  for_row_blocks(frame, rows, std::max(width, in_width), [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r) {
      const float* x = src.data + r * src.ld;
      float* dst = out.data + r * out.ld;
      if (width == 1) {
        float total = 0.0f;
        for (int64_t i = 0; i < in_width; ++i) total += x[i];
        dst[0] = total;
        continue;
      }
      std::fill_n(dst, size_t(width), 0.0f);  // row by row, in order: the same sums as element by element
      for (int64_t i = 0; i < in_width; i += width) add_row(x + i, dst, width);
    }
  });
}

void CpuExecutor::elementwise(Lane& lane, const Node& node, int64_t rows, int64_t width, Operand a, Operand b,
                              const View& out) {
  Frame& frame = start(lane, Primitive::Elementwise);
  const bool unary = ir::op_kind(node.op) == ir::OpKind::Unary;
  // Written through row pointers (gradient_pointers): a row at a time.
  const bool by_row = out.pointers != nullptr;
  for_row_blocks(frame, rows, width, [&](int64_t begin, int64_t count, int) {
    for (int64_t first = begin, end = begin + count; first < end; first += by_row ? 1 : count) {
      Operand a_block = a, b_block = b;
      a_block.data += first * a.ld;
      b_block.data += first * b.ld;
      const int64_t n = by_row ? 1 : count;
      float* y = row_at(out, first);
      if (unary) unary_rows(node, n, width, a_block, y, out.ld);
      else binary_rows(node.op, n, width, a_block, b_block, y, out.ld);
    }
  });
}

void CpuExecutor::dropout(Lane& lane, int64_t rows, int64_t width, const View& x, const DropoutMask& mask,
                          const View& out) {
  start(lane, Primitive::Elementwise);
  const float keep_scale = mask.training ? float(1.0 / (1.0 - mask.rate)) : 1.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const int sample = mask.sample_vertex[size_t(2 * r)], vertex = mask.sample_vertex[size_t(2 * r + 1)];
    for (int64_t i = 0; i < width; ++i) {
      const bool keep = !mask.training || ir::dropout_keeps(mask.seed, sample, vertex, mask.key, i, mask.rate);
      out.data[r * out.ld + i] = keep ? x.data[r * x.ld + i] * keep_scale : 0.0f;
    }
  }
}

// out = u·vᵀ per row, or with `addend` x + u·vᵀ: the rank-one update an add
// takes in its epilogue (ir::fold_bias_adds; MV-RNN's matrix gradients), the
// outer product never written and x read once.
void CpuExecutor::outer(Lane& lane, int64_t rows, int64_t m, int64_t n, const View& a, const View& b,
                        const View* addend, const View& out) {
  Frame& frame = start(lane, Primitive::Outer);
  for_row_blocks(frame, rows, m * n, [&](int64_t begin, int64_t count, int) {
    for (int64_t r = begin; r < begin + count; ++r)
      outer_row(a.data + r * a.ld, m, b.data + r * b.ld, n, addend ? addend->data + r * addend->ld : nullptr,
                out.data + r * out.ld);
  });
}

// The row op's CPU loop (ir/row_op.h) over blocks of rows.
void CpuExecutor::row_op(Lane& lane, const ir::RowOp& op, int64_t rows, std::span<const View> in,
                         std::span<const int64_t> in_width, int64_t width, const View& out) {
  Frame& frame = start(lane, op.primitive);
  for_row_blocks(frame, rows, std::max(in_width[0], width), [&](int64_t begin, int64_t count, int) {
    ir::RowBlock block;
    block.rows = count;
    for (size_t k = 0; k < in.size(); ++k) {
      block.in[k] = in[k].data + begin * in[k].ld;
      block.in_ld[k] = in[k].ld;
      block.in_width[k] = in_width[k];
    }
    block.out = out.data + begin * out.ld;
    block.out_ld = out.ld;
    block.out_width = width;
    op.cpu_rows(block);
  });
}

void CpuExecutor::softmax_ce(Lane& lane, int64_t rows, int64_t classes, const View& logits,
                             std::span<const int> labels, const View* upstream, const View& out) {
  Frame& frame = start(lane, Primitive::SoftmaxCE);
  for_row_blocks(frame, rows, classes, [&](int64_t begin, int64_t count, int) {
    std::vector<float>& p = t_softmax;  // exp(x − max), then the softmax
    p.resize(size_t(classes));
    for (int64_t r = begin; r < begin + count; ++r) {
      const int label = labels[size_t(r)];
      const float* x = logits.data + r * logits.ld;
      float* dst = out.data + r * out.ld;
      float max = row_max(x, classes);
      shifted_row(x, max, p.data(), classes);
      if (plan_.exp.entry) plan_.exp.entry(p.data(), p.data(), classes);
      else for (float& v : p) v = std::exp(v);
      float total = ir::lane_sum(p.data(), classes);
      if (!upstream) {
        dst[0] = label < 0 ? 0.0f : std::log(total) + max - x[label];
        continue;
      }
      float g = label < 0 ? 0.0f : upstream->data[r * upstream->ld];
      const float scale = g / total;
      scaled_row(p.data(), scale, dst, classes);
      if (label >= 0) dst[label] -= g;
    }
  });
}

NonFinite CpuExecutor::find_non_finite(Lane&, int64_t rows, int64_t width, const View& x) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data + r * x.ld;
    const int64_t k = first_non_finite(row, width);
    if (k >= 0) return {r, k, row[k]};
  }
  return {};
}

void CpuExecutor::add_objective(Lane& lane, int64_t rows, const View& x) {
  start(lane, Primitive::Reduce);
  for (int64_t r = 0; r < rows; ++r) result_->objective += double(x.data[r * x.ld]);
}

}  // namespace vjit::runtime
