// What the product steps mean, on every device: a uniform weight times
// per-vertex vectors is one GEMM over the rows; a per-vertex matrix times a
// weight is GEMMs over the rows of every vertex; two per-vertex operands are
// one small product per vertex; a weight's gradient is a GEMM or a reduction
// over the rows, accumulating into the gradient; the add a product was folded
// into is the product's epilogue (ir::fold_bias_adds).
#include "runtime/products.h"
#include "runtime/runner.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

namespace {

// A product's operands: their shapes as stored (a block in child rows is one
// row per child) and their views.
struct Operands {
  Shape sa, sb;
  const View &a, &b;
};
Operands operands_of(const FunctionPlan& plan, const std::vector<View>& views, const Node& node) {
  return {plan.stored_shape(node.args[0]), plan.stored_shape(node.args[1]), views[size_t(node.args[0])],
          views[size_t(node.args[1])]};
}

}  // namespace

// With `bias` (a row of the product's width, ld 0, or a per-vertex value of
// the product's shape), out = product + bias (the GEMM epilogue); only a
// product of a uniform weight and per-vertex vectors (one GEMM) or, with a
// bias row, of a children block and a weight takes one.
void Runner::matmul(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane, const View* bias) {
  Gemm gemm;
  if (weight_gemm(pass, rows, node, out, bias, lane, gemm)) {
    device_.gemm(lane, gemm);
    return;
  }
  const auto [sa, sb, a, b] = operands_of(function_plan(pass, rows.type), lane.views[int(pass)], node);
  const bool row_pointers = a.pointers != nullptr || b.pointers != nullptr;  // never a weight's GEMM over rows
  if (!row_pointers && matrix_times_weight(rows, node, sa, sb, a, b, out, lane, bias)) return;
  VJIT_INTERNAL_CHECK(bias == nullptr, "a per-vertex product has no bias epilogue");
  device_.vertex_products(lane, rows.count, {&node, sa, sb, a, b, out});
}

// Y = X·op(W) over the rows (one GEMM) when `node` is every vertex times one
// uniform weight W, read where its rows lie; false otherwise. W is named for
// the device's copies of it: by parameter, or by (pass, type, value) for a
// uniform value that is not one (stacked weights, which move with the arena):
// the same keys every batch.
bool Runner::weight_gemm(Pass pass, const Rows& rows, const Node& node, const View& out, const View* bias,
                         Lane& lane, Gemm& gemm) {
  const FunctionPlan& plan = function_plan(pass, rows.type);
  const ir::Function& f = *plan.function;
  const auto [sa, sb, a, b] = operands_of(plan, lane.views[int(pass)], node);
  if (a.pointers != nullptr || b.pointers != nullptr) return false;  // never a weight's GEMM over rows
  const bool left = a.ld == 0 && sb.rank == 1;                          // y = op(W) x
  if (!left && !(b.ld == 0 && sa.rank == 1)) return false;             // else y = xᵀ op(W)
  const ValueId weight = node.args[left ? 0 : 1];
  const RowGemm g = left ? row_gemm(node, sa, true) : row_gemm(node, sb, false);
  const View& x = left ? b : a;
  const Node& w = f[weight];
  const int64_t key = w.op == Op::Param ? int64_t(w.param)
                                        : (int64_t(1) << 62) | (int64_t(pass) << 56) |
                                              (int64_t(rows.type) << 28) | int64_t(weight);
  VJIT_INTERNAL_CHECK(bias == nullptr || bias->pointers == nullptr, "a GEMM's bias is read through no row table");
  gemm = {false, g.trans_w, rows.count, g.n, g.k, x.data, x.ld, (left ? a : b).data, g.ldw, 0.0f,
          bias ? bias->data : nullptr, out.data, out.pointers ? g.n : out.ld};
  gemm.bias_ld = bias ? bias->ld : 0;
  gemm.c_rows = out.pointers;  // a gradient written through the children's row table
  gemm.c_parts = out.parts;
  gemm.c_offset = out.offset;
  gemm.weight = key;
  gemm.weight_rows = batch_.layout->type_rows[size_t(rows.type)];
  return true;
}

// Steps the plan batched (Step::batched): row GEMMs of one shape, each a
// weight's product or the add it is folded into; one primitive for all,
// unless one of them is no weight's GEMM over these rows (a gather read
// through row pointers), when each runs as a step of its own.
void Runner::run_gemm_batch(Pass pass, const Rows& rows, std::span<const Step> steps, Lane& lane) {
  const FunctionPlan& fp = function_plan(pass, rows.type);
  const ir::Function& f = *fp.function;
  const std::vector<View>& views = lane.views[int(pass)];
  std::vector<Gemm>& gemms = lane.gemms;
  gemms.clear();
  for (const Step& step : steps) {
    const Node& n = f[step.node];
    const View* bias = nullptr;
    const Node* product = &n;
    if (n.op == Op::Add) {  // the epilogue of the product folded into it
      const int side = fp.folded[size_t(n.args[0])] ? 0 : 1;
      product = &f[n.args[size_t(side)]];
      bias = &views[size_t(n.args[size_t(1 - side)])];
    }
    Gemm& gemm = gemms.emplace_back();
    if (weight_gemm(pass, rows, *product, views[size_t(step.node)], bias, lane, gemm)) continue;
    for (const Step& alone : steps) run_step(pass, rows, alone, lane);
    return;
  }
  if (lane.primitives.log) [[unlikely]]
    lane.at(pass, rows.type, rows.task, rows.count, ir::op_name(f[steps.front().node].op));
  ScopedTimer timer(lane.stats->gemm_s);
  device_.gemm_batched(lane, gemms);
}

// C_r = A_r·op(W) with A_r [m, k] per vertex: row i of every vertex's A is
// one [R, k] matrix (stride lda = the value's row stride), so m GEMMs of R
// rows compute every product; when the rows are packed (ld = m·k and m·n) the
// vertices' matrices stack into one [R·m, k] matrix and one GEMM does it all.
bool Runner::matrix_times_weight(const Rows& rows, const Node& node, const Shape& sa, const Shape& sb, const View& a,
                                 const View& b, const View& out, Lane& lane, const View* bias_row) {
  if (b.ld != 0 || a.ld == 0 || sa.rank != 2 || sb.rank != 2 || node.trans_a || out.pointers) return false;
  VJIT_INTERNAL_CHECK(bias_row == nullptr || bias_row->ld == 0, "a block product's bias is one row");
  const float* bias = bias_row ? bias_row->data : nullptr;
  const int64_t m = sa.dims[0], k = sa.dims[1];
  const int64_t n = node.trans_b ? sb.dims[0] : sb.dims[1];
  if (a.ld == m * k && out.ld == m * n) {
    device_.gemm(lane, {false, node.trans_b, rows.count * m, n, k, a.data, k, b.data, sb.dims[1], 0.0f, bias,
                        out.data, n});
    return true;
  }
  for (int64_t i = 0; i < m; ++i)
    device_.gemm(lane, {false, node.trans_b, rows.count, n, k, a.data + i * k, a.ld, b.data, sb.dims[1], 0.0f, bias,
                        out.data + i * n, out.ld});
  return true;
}

// Σ_r A_rᵀ·B_r (A_r [m, k], B_r [m, n] per vertex) = Σ_i (rows i of A)ᵀ·(rows i
// of B): m GEMMs over the R vertices accumulating into the gradient, or one
// over the R·m stacked rows when both are packed. The gradient of a weight
// that multiplied every row of a children block.
bool Runner::accumulate_stacked_products(const Rows& rows, const Node& product, const Shape& sa, const Shape& sb,
                                         const View& a, const View& b, float* grad, Lane& lane) {
  if (!product.trans_a || product.trans_b || sa.rank != 2 || sb.rank != 2 || sa.dims[0] != sb.dims[0] ||
      a.pointers != nullptr || b.pointers != nullptr)
    return false;
  const int64_t m = sa.dims[0], k = sa.dims[1], n = sb.dims[1];
  if (a.ld == m * k && b.ld == m * n) {
    device_.gemm(lane, {true, false, k, n, rows.count * m, a.data, k, b.data, n, 1.0f, nullptr, grad, n});
    return true;
  }
  for (int64_t i = 0; i < m; ++i)
    device_.gemm(lane, {true, false, k, n, rows.count, a.data + i * k, a.ld, b.data + i * n, b.ld, 1.0f, nullptr,
                        grad, n});
  return true;
}

// A weight's gradient: Σ over the rows of the term, or of a product the plan
// folded into it (one GEMM for an outer product a·bᵀ: Aᵀ·B over the rows).
// Σ_r aᵀ·b over child row space (blocks in child rows) is one GEMM over the child rows.
void Runner::param_grad(Pass pass, const Rows& vertex_rows, const Node& node, Lane& lane) {
  const FunctionPlan& plan = function_plan(pass, vertex_rows.type);
  const ir::Function& f = *plan.function;
  const std::vector<View>& views = lane.views[int(pass)];
  float* grad = param_gradient(node.param);
  const ValueId term = node.args[0];
  if (!plan.folded[size_t(term)]) {
    device_.reduce_rows(lane, vertex_rows.count, f[term].shape.numel(), views[size_t(term)], grad);
    return;
  }
  const Node& product = f[term];
  const Rows rows = plan.in_child_rows(product.args[0]) ? child_rows(vertex_rows) : vertex_rows;
  const auto [sa, sb, a, b] = operands_of(plan, views, product);
  ++lane.stats->param_grad_gemms;
  if (product.op == Op::Outer) {
    const int64_t m = sa.numel(), n = sb.numel();
    device_.gemm(lane, {true, false, m, n, rows.count, a.data, a.ld, b.data, b.ld, 1.0f, nullptr, grad, n});
    return;
  }
  if (accumulate_stacked_products(rows, product, sa, sb, a, b, grad, lane)) return;
  device_.accumulate_vertex_products(lane, rows.count, product, sa, sb, a, b, grad);
}

// The GEMM epilogue (ir::fold_bias_adds): out = product + addend, where the
// plan folded the product into this add: a weight's GEMM adds the addend as
// its bias (a row, or the rows of a per-vertex value); an outer product u·vᵀ adds it row by row; rows of a per-vertex
// product (a Slice of one folded too) plus an outer product are one step,
// vertex by vertex, the rank-one update following while the rows are in cache
// (MV-RNN's gradients of A and B from W_Mᵀ·dP).
void Runner::bias_add(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const FunctionPlan& fp = function_plan(pass, rows.type);
  const ir::Function& f = *fp.function;
  const std::vector<View>& views = lane.views[int(pass)];
  const int side = fp.folded[size_t(node.args[0])] ? 0 : 1;
  const Node& product = f[node.args[size_t(side)]];
  const ValueId other_id = node.args[size_t(1 - side)];
  const Node& other = f[other_id];
  ExecStats& stats = *lane.stats;
  if (product.op != Op::Outer) {
    ScopedTimer timer(stats.gemm_s);
    matmul(pass, rows, product, out, lane, &views[size_t(other_id)]);
    return;
  }
  const View& u = views[size_t(product.args[0])];
  const View& v = views[size_t(product.args[1])];
  if (other.op == Op::Slice && fp.folded[size_t(other.args[0])]) {
    ScopedTimer timer(stats.gemm_s);
    const Node& whole = f[other.args[0]];
    VertexProducts p{&whole, f[whole.args[0]].shape, f[whole.args[1]].shape, views[size_t(whole.args[0])],
                     views[size_t(whole.args[1])], out, &u, &v, other.start, other.shape.numel()};
    device_.vertex_products(lane, rows.count, p);
    return;
  }
  ScopedTimer timer(stats.elementwise_s);
  device_.outer(lane, rows.count, f[product.args[0]].shape.numel(), f[product.args[1]].shape.numel(), u, v,
                &views[size_t(other_id)], out);
}

void Runner::children_block(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const ir::Function& f = function(pass, rows.type);
  const std::vector<View>& views = lane.views[int(pass)];
  lane.ints.resize(size_t(rows.count));
  for (int64_t r = 0; r < rows.count; ++r) lane.ints[size_t(r)] = variadic_children(rows.type, rows.vertices[r]);
  const bool has_input = !node.args.empty();
  const View* g = node.op == Op::MaxChildrenGrad ? &views[size_t(node.args[1])] : nullptr;
  device_.children_block(lane, node, rows.count, has_input ? f[node.args[0]].shape : Shape{},
                         has_input ? views[size_t(node.args[0])] : View{}, g, lane.ints, out);
}

}  // namespace vjit::runtime
