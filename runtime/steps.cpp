// What an unfused step of each node kind means, on every device: the rows it
// reads and writes, found in the batch's layout, and the device primitives
// (runtime/device.h) that move, fill or compute them. The counters a step
// keeps (copies, bytes moved, gathers read in place) are counted here.
#include <algorithm>

#include "ir/passes.h"
#include "runtime/batch_rows.h"
#include "runtime/runner.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

namespace {

void count_copies(ExecStats& stats, int64_t rows, int64_t width, bool layout) {
  const int64_t bytes = rows * width * int64_t(sizeof(float));
  stats.copy_bytes += bytes;
  if (layout) stats.layout_copy_bytes += bytes;
}

}  // namespace

void Runner::run_steps(Pass pass, const Rows& rows, std::span<const Step> steps, Lane& lane) {
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const size_t batch = size_t(step.batched);
    if (batch > 1 && i + batch <= steps.size() && !observe_steps_ && !check_finite_) {
      run_gemm_batch(pass, rows, steps.subspan(i, batch), lane);
      i += batch - 1;
      continue;
    }
    if (observe_steps_) [[unlikely]] observe_step(pass, rows, step, lane);
    else run_step(pass, rows, step, lane);
    if (check_finite_ && pass == Pass::Forward) [[unlikely]] check_finite(rows, step, lane);
  }
}

void Runner::run_step(Pass pass, const Rows& rows, const Step& step, Lane& lane) {
  if (step.fused >= 0) {
    const FusedStep& fused = fused_step(pass, rows.type, step.fused);
    if (fused.outputs.empty()) return;  // an inference pass needs none of its outputs
    const Rows& over = function_plan(pass, rows.type).in_child_rows(fused.outputs[0]) ? child_rows(rows) : rows;
    if (lane.primitives.log) [[unlikely]] lane.at(pass, over.type, over.task, over.count, fused.kernel.name);
    run_fused(pass, over, fused, step.fused, lane);
    return;
  }
  if (lane.primitives.log) [[unlikely]] {
    const FunctionPlan& plan = function_plan(pass, rows.type);
    const int64_t count = plan.in_child_rows(step.node) ? child_rows(rows).count : rows.count;
    lane.at(pass, rows.type, rows.task, count, ir::op_name((*plan.function)[step.node].op));
  }
  run_node(pass, rows, step.node, lane);
}

const FusedStep& Runner::fused_step(Pass pass, int type, int index) const {
  const FunctionPlan& fp = function_plan(pass, type);
  const bool inference = pass == Pass::Forward && !options_.backward;
  return (inference ? fp.inference_fused : fp.fused)[size_t(index)];
}

// The kernel's operands: its inputs, then (VJIT_ROW_PLACEMENT=tables: where
// a task bound the gradient parts to the children's rows, the kernel that
// adds them there) the outputs it adds into, read as inputs, then its
// outputs, the forwarded ones last, written a second time through their rows.
void Runner::run_fused(Pass pass, const Rows& rows, const FusedStep& step, int index, Lane& lane) {
  const std::vector<View>& views = lane.views[int(pass)];
  const bool accumulate = pass == Pass::Backward && rows.task >= 0 && !step.accumulated.empty() &&
                          placed(rows.type).accumulating_steps[size_t(index)];
  const size_t added = accumulate ? step.accumulated.size() : 0;
  const size_t n_in = step.inputs.size() + added, n = n_in + step.outputs.size();
  std::vector<View>& operands = lane.operands;
  operands.resize(n);
  for (size_t i = 0; i < n; ++i) {
    View& v = operands[i];
    if (i < step.inputs.size()) v = views[size_t(step.inputs[i])];
    else if (i < n_in) v = views[size_t(step.outputs[size_t(step.accumulated[i - step.inputs.size()])])];
    else v = views[size_t(step.outputs[i - n_in])];
    if (i >= n - size_t(step.forwarded_outputs)) v = forwarded_rows(rows, step.outputs[i - n_in]);
  }
  const KernelLaunch launch{accumulate ? &step.accumulating : &step.kernel, pass, rows.type, size_t(index),
                            rows.count, step.width, operands, n_in};
  device_.launch_fused(lane, launch);
}

void Runner::run_node(Pass pass, const Rows& vertex_rows, ValueId id, Lane& lane) {
  const FunctionPlan& plan = function_plan(pass, vertex_rows.type);
  const Node& n = (*plan.function)[id];
  if (ir::is_view(n.op) || n.op == Op::Scatter || n.uniform) return;  // uniform: fill_uniform_values
  if (!plan.child_rows.empty() && child_row_step(pass, vertex_rows, id, lane)) return;
  const Rows rows = plan.in_child_rows(id) ? child_rows(vertex_rows) : vertex_rows;
  const View& out = lane.views[int(pass)][size_t(id)];
  ExecStats& stats = *lane.stats;
  if (n.op == Op::MatMul || n.op == Op::ParamGrad) {
    ScopedTimer timer(stats.gemm_s);
    if (n.op == Op::MatMul) matmul(pass, rows, n, out, lane, nullptr);
    else param_grad(pass, rows, n, lane);
    return;
  }
  if (n.op == Op::Add && folded_into(pass, rows.type, n)) {
    bias_add(pass, rows, n, out, lane);
    return;
  }
  if (ir::is_copy(n.op)) {
    ScopedTimer timer(stats.copy_s);
    switch (n.op) {
      case Op::Gather: gather(rows, n, out, lane); return;
      case Op::GatherSum:
      case Op::GatherAll: gather_variadic(rows, n, out, lane); return;
      case Op::Pull:
      case Op::PullEmbedding: pull(rows, n, out, lane); return;
      case Op::GatherGrad: gather_grad(rows, n, id, lane.views[int(pass)][size_t(n.args[0])], lane); return;
      default: sink(pass, rows, n, lane); return;
    }
  }
  ScopedTimer timer(stats.elementwise_s);
  switch (ir::op_kind(n.op)) {
    case ir::OpKind::Unary:
    case ir::OpKind::Binary: elementwise(pass, rows, n, out, lane); return;
    default: break;
  }
  const ir::Function& f = function(pass, rows.type);
  const std::vector<View>& views = lane.views[int(pass)];
  auto arg = [&](size_t i) -> const View& { return views[size_t(n.args[i])]; };
  auto width_of = [&](size_t i) { return f[n.args[i]].shape.numel(); };
  if (const ir::RowOp* row = ir::row_op(n.op)) {
    View in[ir::kMaxRowOperands];
    int64_t in_width[ir::kMaxRowOperands] = {};
    for (size_t k = 0; k < n.args.size(); ++k) {
      in[k] = arg(k);
      in_width[k] = width_of(k);
    }
    device_.row_op(lane, *row, rows.count, std::span(in, n.args.size()), std::span(in_width, n.args.size()),
                   n.shape.numel(), out);
    return;
  }
  switch (n.op) {
    case Op::Constant: device_.fill_rows(lane, rows.count, n.shape.numel(), float(n.value), out); return;
    case Op::Outer: device_.outer(lane, rows.count, width_of(0), width_of(1), arg(0), arg(1), nullptr, out); return;
    case Op::SoftmaxCE:
    case Op::SoftmaxCEGrad: softmax_ce(pass, rows, n, out, lane); return;
    case Op::Loss: sink(pass, rows, n, lane); return;
    case Op::SliceCols:
    case Op::PadCols:
    case Op::Transpose:
    case Op::ChildCount:
    case Op::MaxChildren:
    case Op::MaxChildrenGrad: children_block(pass, rows, n, out, lane); return;
    default: reshape(pass, rows, n, out, lane); return;
  }
}

// The GEMM epilogue (ir::fold_bias_adds): an add one of whose arguments is a
// product the plan folded into it.
bool Runner::folded_into(Pass pass, int type, const Node& add) const {
  const FunctionPlan& fp = function_plan(pass, type);
  return fp.folded[size_t(add.args[0])] || fp.folded[size_t(add.args[1])];
}

// --- gathers and pulls ---

void Runner::gather(const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatBatch& graph = *batch_.graph;
  ExecStats& stats = *lane.stats;
  if (out.pointers != nullptr) {  // VJIT_ROW_PLACEMENT=tables: where each child's row lies
    ++stats.gather_views;
    for (int64_t r = 0; r < rows.count; ++r) {
      RowRef src = gather_source(layout, graph, rows.task, node.child_slot, rows.vertices, r);
      out.pointers[r] = scattered_rows(src.type, src.row).data + node.start;
    }
    return;
  }
  const ValueId id = ValueId(&node - function(Pass::Forward, rows.type).nodes.data());
  if (rows.task >= 0 && layout.gather(rows.task, node.child_slot).is_view() && !forwarded_over_view(rows, id)) {
    ++stats.gather_views;  // bind() pointed the value at the children's rows
    return;
  }
  // Rows a child's kernel already wrote here (VJIT_ROW_PLACEMENT=tables) are skipped.
  const bool forwarded = !layout.forward_parent.empty();
  std::vector<RowMove>& moves = lane.moves;
  moves.clear();
  for (int64_t r = 0; r < rows.count; ++r) {
    if (forwarded && was_forwarded(graph.children(rows.vertices[r])[size_t(node.child_slot)], rows.vertices[r],
                                   node.child_slot, node))
      continue;
    RowRef src = gather_source(layout, graph, rows.task, node.child_slot, rows.vertices, r);
    moves.push_back({out.data + r * out.ld, scattered_rows(src.type, src.row).data + node.start});
  }
  if (moves.empty()) {
    ++stats.gather_views;  // every row forwarded: nothing copied
    return;
  }
  ++stats.copy_calls;
  count_copies(stats, int64_t(moves.size()), node.shape.numel(), true);
  device_.move_rows(lane, moves, node.shape.numel(), RowMode::Copy, nullptr);
}

int Runner::variadic_children(int type, int vertex) const {
  const int children = int(batch_.graph->children(vertex).size());
  return std::max(0, children - program_.signature(type).fixed_arity);
}

// GatherSum adds the variadic children's rows in child order; GatherAll
// stacks them into zeroed rows.
void Runner::gather_variadic(const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatBatch& graph = *batch_.graph;
  ExecStats& stats = *lane.stats;
  const bool stack = node.op == Op::GatherAll;
  const size_t first = size_t(program_.signature(rows.type).fixed_arity);
  const ValueId id = ValueId(&node - function(Pass::Forward, rows.type).nodes.data());
  if (!stack && rows.task >= 0 && layout.gather(rows.task, int(first)).is_view() && !forwarded_over_view(rows, id)) {
    ++stats.gather_views;  // one variadic child per row: bind() pointed the value at its rows
    return;
  }
  const int64_t width = stack ? node.shape.dims[1] : node.shape.numel();
  // A sum of one child that wrote its row here itself (VJIT_ROW_PLACEMENT=tables) is kept.
  const bool forwarded = !stack && !layout.forward_parent.empty();
  std::vector<const float*>& sources = lane.sources;
  std::vector<int>& begin = lane.ints;
  std::vector<uint8_t>& keep = lane.keep;
  sources.clear();
  begin.assign(1, 0);
  keep.assign(forwarded ? size_t(rows.count) : 0, 1);
  for (int64_t r = 0; r < rows.count; ++r) {
    std::span<const int> children = graph.children(rows.vertices[r]);
    if (forwarded && children.size() == first + 1 && was_forwarded(children[first], rows.vertices[r], int(first), node))
      keep[size_t(r)] = 0;
    for (size_t k = first; k < children.size() && (keep.empty() || keep[size_t(r)]); ++k)
      sources.push_back(scattered_rows(graph.type(children[k]), layout.vertex_row[size_t(children[k])]).data);
    begin.push_back(int(sources.size()));
  }
  ++stats.copy_calls;
  count_copies(stats, int64_t(sources.size()), width, true);
  device_.sum_rows(lane, rows.count, width, node.shape.numel(), sources, begin, stack,
                   keep.empty() ? nullptr : keep.data(), out);
}

void Runner::pull(const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const scheduler::FlatBatch& graph = *batch_.graph;
  const int64_t width = node.shape.numel();
  ++lane.stats->copy_calls;
  count_copies(*lane.stats, rows.count, width, false);
  if (node.op == Op::PullEmbedding) {
    const float* table = param_address(node.param);
    lane.moves.clear();
    for (int64_t r = 0; r < rows.count; ++r)
      lane.moves.push_back({out.data + r * out.ld, table + int64_t(graph.token(rows.vertices[r])) * width});
    device_.move_rows(lane, lane.moves, width, RowMode::Copy, nullptr);
    return;
  }
  lane.sources.clear();  // the rows' feature vectors, in host memory
  for (int64_t r = 0; r < rows.count; ++r) lane.sources.push_back(graph.vertex(rows.vertices[r]).features.data());
  device_.upload_rows(lane, lane.sources, width, out);
}

// --- sinks: pushes, losses, embedding gradients ---

void Runner::sink(Pass pass, const Rows& rows, const Node& node, Lane& lane) {
  const scheduler::FlatBatch& graph = *batch_.graph;
  const View& x = lane.views[int(pass)][size_t(node.args[0])];
  const int64_t width = function(pass, rows.type)[node.args[0]].shape.numel();
  ExecStats& stats = *lane.stats;
  std::vector<RowMove>& moves = lane.moves;
  moves.clear();
  switch (node.op) {
    case Op::Push: {
      const PushedValues<float>& pushes = result_->pushes;
      const int k = push_index_[size_t(rows.type)][size_t(&node - function(pass, rows.type).nodes.data())];
      float* values = push_values();
      for (int64_t r = 0; r < rows.count; ++r)
        moves.push_back({values + pushes.value_offset(rows.vertices[r], k), x.data + r * x.ld});
      ++stats.copy_calls;
      count_copies(stats, rows.count, width, false);
      device_.move_rows(lane, moves, width, RowMode::Copy, nullptr);
      return;
    }
    case Op::Loss: device_.add_objective(lane, rows.count, x); return;
    case Op::EmbeddingGrad: {
      float* grad = param_gradient(node.param);
      TouchedRows& touched = touched_rows();
      for (int64_t r = 0; r < rows.count; ++r) {
        const int token = graph.token(rows.vertices[r]);
        touched.touch(node.param, token);
        moves.push_back({grad + int64_t(token) * width, x.data + r * x.ld});
      }
      ++stats.copy_calls;
      count_copies(stats, rows.count, width, false);
      device_.move_rows(lane, moves, width, RowMode::Add, nullptr);
      return;
    }
    default: VJIT_INTERNAL_CHECK(false, "not a sink: " << ir::op_name(node.op));
  }
}

// --- gradients sent to the children ---

// The scatter gradients are sums over the parents' gathers, so they start at
// zero, except where the one contribution is assigned (BatchLayout::assigned_once).
void Runner::zero_scatter_gradients(Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  for (size_t t = 0; t < layout.scatter_grad.size(); ++t) {
    const ValueLayout& g = layout.scatter_grad[t];
    if (g.offset < 0) continue;
    lane.at(Pass::Backward, int(t), -1, layout.type_rows[t], "zero scatter gradients");
    const std::vector<uint8_t>& assigned = layout.assigned_once[t];
    device_.zero_gradient_rows(lane, layout.type_rows[t], g.ld, scatter_width_[t],
                               assigned.empty() ? nullptr : assigned.data(), arena(Pass::Backward) + g.offset);
  }
}

// Adds the gradient `g` of the rows' gather into the children's scatter-
// gradient rows (assigning it where a whole-slot gather is a row's one
// contribution), unless it was computed there in place.
void Runner::gather_grad(const Rows& rows, const Node& node, ValueId id, const View& g, Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatBatch& graph = *batch_.graph;
  ExecStats& stats = *lane.stats;
  if (computed_in_place(rows, node, id)) {
    ++stats.gather_views;  // bind() placed the gradient in the children's scatter-gradient rows
    return;
  }
  if (add_accumulated_gradient(rows, node, id, g, lane)) return;
  // Every child row is as wide as the gradient's row (Slot: from `start`;
  // EveryVariadic) or as one row of its [K, d] block (VariadicRows): the
  // graph's validation made every child scatter the shape its parent gathers.
  const Shape& shape = function(Pass::Backward, rows.type)[node.args[0]].shape;
  const int64_t width = node.target == ir::GatherGradTarget::VariadicRows ? shape.dims[1] : shape.numel();
  std::vector<RowMove>& moves = lane.moves;
  std::vector<uint8_t>& assign = lane.keep;
  moves.clear();
  assign.clear();
  if (node.target == ir::GatherGradTarget::Slot) {
    const bool whole_slot = placed(rows.type).whole_slot_gather_grads >> node.child_slot & 1;
    for (int64_t r = 0; r < rows.count; ++r) {
      RowRef dst = gather_source(layout, graph, rows.task, node.child_slot, rows.vertices, r);
      const bool assigned = layout.assigned_once[size_t(dst.type)][size_t(dst.row)];
      if (g.pointers && assigned) continue;  // gradient_pointers: written there in place
      moves.push_back({scatter_gradient_row(dst.type, dst.row) + node.start, g.pointers ? g.pointers[r] : g.data + r * g.ld});
      assign.push_back(whole_slot && assigned);
    }
  } else {  // every variadic child, or row k to variadic child k
    const size_t first = size_t(program_.signature(rows.type).fixed_arity);
    const bool by_rows = node.target == ir::GatherGradTarget::VariadicRows;
    for (int64_t r = 0; r < rows.count; ++r) {
      std::span<const int> children = graph.children(rows.vertices[r]);
      for (size_t k = first; k < children.size(); ++k)
        moves.push_back({scatter_gradient_row(children[k]),
                         by_rows ? child_gradient_row(rows, node, g, r, int64_t(k - first), width) : g.data + r * g.ld});
    }
    assign.assign(moves.size(), 0);
  }
  ++(g.pointers ? stats.gather_views : stats.copy_calls);
  if (moves.empty()) return;
  count_copies(stats, int64_t(moves.size()), width, true);
  device_.move_rows(lane, moves, width, RowMode::Add, assign.data());
}

// A GatherGrad (`id`) some parts of whose gradient `g` their kernels added
// into the children's rows (bind_accumulated_rows): adds the rest of the
// columns, and each part from the rows that went to their own row instead,
// one add of rows per range of columns. The ranges are disjoint, so each
// float is still summed in row order.
bool Runner::add_accumulated_gradient(const Rows& rows, const Node& node, ValueId id, const View& g, Lane& lane) {
  if (!accumulates(rows, id, lane)) return false;
  const scheduler::FlatBatch& graph = *batch_.graph;
  const std::vector<View>& views = lane.views[int(Pass::Backward)];
  const bool slot = node.target == ir::GatherGradTarget::Slot;
  const size_t first_variadic = size_t(program_.signature(rows.type).fixed_arity);
  const std::vector<std::pair<int64_t, int64_t>>& rest = placed(rows.type).accumulated_rest[size_t(id)];
  std::span<const AccumulatedPart> all = placed(rows.type).accumulated_parts;
  auto first = std::find_if(all.begin(), all.end(), [&](const AccumulatedPart& p) { return p.gather_grad == id; });
  auto last = std::find_if(first, all.end(), [&](const AccumulatedPart& p) { return p.gather_grad != id; });
  const std::span<const AccumulatedPart> parts(first, last);  // sorted by GatherGrad
  int64_t added = 0;
  // Adds `width` floats per row from move(r, child) (src null: none) into each child's row.
  auto add = [&](int64_t width, auto&& move) {
    std::vector<RowMove>& moves = lane.moves;
    moves.clear();
    for (int64_t r = 0; r < rows.count; ++r) {
      std::span<const int> children = graph.children(rows.vertices[r]);
      for (int child : slot ? children.subspan(size_t(node.child_slot), 1) : children.subspan(first_variadic))
        if (RowMove m = move(r, scatter_gradient_row(child) + (slot ? node.start : 0)); m.src) moves.push_back(m);
    }
    if (moves.empty()) return;
    added += int64_t(moves.size()) * width;
    device_.move_rows(lane, moves, width, RowMode::Add, nullptr);
  };
  for (const auto& range : rest) {
    const int64_t begin = range.first;  // a named copy: the lambda may not capture a structured binding (C++20, clang)
    add(range.second - begin, [&](int64_t r, float* into) { return RowMove{into + begin, row_at(g, r) + begin}; });
  }
  for (const AccumulatedPart& part : parts)
    add(part.width, [&](int64_t r, float* into) {
      // A part's row went to the child when its kernel wrote it there.
      const float* from = row_at(views[size_t(part.value)], r);
      return from == into + part.column ? RowMove{} : RowMove{into + part.column, from};
    });
  if (added == 0) ++lane.stats->gather_views;
  else ++lane.stats->copy_calls;
  count_copies(*lane.stats, added, 1, true);
  return true;
}

// --- computed rows ---

void Runner::elementwise(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const FunctionPlan& plan = function_plan(pass, rows.type);
  const ir::Function& f = *plan.function;
  const std::vector<View>& views = lane.views[int(pass)];
  const int64_t width = plan.row_width(ValueId(&node - f.nodes.data()));
  if (node.op == Op::Dropout) {
    const scheduler::FlatBatch& graph = *batch_.graph;
    lane.ints.resize(size_t(2 * rows.count));
    for (int64_t r = 0; r < rows.count; ++r) {
      scheduler::VertexRef ref = graph.ref(rows.vertices[r]);
      lane.ints[size_t(2 * r)] = graph.first_sample() + ref.sample;  // masks follow the global sample index
      lane.ints[size_t(2 * r + 1)] = ref.vertex;
    }
    const DropoutMask mask{lane.ints, options_.seed, node.dropout_key, node.rate, options_.training};
    device_.dropout(lane, rows.count, width, views[size_t(node.args[0])], mask, out);
    return;
  }
  // An operand of another shape is a scalar or a vector broadcast over the rows.
  auto operand = [&](size_t i) {
    const ValueId arg = node.args[i];
    const View& v = views[size_t(arg)];
    const Shape& shape = f[arg].shape;
    Operand o{v.data, v.ld, Broadcast::Same, plan.row_width(arg)};
    if (shape != node.shape) o.mode = shape.rank == 0 ? Broadcast::Scalar : Broadcast::RowVector;
    return o;
  };
  const bool unary = ir::op_kind(node.op) == ir::OpKind::Unary;
  device_.elementwise(lane, node, rows.count, width, operand(0), unary ? Operand{} : operand(1), out);
}

void Runner::softmax_ce(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const std::vector<View>& views = lane.views[int(pass)];
  lane.ints.resize(size_t(rows.count));
  for (int64_t r = 0; r < rows.count; ++r) lane.ints[size_t(r)] = batch_.graph->label(rows.vertices[r]);
  const int64_t classes = function(pass, rows.type)[node.args[0]].shape.numel();
  const View* upstream = node.op == Op::SoftmaxCEGrad ? &views[size_t(node.args[1])] : nullptr;
  device_.softmax_ce(lane, rows.count, classes, views[size_t(node.args[0])], lane.ints, upstream, out);
}

// Copies each argument into its columns of the Concat's rows, except the
// arguments the planner laid out there already (concat in place).
void Runner::concat(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const ir::Function& f = function(pass, rows.type);
  const std::vector<View>& views = lane.views[int(pass)];
  if (out.pointers != nullptr) {  // VJIT_ROW_PLACEMENT=tables: read as its parts, each where it lies
    if (pass == Pass::Backward) return;  // a gradient its parts wrote in place (gradient_pointers)
    for (int64_t r = 0; r < rows.count; ++r)
      for (size_t q = 0; q < node.args.size(); ++q)
        out.pointers[r * out.parts + int64_t(q)] = views[size_t(node.args[q])].pointers[r];
    return;
  }
  std::vector<ColumnCopy>& copies = lane.copies;
  copies.clear();
  int64_t column = 0;
  for (ValueId arg : node.args) {
    const View& src = views[size_t(arg)];
    const int64_t part = f[arg].shape.numel();
    // A gradient part added into the children's rows (VJIT_ROW_PLACEMENT=tables): the GatherGrad knows.
    if (src.pointers == nullptr && (src.data != out.data + column || src.ld != out.ld)) {
      copies.push_back({src, {out.data + column, out.ld}, part});
      lane.stats->layout_copy_bytes += rows.count * part * int64_t(sizeof(float));
    }
    column += part;
  }
  if (!copies.empty()) device_.copy_rows(lane, rows.count, copies);
}

void Runner::reshape(Pass pass, const Rows& rows, const Node& node, const View& out, Lane& lane) {
  const ir::Function& f = function(pass, rows.type);
  const View& src = lane.views[int(pass)][size_t(node.args[0])];
  const int64_t width = node.shape.numel(), in_width = f[node.args[0]].shape.numel();
  switch (node.op) {
    case Op::Concat: concat(pass, rows, node, out, lane); return;
    case Op::Pad: {  // zeros, then the argument in its columns
      const ColumnCopy copies[] = {{{}, out, width}, {src, {out.data + node.start, out.ld}, in_width}};
      device_.copy_rows(lane, rows.count, copies);
      return;
    }
    case Op::Broadcast: device_.broadcast_rows(lane, rows.count, width, src, 0, out); return;
    case Op::BroadcastRows: device_.broadcast_rows(lane, rows.count, width, src, node.shape.dims[1], out); return;
    case Op::Sum:
    case Op::SumRows: device_.sum_columns_mod(lane, rows.count, width, in_width, src, out); return;
    default: VJIT_INTERNAL_CHECK(false, "no device runs " << ir::to_string(f, int(&node - f.nodes.data())));
  }
}

// --- uniform values ---

// A uniform value other than a parameter is a Concat of parameters (stacked
// weights, made by matmul merging): one row with ld 0 that changes with every
// optimizer step. Where the device reads the parameters in place as one block
// (stacked_in_place), bind() points at them (stacked_views_, decided here once
// per pass); else the block is filled here, once per pass, from the
// parameters' current values, before any step reads it (run_node skips it).
void Runner::fill_uniform_values(Pass pass, Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  for (int t = 0; t < program_.num_types(); ++t) {
    if (layout.type_rows[size_t(t)] == 0) continue;
    const ir::Function& f = function(pass, t);
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      if (!n.uniform || n.op == Op::Param) continue;
      VJIT_INTERNAL_CHECK(n.op == Op::Concat, "no device computes uniform " << ir::to_string(f, id));
      float*& in_place = stacked_views_[int(pass)][size_t(t)][size_t(id)];
      in_place = stacked_in_place(f, n);
      if (in_place) continue;
      float* dst = buffer_view(pass, t, id, 0).data;
      lane.copies.clear();
      for (ValueId arg : n.args) {
        const int64_t part = f[arg].shape.numel();
        float* src = f[arg].op == Op::Param ? param_address(f[arg].param) : buffer_view(pass, t, arg, 0).data;
        lane.copies.push_back({{src, 0}, {dst, 0}, part});
        lane.stats->stacked_weight_bytes += part * int64_t(sizeof(float));
        dst += part;
      }
      lane.at(pass, t, -1, 1, "stacked weights");
      device_.copy_rows(lane, 1, lane.copies);
    }
  }
}

}  // namespace vjit::runtime
