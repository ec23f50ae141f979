// Child row space (FunctionPlan::child_rows): a children-block value [K, d]
// whose padding rows change no result is stored as one row of d floats per
// actual child of the rows' vertices, the children of each vertex in order,
// vertex after vertex. Steps inside that space (block · W, the fused kernels,
// pad_cols, elementwise ops) run over the child rows as over any rows, and a
// slice_cols is a view of its columns there (bind()); the steps between it and the vertices' rows are here: the gather of
// the children's scattered rows into it, a vertex vector broadcast to its
// children's rows, a vertex's sum over its children's rows, and the gradient
// each child row sends to its child.
#include "runtime/runner.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

void Runner::count_child_rows() {
  const BatchLayout& layout = *batch_.layout;
  child_row_begin_.assign(plan_.types.size(), {});
  for (int t = 0; t < int(plan_.types.size()); ++t) {
    if (plan_.types[size_t(t)].forward.child_rows.empty() && plan_.types[size_t(t)].backward.child_rows.empty())
      continue;
    const Rows rows = all_rows(t);
    std::vector<int64_t>& begin = child_row_begin_[size_t(t)];
    begin.assign(1, 0);
    for (int64_t r = 0; r < rows.count; ++r) begin.push_back(begin.back() + variadic_children(t, rows.vertices[r]));
    VJIT_INTERNAL_CHECK(int64_t(begin.size()) == layout.type_rows[size_t(t)] + 1, "child rows of type " << t);
  }
}

Runner::Rows Runner::child_rows(const Rows& rows) const {
  const std::vector<int64_t>& begin = child_row_begin_[size_t(rows.type)];
  const int64_t first = begin[size_t(rows.begin)];
  return {rows.type, rows.task, first, begin[size_t(rows.begin + rows.count)] - first, nullptr};
}

int64_t Runner::parent_row(const Rows& rows, int64_t child_row) const {
  const std::vector<int64_t>& begin = child_row_begin_[size_t(rows.type)];
  const int64_t target = begin[size_t(rows.begin)] + child_row;
  int64_t r = 0;
  while (begin[size_t(rows.begin + r + 1)] <= target) ++r;
  return r;
}

bool Runner::child_row_step(Pass pass, const Rows& rows, ValueId id, Lane& lane) {
  const FunctionPlan& fp = function_plan(pass, rows.type);
  const Node& n = (*fp.function)[id];
  const bool reads_child_rows = !n.args.empty() && fp.in_child_rows(n.args[0]);
  if (!fp.in_child_rows(id) && !reads_child_rows) return false;
  const std::vector<View>& views = lane.views[int(pass)];
  const View& out = views[size_t(id)];
  const scheduler::FlatBatch& graph = *batch_.graph;
  const size_t first = size_t(program_.signature(rows.type).fixed_arity);
  const std::vector<int64_t>& begin = child_row_begin_[size_t(rows.type)];
  const int64_t width = n.op == Op::GatherGrad || n.op == Op::SumRows ? fp.row_width(n.args[0]) : fp.row_width(id);
  // Child row c of the rows' value `v`.
  auto child_row = [&](const View& v, int64_t c) { return v.data + (c - begin[size_t(rows.begin)]) * v.ld; };
  ExecStats& stats = *lane.stats;
  std::vector<RowMove>& moves = lane.moves;
  moves.clear();
  switch (n.op) {
    case Op::GatherAll:  // each child's scattered row into its child row
    case Op::BroadcastRows: {  // the vertex's row into each of its child rows
      const bool gather = n.op == Op::GatherAll;
      const View in = gather ? View{} : views[size_t(n.args[0])];
      for (int64_t r = 0; r < rows.count; ++r) {
        std::span<const int> children = graph.children(rows.vertices[r]);
        for (size_t k = first; k < children.size(); ++k) {
          const int child = children[k];
          moves.push_back({child_row(out, begin[size_t(rows.begin + r)] + int64_t(k - first)),
                           gather ? scattered_rows(graph.type(child), batch_.layout->vertex_row[size_t(child)]).data
                                  : in.data + r * in.ld});
        }
      }
      ++stats.copy_calls;
      stats.copy_bytes += int64_t(moves.size()) * width * int64_t(sizeof(float));
      if (gather) stats.layout_copy_bytes += int64_t(moves.size()) * width * int64_t(sizeof(float));
      if (!moves.empty()) device_.move_rows(lane, moves, width, RowMode::Copy, nullptr);
      return true;
    }
    case Op::SumRows: sum_child_rows(rows, views[size_t(n.args[0])], width, out, lane); return true;
    case Op::GatherGrad: return false;  // gather_grad reads the rows through child_row_gradient
    case Op::SliceCols: return true;  // bind() made it a view of its columns
    case Op::PadCols: {  // the operand's columns into zeros, over the child rows
      const View& in = views[size_t(n.args[0])];
      const ColumnCopy copies[] = {{{}, out, width}, {in, {out.data + n.start, out.ld}, fp.row_width(n.args[0])}};
      device_.copy_rows(lane, child_rows(rows).count, copies);
      return true;
    }
    default:
      VJIT_INTERNAL_CHECK(fp.in_child_rows(id), "no step reads child rows into vertex rows: "
                                                    << ir::to_string(*fp.function, id));
      return false;  // a step inside child row space: run over the child rows
  }
}

// Each vertex's sum over its child rows of `in` (zeros without children).
void Runner::sum_child_rows(const Rows& rows, const View& in, int64_t width, const View& out, Lane& lane) {
  const std::vector<int64_t>& begin = child_row_begin_[size_t(rows.type)];
  std::vector<const float*>& sources = lane.sources;
  std::vector<int>& first_source = lane.ints;
  sources.clear();
  first_source.assign(1, 0);
  for (int64_t r = 0; r < rows.count; ++r) {
    for (int64_t c = begin[size_t(rows.begin + r)]; c < begin[size_t(rows.begin + r + 1)]; ++c)
      sources.push_back(in.data + (c - begin[size_t(rows.begin)]) * in.ld);
    first_source.push_back(int(sources.size()));
  }
  device_.sum_rows(lane, rows.count, width, width, sources, first_source, false, nullptr, out);
}

// The row of GatherGrad `node`'s operand `g` that the variadic child k (from 0)
// of row r receives: row k of the vertex's block, or its child row.
const float* Runner::child_gradient_row(const Rows& rows, const Node& node, const View& g, int64_t r, int64_t k,
                                        int64_t width) const {
  const FunctionPlan& fp = function_plan(Pass::Backward, rows.type);
  if (!fp.in_child_rows(node.args[0])) return g.data + r * g.ld + k * width;
  const std::vector<int64_t>& begin = child_row_begin_[size_t(rows.type)];
  return g.data + (begin[size_t(rows.begin + r)] - begin[size_t(rows.begin)] + k) * g.ld;
}

}  // namespace vjit::runtime
