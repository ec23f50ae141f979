#pragma once
// Memory planning (Cavs §3.3 "dynamic tensors", ED-Batch §4 memory layout): for
// each batch a planner decides where every batched value lives, as plain data
// the executor follows — a BatchLayout. Nothing downstream assumes a leading
// dimension equal to the width of a row.
//
//   rows     each vertex type's vertices get rows 0..n-1 of that type, task by
//            task in schedule order, so a task owns a contiguous range of rows
//   values   for every (pass, type, IR value): an offset into the pass's arena
//            and a leading dimension (floats from one row to the next)
//   gathers  for every (task, fixed gather slot): a *view* (the children's
//            scattered rows already lie in one buffer at a constant stride,
//            in order: read them in place) or a *copy* (row r comes from the
//            listed (type, row))
//
// Concat in place (VJIT_INPLACE_CONCAT, both planners): a value computed into
// a buffer of its own that a Concat reads (directly or through reshapes) is
// instead written into its columns of the Concat's buffer — the gate gradients a backward concatenates
// before its weight-gradient GEMM, the h and c a Tree-LSTM cell scatters — so
// the Concat copies nothing. On the CPU executor a Concat may itself lie in
// another, its own parts then in place in both (nested_concats).
//
// Wide rows padded (VJIT_PAD_WIDE_ROWS, both planners): a row of a multiple of
// 256 floats gets a leading dimension 16 floats longer, so that consecutive
// rows do not fall into the same cache sets (GEMMs over such buffers ran up to
// twice as fast, memplan.cpp).
//
// Planners (VJIT_MEMPLAN):
//   copy     rows packed (ld = width); a gather is a view where the children's
//            rows lie at a constant stride in one buffer and only the task's
//            own steps read the gathered value, else a copy
//   padded   a test planner: like copy, but every row is padded by a few floats
//            (ld > width) and every gather is a copy; it exists to prove that
//            the executor follows the layout
//   pqtree   ED-Batch's PQ-tree layout (layout/aligned_order.h), per batch: one
//            order of every vertex of the batch in which each task's vertices
//            are consecutive and, wherever the constraints allow, each task's
//            children in a gather slot are consecutive and in the task's own
//            order. Rows follow that order (type by type), so those gathers are
//            views. Gathers read outside the tasks (the backward's weight
//            gradients read the gathered children over every row of a type)
//            may be views too: the executor runs the steps that read them task
//            by task (BatchLayout::view_slots). A gather_sum whose rows each
//            have one variadic child is a view as well. CPU executor only.
//   auto     copy and pqtree measured on the engine's first batches, then the
//            faster one (MeasuredPlanner, below)
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/exec_plan.h"
#include "scheduler/schedule.h"
#include "vjit/graph.h"

namespace vjit::runtime {

// Where one value of one vertex type lives: row r at arena + offset + r·ld.
// offset < 0: the value has no buffer of its own (a view of another value, a
// parameter, a sink, or folded into another step).
// in_concat >= 0: the value is written straight into its part of that Concat's
// buffer (same ld), so the Concat copies nothing for it (concat in place).
struct ValueLayout {
  int64_t offset = -1;
  int64_t ld = 0;
  ir::ValueId in_concat = -1;
};

// A row of a vertex type.
struct RowRef {
  int type = -1;
  int row = -1;
};

// How the rows of one task read one fixed gather slot, and (backward) add
// their gradient into the children's scatter gradients.
struct GatherLayout {
  // A view: row r of the task is row first_row + r·row_step of type
  // source_type's scattered value. Otherwise (source_type < 0) a copy: row r
  // comes from BatchLayout::gather_sources[first_source + r].
  int source_type = -1;
  int first_row = 0;
  int row_step = 1;
  int first_source = 0;
  // A view whose children are each read by this one gather of this one parent
  // (no other parent, no other slot): the backward may then compute the
  // gather's gradient straight into their scatter-gradient rows instead of
  // adding it there from a buffer of its own.
  bool exclusive = false;

  bool is_view() const { return source_type >= 0; }
  bool is_exclusive_view() const { return is_view() && exclusive; }
};

struct BatchLayout {
  std::string planner;  // the planner's name
  int num_types = 0;

  // Rows.
  std::vector<int> type_rows;       // rows per type
  std::vector<int> type_row_begin;  // per type: where its rows start in row_vertex
  std::vector<int> row_vertex;      // flat vertex ids, type after type, in row order
  std::vector<int> vertex_row;      // per flat vertex id: its row in its type
  std::vector<int> task_first_row;  // per task: its first row in its type

  // Buffers: one arena per pass, sized in floats.
  int64_t arena_floats[2] = {0, 0};
  std::vector<int> value_begin[2];       // per type: index of its value 0 in values[pass]
  std::vector<ValueLayout> values[2];    // per (type, value id)
  std::vector<ValueLayout> scatter_grad; // per type: the gradient of what it scatters (backward arena)

  // Gathers: task t, fixed slot k at gathers[gather_begin[t] + k]; slot
  // fixed_arity (every task has it) is the variadic gather_sum, a view only
  // when each row has exactly one variadic child (else the executor sums the
  // children itself and first_source is unused).
  std::vector<int> gather_begin;
  std::vector<GatherLayout> gathers;
  std::vector<RowRef> gather_sources;
  // Per type: bit k set when slot k (fixed_arity: the variadic sum) is a view
  // in some task. A step outside the tasks that reads such a gather must run
  // task by task: the rows of that gather are not one buffer.
  std::vector<uint64_t> view_slots;
  // The pqtree planner's constraints (one per task and gather slot it could
  // make a view) and how many of them hold in its order; 0 for the others.
  int aligned_batches = 0, aligned_satisfied = 0;

  // Row placement decided per batch, once the rows and buffers are laid out
  // (runtime/batch_rows.h, every planner).
  std::vector<int> vertex_task;  // per flat vertex: its task
  // VJIT_ROW_PLACEMENT=tables, per flat vertex: the parent its kernels write its
  // forwarded parts into (-1: none), and that parent's slot it fills; empty
  // when no type forwards. Per task: bit i when its gather forward_targets[i]
  // (TypePlacement) was a view a Concat would copy, which the children
  // forward into instead: the task reads its own buffer.
  std::vector<int> forward_parent, forward_slot;
  std::vector<uint64_t> unviewed_targets;
  // Per forwarding type, per row r and forwarded part j (at r·parts + j): the
  // parent's forward target (TypePlacement::forward_targets) that takes the
  // part, or -1 where the part is written into its own row again.
  std::vector<std::vector<int>> forward_target;
  // Per type: the gather slots some task reads as a view (view_slots less the
  // gathers forwarded over): the phase steps reading those run task by task.
  std::vector<uint64_t> read_view_slots;
  // Per type, per scatter-gradient row: 1 when the row's one contribution is a
  // parent's whole-slot GatherGrad that is not computed in place; the backward
  // leaves such a row unzeroed and that GatherGrad assigns it. Empty for a
  // batch no backward follows (PlanInput::backward).
  std::vector<std::vector<uint8_t>> assigned_once;
  // VJIT_ROW_PLACEMENT=tables, per type, per row: bit i when the parts of the
  // type's i-th GatherGrad with accumulated parts (TypePlacement::
  // accumulated_parts, in order) go straight into the child's
  // scatter-gradient row; else into the row's own, zeroed, and that
  // GatherGrad adds them. Only the first row of a task that sends to a child
  // does (two rows of one kernel call never add into one row), and only to a
  // Slot's child or the one variadic child of a row with one. Empty for a
  // batch no backward follows.
  std::vector<std::vector<uint64_t>> accumulated_to_child;

  const ValueLayout& value(Pass pass, int type, ir::ValueId id) const {
    return values[int(pass)][size_t(value_begin[int(pass)][size_t(type)] + id)];
  }
  const GatherLayout& gather(int task, int slot) const {
    return gathers[size_t(gather_begin[size_t(task)] + slot)];
  }
  std::span<const int> rows_of(int type) const {
    return {row_vertex.data() + type_row_begin[size_t(type)], size_t(type_rows[size_t(type)])};
  }
  // A task's vertices in row order (the schedule's order, or the planner's).
  std::span<const int> task_rows(int type, int task, int count) const {
    return rows_of(type).subspan(size_t(task_first_row[size_t(task)]), size_t(count));
  }
};

// The row that row r of a task's fixed gather slot reads in the forward (and
// adds its gradient to in the backward): the view's row, the copy's listed
// source, or, with task -1 (every vertex of the type at once: lazy batching
// off), the child the graph names. `vertices` are the rows' vertices.
inline RowRef gather_source(const BatchLayout& layout, const scheduler::FlatBatch& graph, int task, int slot,
                            const int* vertices, int64_t r) {
  if (task >= 0) {
    const GatherLayout& g = layout.gather(task, slot);
    if (g.is_view()) return {g.source_type, g.first_row + int(r) * g.row_step};
    return layout.gather_sources[size_t(g.first_source + r)];
  }
  const int child = graph.children(vertices[r])[size_t(slot)];
  return {graph.type(child), layout.vertex_row[size_t(child)]};
}

// What a planner reads.
struct PlanInput {
  const scheduler::FlatBatch* graph = nullptr;
  const scheduler::FlatSchedule* schedule = nullptr;
  // Whether a backward pass follows: only then does the layout say which
  // scatter-gradient rows are assigned (BatchLayout::assigned_once).
  bool backward = true;
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual const char* name() const = 0;
  // Lays the batch out into `out`, reusing its buffers' capacity.
  virtual void plan(const PlanInput& input, BatchLayout& out) = 0;
  // The planner that lays batches out now: name(), except for auto (the one
  // it chose, or "auto" while its candidates still take turns).
  virtual const char* in_use() const { return name(); }
  // How long the batch laid out by the last plan() took — planning, the
  // forward and, when it trains, the backward — and its vertices. Only auto
  // learns from it.
  virtual void batch_done(double /*seconds*/, int64_t /*vertices*/) {}
};

// VJIT_MEMPLAN=auto: the pqtree layout is used only where it pays, and that is
// measured on the engine's own batches, not assumed. copy and pqtree take
// turns on the first 2·kTrialsEach batches (copy first); the first batch of
// each only warms up (the arenas grow, pages are touched) and is not counted;
// then the one with the lower median time per vertex (batches differ in size)
// lays out every later batch; a tie keeps copy.
class MeasuredPlanner final : public Planner {
 public:
  static constexpr int kTrialsEach = 4;
  MeasuredPlanner(std::unique_ptr<Planner> copy, std::unique_ptr<Planner> pqtree);
  const char* name() const override { return "auto"; }
  const char* in_use() const override;
  void plan(const PlanInput& input, BatchLayout& out) override;
  void batch_done(double seconds, int64_t vertices) override;

 private:
  int next_candidate() const;

  std::unique_ptr<Planner> candidates_[2];
  std::vector<double> seconds_per_vertex_[2];
  int tries_[2] = {0, 0};
  int last_ = -1;    // the candidate that laid out the batch not yet timed
  int chosen_ = -1;  // after the trials: 0 copy, 1 pqtree
};

// The planner named by VJIT_MEMPLAN ("copy", "padded", "pqtree", "auto");
// throws UserError naming the valid ones otherwise. `plan` and `signatures`
// must outlive it.
struct PlannerOptions {
  bool inplace_concat = true;     // lay Concat arguments out in place (above)
  bool pad_wide_rows = true;      // rows of a multiple of 256 floats get 16 more (above)
  bool gathers_in_concat = true;  // with inplace_concat, gathers too (VJIT_ROW_PLACEMENT=slices, CPU executor only)
  bool nested_concats = true;     // with inplace_concat, a Concat inside another too (CPU executor only)
};
// Forward values the executor reads through row pointers get no buffer
// (VJIT_ROW_PLACEMENT=tables: ExecPlan::placement, runtime/row_placement.h).

std::unique_ptr<Planner> make_planner(const std::string& name, const ExecPlan& plan,
                                      const std::vector<TypeSignature>& signatures,
                                      const PlannerOptions& options = {});

}  // namespace vjit::runtime
