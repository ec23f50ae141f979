#include "runtime/memplan.h"

#include <algorithm>
#include <utility>

#include "ir/passes.h"
#include "layout/aligned_order.h"
#include "runtime/batch_rows.h"
#include "runtime/row_placement.h"
#include "vjit/error.h"

namespace vjit::runtime {

namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

constexpr int64_t kAlignFloats = 16;  // every buffer starts on a 64-byte boundary
// Rows a multiple of this many floats (1 KiB) apart map to the same few cache
// sets, so a GEMM packing a block of them evicts its own lines: with
// VJIT_PAD_WIDE_ROWS such rows get one cache line of padding. Measured on a
// Zen 3 (oneDNN sgemm, 2 threads): a 512×512 weight gradient over 4830 rows
// ran at 67-75 GFLOP/s with leading dimensions of 1024 floats, 127-167 with 1040.
constexpr int64_t kConflictFloats = 256;
int64_t aligned(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// `pointers`: per value, whether the executor reads it through row pointers
// (row_pointer_parts; empty: none is).
bool has_buffer(const FunctionPlan& fp, ValueId id, const std::vector<int>& pointers) {
  const Node& n = (*fp.function)[id];
  return !ir::is_sink(n.op) && !ir::is_view(n.op) && !fp.folded[size_t(id)] &&
         (pointers.empty() || pointers[size_t(id)] == 0);
}

// Whether every step reading `id` — directly or through views of it — runs
// task by task. Only then may a task's rows of the value be read in place from
// another buffer: the eager and lazy steps read a value's rows of every task at
// once, from its own buffer.
bool read_only_by_core(const FunctionPlan& fp, ValueId id) {
  const ir::Function& f = *fp.function;
  for (ValueId user = id + 1; user < f.size(); ++user) {
    const Node& n = f[user];
    if (std::find(n.args.begin(), n.args.end(), id) == n.args.end()) continue;
    if (fp.phases[size_t(user)] != ir::Phase::Core) return false;
    if (ir::is_view(n.op) && !read_only_by_core(fp, user)) return false;
  }
  return true;
}

// Whether forward value `id` is `root` seen through views (slices, reshapes).
bool aliases(const ir::Function& f, ValueId id, ValueId root) {
  while (id != root && (f[id].op == Op::Slice || f[id].op == Op::Reshape)) id = f[id].args[0];
  return id == root;
}

// Whether the backward reads forward value `root`, or a view of it, outside
// its tasks.
bool backward_reads_only_in_tasks(const FunctionPlan& forward, const FunctionPlan& backward, ValueId root) {
  const ir::Function& df = *backward.function;
  for (ValueId id = 0; id < df.size(); ++id)
    if (df[id].op == Op::Fwd && aliases(*forward.function, df[id].forward_value, root) && !read_only_by_core(backward, id))
      return false;
  return true;
}

// Whether value `id` may be written into a Concat's buffer instead of its own:
// it has a buffer whose place nothing else decides (not stacked weights), and
// is a Concat only with `nested` (its own parts then lie in place in it, within
// the outer one: Lattice-LSTM's gate gradients inside [d_gate; d_gates], 5 of
// every 6 floats its lazy weight gradient reads). A gather there is copied straight into the concat;
// in a task where the layout makes it a view of the children's rows, the view
// replaces that place (CpuExecutor::bind) and the Concat copies it as any
// other operand that is not in place.
bool may_live_in_concat(const FunctionPlan& fp, ValueId id, const PlannerOptions& options,
                        const std::vector<int>& pointers) {
  const Node& n = (*fp.function)[id];
  return has_buffer(fp, id, pointers) && !n.uniform && (options.nested_concats || n.op != Op::Concat) &&
         (options.gathers_in_concat || n.op != Op::Gather);
}

// Per value of the function: the Concat it is laid out in (-1: none) and its
// first column there. Each value goes into at most one Concat, and only once.
struct ConcatPlacement {
  std::vector<ValueId> concat;
  std::vector<int64_t> column;
};

ConcatPlacement place_in_concats(const FunctionPlan& fp, const PlannerOptions& options,
                                 const std::vector<int>& pointers) {
  const ir::Function& f = *fp.function;
  ConcatPlacement out{std::vector<ValueId>(size_t(f.size()), -1), std::vector<int64_t>(size_t(f.size()), 0)};
  for (ValueId id = 0; id < f.size(); ++id) {
    const Node& n = f[id];
    if (n.op != Op::Concat || n.uniform || !has_buffer(fp, id, pointers)) continue;
    int64_t column = 0;
    for (size_t i = 0; i < n.args.size(); ++i) {
      ValueId arg = n.args[i];
      // A reshape is a view with the same row layout: its operand goes in place.
      const ValueId root = ir::under_reshapes(f, arg);
      bool repeated = std::count(n.args.begin(), n.args.end(), arg) > 1;
      if (may_live_in_concat(fp, root, options, pointers) && !repeated && out.concat[size_t(root)] < 0) {
        out.concat[size_t(root)] = id;
        out.column[size_t(root)] = column;
      }
      column += f[arg].shape.numel();
    }
  }
  return out;
}

// The planners of this file differ only in row padding and in whether gathers
// may be views.
// How rows are ordered: as the schedule lists the vertices, or by the PQ-tree.
enum class RowOrder { Schedule, PQTree };

class RowPlanner : public Planner {
 public:
  RowPlanner(const char* name, const ExecPlan& plan, const std::vector<TypeSignature>& signatures, int64_t pad,
             bool views, RowOrder order, const PlannerOptions& options)
      : name_(name),
        plan_(plan),
        signatures_(signatures),
        pad_(pad),
        pad_wide_rows_(options.pad_wide_rows),
        row_order_(order) {
    const bool inplace_concat = options.inplace_concat;
    view_ok_.resize(plan.types.size());
    for (size_t t = 0; t < plan.types.size(); ++t) {
      pointers_[int(Pass::Forward)].push_back(plan.placement->types[t].row_pointer_parts);
      pointers_[int(Pass::Backward)].emplace_back();
      for (Pass pass : {Pass::Forward, Pass::Backward}) {
        const FunctionPlan& fp = function_plan(pass, t);
        placements_[int(pass)].push_back(
            inplace_concat ? place_in_concats(fp, options, pointers_[int(pass)][t])
                           : ConcatPlacement{std::vector<ValueId>(fp.function->nodes.size(), -1),
                                             std::vector<int64_t>(fp.function->nodes.size(), 0)});
      }
      // Slots 0..fixed_arity-1 and the variadic sum (fixed_arity).
      view_ok_[t].assign(size_t(signatures[t].fixed_arity) + 1, views);
      const FunctionPlan& fp = plan.types[t].forward;
      // A gather_all, or a gather_sum only the pqtree planner lays out, is never a view.
      bool variadic_view = order == RowOrder::PQTree;
      for (ValueId id = 0; id < fp.function->size(); ++id) {
        if ((*fp.function)[id].op == Op::GatherAll) variadic_view = false;
      }
      view_ok_[t].back() = views && variadic_view;
      // The pqtree planner's views may be read outside the tasks: the executor
      // runs those steps task by task. The others' may not.
      if (order == RowOrder::PQTree) continue;
      for (ValueId id = 0; id < fp.function->size(); ++id) {
        const Node& n = (*fp.function)[id];
        if (n.op != Op::Gather) continue;
        bool in_tasks = fp.phases[size_t(id)] == ir::Phase::Core && read_only_by_core(fp, id) &&
                        backward_reads_only_in_tasks(fp, plan.types[t].backward, id);
        if (!in_tasks) view_ok_[t][size_t(n.child_slot)] = false;
      }
    }
  }

  const char* name() const override { return name_; }

  void plan(const PlanInput& input, BatchLayout& out) override {
    out.planner = name_;
    out.num_types = int(plan_.types.size());
    if (row_order_ == RowOrder::PQTree) order_by_pq_tree(*input.graph, *input.schedule, out);
    else assign_rows(*input.graph, *input.schedule, out);
    assign_buffers(Pass::Forward, out);
    assign_buffers(Pass::Backward, out);
    assign_gathers(*input.graph, *input.schedule, out);
    place_batch_rows(plan_, signatures_, input, out);
  }

 private:
  int64_t ld_of(int64_t width) const {
    const bool conflicting = pad_wide_rows_ && width % kConflictFloats == 0;
    return width + pad_ + (conflicting ? kAlignFloats : 0);
  }

  // Rows in schedule order: a type's tasks as the schedule runs them, a
  // task's vertices as it lists them.
  void assign_rows(const scheduler::FlatBatch& graph, const scheduler::FlatSchedule& schedule, BatchLayout& out) {
    out.aligned_batches = out.aligned_satisfied = 0;
    position_.clear();
    place_rows(graph, schedule, out);
  }

  // Rows in schedule order, or, when position_ holds each vertex's place in
  // the order the planner chose, by position: a type's tasks by their lowest
  // position, a task's vertices by position. Every task's rows stay contiguous.
  void place_rows(const scheduler::FlatBatch& graph, const scheduler::FlatSchedule& schedule, BatchLayout& out) {
    const size_t num_types = plan_.types.size();
    const bool by_position = !position_.empty();
    auto rank = [&](int v) { return position_[size_t(v)]; };
    task_order_.resize(size_t(schedule.num_tasks()));
    task_rank_.resize(size_t(schedule.num_tasks()));
    for (int t = 0; t < schedule.num_tasks(); ++t) {
      task_order_[size_t(t)] = t;
      int lowest = by_position ? rank(schedule.task(t)[0]) : t;
      if (by_position)
        for (int v : schedule.task(t)) lowest = std::min(lowest, rank(v));
      task_rank_[size_t(t)] = lowest;
    }
    if (by_position)
      std::sort(task_order_.begin(), task_order_.end(),
                [&](int a, int b) { return task_rank_[size_t(a)] < task_rank_[size_t(b)]; });
    out.type_rows.assign(num_types, 0);
    out.task_first_row.resize(size_t(schedule.num_tasks()));
    for (int t : task_order_) {
      int type = schedule.task_type[size_t(t)];
      out.task_first_row[size_t(t)] = out.type_rows[size_t(type)];
      out.type_rows[size_t(type)] += int(schedule.task(t).size());
    }
    out.type_row_begin.resize(num_types + 1);
    out.type_row_begin[0] = 0;
    for (size_t t = 0; t < num_types; ++t) out.type_row_begin[t + 1] = out.type_row_begin[t] + out.type_rows[t];
    VJIT_INTERNAL_CHECK(out.type_row_begin[num_types] == graph.num_vertices(), "the schedule misses a vertex");
    out.row_vertex.resize(size_t(graph.num_vertices()));
    out.vertex_row.assign(size_t(graph.num_vertices()), -1);
    for (int t = 0; t < schedule.num_tasks(); ++t) {
      int type = schedule.task_type[size_t(t)];
      std::span<const int> task = schedule.task(t);
      int* rows = out.row_vertex.data() + out.type_row_begin[size_t(type)] + out.task_first_row[size_t(t)];
      std::copy(task.begin(), task.end(), rows);
      if (by_position) std::sort(rows, rows + task.size(), [&](int a, int b) { return rank(a) < rank(b); });
      for (size_t r = 0; r < task.size(); ++r) {
        VJIT_INTERNAL_CHECK(graph.type(rows[r]) == type, "a task mixes vertex types");
        out.vertex_row[size_t(rows[r])] = out.task_first_row[size_t(t)] + int(r);
      }
    }
  }

  // ED-Batch's PQ-tree layout over every vertex of the batch: each task's
  // vertices consecutive (always possible: tasks are disjoint), and for each
  // task and gather slot that may be a view, a batch asking its children to be
  // consecutive and in the task's order. Rows then follow the order: a type's
  // tasks by position, a task's vertices by position.
  void order_by_pq_tree(const scheduler::FlatBatch& graph, const scheduler::FlatSchedule& schedule,
                        BatchLayout& out) {
    aligned_.reset(graph.num_vertices());
    for (int t = 0; t < schedule.num_tasks(); ++t) aligned_.require_consecutive(schedule.task(t));
    out.aligned_batches = 0;
    for (int t = 0; t < schedule.num_tasks(); ++t) {
      const int type = schedule.task_type[size_t(t)];
      for (int slot = 0; slot <= signatures_[size_t(type)].fixed_arity; ++slot)
        if (view_ok_[size_t(type)][size_t(slot)] && add_slot_batch(graph, schedule.task(t), type, slot))
          ++out.aligned_batches;
    }
    aligned_.solve(order_);
    out.aligned_satisfied = 0;
    for (int b = 0; b < aligned_.num_batches(); ++b) out.aligned_satisfied += aligned_.satisfied(b) ? 1 : 0;
    position_.resize(size_t(graph.num_vertices()));
    for (size_t p = 0; p < order_.size(); ++p) position_[size_t(order_[p])] = int(p);
    place_rows(graph, schedule, out);
  }

  // Asks for slot `slot`'s children of `vertices` to be consecutive and in the
  // same order, when they could form a view: one child each, all of one type.
  bool add_slot_batch(const scheduler::FlatBatch& graph, std::span<const int> vertices, int type, int slot) {
    batch_values_.assign(vertices.begin(), vertices.end());
    for (int v : vertices) {
      const int c = child_in_slot(graph, type, v, slot);
      if (c < 0 || graph.type(c) != graph.type(child_in_slot(graph, type, vertices[0], slot))) return false;
      batch_values_.push_back(c);
    }
    aligned_.add_batch(batch_values_, 2);
    return true;
  }

  // The child a view of `slot` reads for vertex v: fixed slot k's child, or for
  // the variadic slot the one variadic child (-1 when there are none or several).
  int child_in_slot(const scheduler::FlatBatch& graph, int type, int v, int slot) const {
    std::span<const int> children = graph.children(v);
    const size_t fixed = size_t(signatures_[size_t(type)].fixed_arity);
    if (size_t(slot) < fixed) return children[size_t(slot)];
    return children.size() == fixed + 1 ? children[fixed] : -1;
  }

  void assign_buffers(Pass pass, BatchLayout& out) const {
    const size_t num_types = plan_.types.size();
    std::vector<int>& begin = out.value_begin[int(pass)];
    std::vector<ValueLayout>& values = out.values[int(pass)];
    begin.resize(num_types);
    size_t count = 0;
    for (size_t t = 0; t < num_types; ++t) {
      begin[t] = int(count);
      count += size_t(function_plan(pass, t).function->size());
    }
    values.assign(count, ValueLayout{});
    if (pass == Pass::Backward) out.scatter_grad.assign(num_types, ValueLayout{});
    int64_t total = 0;
    for (size_t t = 0; t < num_types; ++t) {
      const FunctionPlan& fp = function_plan(pass, t);
      const ConcatPlacement& placement = placements_[int(pass)][t];
      const int64_t rows = out.type_rows[t];
      for (ValueId id = 0; id < fp.function->size(); ++id) {
        if (!has_buffer(fp, id, pointers_[int(pass)][t]) || placement.concat[size_t(id)] >= 0) continue;
        const Node& n = (*fp.function)[id];
        if (n.uniform) {  // stacked parameters (matmul merging): one row, read by every vertex
          values[size_t(begin[t] + id)] = {total, 0};
          total += aligned(n.shape.numel());
          continue;
        }
        int64_t ld = ld_of(n.shape.numel());
        values[size_t(begin[t] + id)] = {total, ld};
        total += aligned(rows * ld);
      }
      // Outer concats first: a Concat inside another is placed before its parts.
      for (ValueId id = fp.function->size(); id-- > 0;) {
        const ValueId concat = placement.concat[size_t(id)];
        if (concat < 0) continue;
        const ValueLayout& whole = values[size_t(begin[t] + concat)];
        values[size_t(begin[t] + id)] = {whole.offset + placement.column[size_t(id)], whole.ld, concat};
      }
      const FunctionPlan& forward = plan_.types[t].forward;
      if (pass == Pass::Backward && forward.scatter_value >= 0) {
        int64_t ld = ld_of((*forward.function)[forward.scatter_value].shape.numel());
        out.scatter_grad[t] = {total, ld};
        total += aligned(rows * ld);
      }
    }
    out.arena_floats[int(pass)] = total;
  }

  void assign_gathers(const scheduler::FlatBatch& graph, const scheduler::FlatSchedule& schedule, BatchLayout& out) const {
    out.gather_begin.resize(size_t(schedule.num_tasks()));
    out.gathers.clear();
    out.gather_sources.clear();
    out.view_slots.assign(plan_.types.size(), 0);
    for (int t = 0; t < schedule.num_tasks(); ++t) {
      const int type = schedule.task_type[size_t(t)];
      const int fixed = signatures_[size_t(type)].fixed_arity;
      out.gather_begin[size_t(t)] = int(out.gathers.size());
      std::span<const int> vertices = out.task_rows(type, t, int(schedule.task(t).size()));
      for (int slot = 0; slot <= fixed; ++slot) {
        GatherLayout g;
        if (view_ok_[size_t(type)][size_t(slot)] && children_in_order(graph, vertices, type, slot, out, g)) {
          g.exclusive = row_order_ == RowOrder::PQTree && only_parent_of_children(graph, vertices, type, slot);
          out.gathers.push_back(g);
          out.view_slots[size_t(type)] |= uint64_t(1) << slot;
          continue;
        }
        g = GatherLayout{};
        g.first_source = int(out.gather_sources.size());
        if (slot < fixed)  // the variadic sum, when a copy, reads the graph
          for (int v : vertices) {
            int child = graph.children(v)[size_t(slot)];
            out.gather_sources.push_back({graph.type(child), out.vertex_row[size_t(child)]});
          }
        out.gathers.push_back(g);
      }
    }
  }

  // Whether each child the task reads in `slot` has one parent edge only: this one.
  bool only_parent_of_children(const scheduler::FlatBatch& graph, std::span<const int> vertices, int type,
                               int slot) const {
    for (int v : vertices)
      if (graph.parents(child_in_slot(graph, type, v, slot)).size() != 1) return false;
    return true;
  }

  // Whether the task's children in `slot` are rows of one type at a constant
  // positive stride, in order; then `view` reads them in place.
  bool children_in_order(const scheduler::FlatBatch& graph, std::span<const int> vertices, int type, int slot,
                         const BatchLayout& out, GatherLayout& view) const {
    auto child = [&](size_t r) { return child_in_slot(graph, type, vertices[r], slot); };
    if (child(0) < 0) return false;
    view.source_type = graph.type(child(0));
    view.first_row = out.vertex_row[size_t(child(0))];
    view.row_step = 1;
    if (vertices.size() > 1) {
      if (child(1) < 0) return false;
      view.row_step = out.vertex_row[size_t(child(1))] - view.first_row;
    }
    if (view.row_step < 1) return false;
    for (size_t r = 1; r < vertices.size(); ++r) {
      int c = child(r);
      if (c < 0 || graph.type(c) != view.source_type ||
          out.vertex_row[size_t(c)] != view.first_row + int(r) * view.row_step)
        return false;
    }
    return true;
  }

  const FunctionPlan& function_plan(Pass pass, size_t type) const {
    return pass == Pass::Forward ? plan_.types[type].forward : plan_.types[type].backward;
  }

  const char* name_;
  const ExecPlan& plan_;
  const std::vector<TypeSignature>& signatures_;
  int64_t pad_;
  bool pad_wide_rows_;
  RowOrder row_order_;
  std::vector<std::vector<char>> view_ok_;           // [type][slot]; slot fixed_arity: the variadic sum
  std::vector<ConcatPlacement> placements_[2];       // [pass][type]
  std::vector<std::vector<int>> pointers_[2];        // [pass][type]: row_pointer_parts (forward; empty: none)
  // Working memory, kept between batches.
  layout::AlignedOrder aligned_;
  std::vector<int> order_, position_, batch_values_, task_order_, task_rank_;
};

}  // namespace

std::unique_ptr<Planner> make_planner(const std::string& name, const ExecPlan& plan,
                                      const std::vector<TypeSignature>& signatures, const PlannerOptions& options) {
  if (name == "copy") return std::make_unique<RowPlanner>("copy", plan, signatures, 0, true, RowOrder::Schedule, options);
  // Three floats of padding: rows lose their alignment too.
  if (name == "padded")
    return std::make_unique<RowPlanner>("padded", plan, signatures, 3, false, RowOrder::Schedule, options);
  if (name == "pqtree")
    return std::make_unique<RowPlanner>("pqtree", plan, signatures, 0, true, RowOrder::PQTree, options);
  if (name == "auto")
    return std::make_unique<MeasuredPlanner>(make_planner("copy", plan, signatures, options),
                                             make_planner("pqtree", plan, signatures, options));
  throw UserError("VJIT_MEMPLAN=" + name + " is not available (valid here: copy, padded, pqtree, auto)");
}

// --- auto: copy and pqtree measured on the engine's own batches ---

MeasuredPlanner::MeasuredPlanner(std::unique_ptr<Planner> copy, std::unique_ptr<Planner> pqtree)
    : candidates_{std::move(copy), std::move(pqtree)} {}

const char* MeasuredPlanner::in_use() const { return chosen_ < 0 ? name() : candidates_[chosen_]->name(); }

// While trying: the candidate with fewer timed batches, copy on a tie, so the
// two alternate.
int MeasuredPlanner::next_candidate() const {
  if (chosen_ >= 0) return chosen_;
  return tries_[1] < tries_[0] ? 1 : 0;
}

void MeasuredPlanner::plan(const PlanInput& input, BatchLayout& out) {
  last_ = next_candidate();
  candidates_[last_]->plan(input, out);
}

void MeasuredPlanner::batch_done(double seconds, int64_t vertices) {
  if (chosen_ >= 0 || last_ < 0 || vertices <= 0) return;
  const int candidate = std::exchange(last_, -1);
  if (++tries_[candidate] > 1) seconds_per_vertex_[candidate].push_back(seconds / double(vertices));
  if (tries_[0] < kTrialsEach || tries_[1] < kTrialsEach) return;
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  chosen_ = median(seconds_per_vertex_[1]) < median(seconds_per_vertex_[0]) ? 1 : 0;
}

}  // namespace vjit::runtime
