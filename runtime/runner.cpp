#include "runtime/runner.h"

#include <algorithm>

#include "runtime/batch_rows.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

Runner::Runner(const Program& program, const ExecPlan& plan, Device& device)
    : program_(program), plan_(plan), device_(device) {
  VJIT_INTERNAL_CHECK(plan.placement && plan.placement->types.size() == plan.types.size(),
                      "the plan was lowered without its row placement (jit::lower_program)");
  push_widths_.resize(plan.types.size());
  push_index_.resize(plan.types.size());
  for (size_t t = 0; t < plan.types.size(); ++t) {
    for (Pass pass : {Pass::Forward, Pass::Backward}) {
      const size_t values = function_plan(pass, int(t)).function->nodes.size();
      max_values_ = std::max(max_values_, values);
      stacked_views_[int(pass)].emplace_back(values, nullptr);
    }
    const ir::Function& f = *plan.types[t].forward.function;
    const ValueId scattered = plan.types[t].forward.scatter_value;
    scatter_width_.push_back(scattered >= 0 ? f[scattered].shape.numel() : 0);
    push_index_[t].assign(f.nodes.size(), -1);
    for (ValueId id = 0; id < f.size(); ++id) {
      if (f[id].op != Op::Push) continue;
      push_index_[t][size_t(id)] = int(push_widths_[t].size());
      push_widths_[t].push_back(f[f[id].args[0]].shape.numel());
    }
  }
  in_place_target_.assign(max_values_, -1);
  gradient_rows_bound_.assign(max_values_, 0);
  plan_gradient_final_points();
}

void Runner::set_lanes(Lane& main, Lane& stream, bool stream_concurrent) {
  main_lane_ = &main;
  stream_lane_ = &stream;
  stream_concurrent_ = stream_concurrent;
  for (Lane* lane : {&main, &stream})
    for (std::vector<View>& views : lane->views) views.resize(max_values_);
  main.stats = &stats_;
  stream.stats = stream_concurrent ? &stream_stats_ : &stats_;
}

void Runner::merge_stream_lane() {
  stats_ += stream_stats_;
  stream_stats_ = {};
  primitive_log_.insert(primitive_log_.end(), stream_primitive_log_.begin(), stream_primitive_log_.end());
  stream_primitive_log_.clear();
}

ExecStats Runner::take_stats() {
  ExecStats s = stats_;
  stats_ = {};
  return s;
}

void Runner::record_primitives(bool on) {
  main_lane_->primitives.log = on ? &primitive_log_ : nullptr;
  stream_lane_->primitives.log = on ? (stream_concurrent_ ? &stream_primitive_log_ : &primitive_log_) : nullptr;
}

std::vector<PrimitiveRecord> Runner::take_primitive_log() {
  std::vector<PrimitiveRecord> log;
  log.swap(primitive_log_);
  return log;
}

const FunctionPlan& Runner::function_plan(Pass pass, int type) const {
  const TypePlan& t = plan_.types[size_t(type)];
  return pass == Pass::Forward ? t.forward : t.backward;
}

// A task's rows, its vertices in the order the layout gave them.
Runner::Rows Runner::task_rows(int task) const {
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatSchedule& schedule = *batch_.schedule;
  const int type = schedule.task_type[size_t(task)];
  const int count = int(schedule.task(task).size());
  return {type, task, layout.task_first_row[size_t(task)], count, layout.task_rows(type, task, count).data()};
}

Runner::Rows Runner::all_rows(int type) const {
  const BatchLayout& layout = *batch_.layout;
  return {type, -1, 0, layout.type_rows[size_t(type)], layout.rows_of(type).data()};
}

// --- binding ---

Runner::View Runner::buffer_view(Pass pass, int type, ValueId id, int64_t begin) const {
  const ValueLayout& v = batch_.layout->value(pass, type, id);
  return {arena(pass) + v.offset + begin * v.ld, v.ld};
}

Runner::View Runner::scattered_rows(int type, int64_t row) const {
  return buffer_view(Pass::Forward, type, function_plan(Pass::Forward, type).scatter_value, row);
}

void Runner::bind(Pass pass, const Rows& rows, Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  float* const base[2] = {arena(Pass::Forward), pass == Pass::Backward ? arena(Pass::Backward) : nullptr};
  for (Pass p : {Pass::Forward, Pass::Backward}) {
    if (p == Pass::Backward && pass == Pass::Forward) break;
    const ir::Function& f = function(p, rows.type);
    std::vector<View>& views = lane.views[int(p)];
    // Gradients of exclusive gather views: computed in the children's
    // scatter-gradient rows, with what is laid out in them.
    const bool in_place_grads = p == Pass::Backward && rows.task >= 0;
    if (in_place_grads) {
      for (ValueId gg : placed(rows.type).in_place_gather_grads)
        if (in_place_gather(rows, f[gg])) in_place_target_[size_t(f[gg].args[0])] = gg;
      bind_gradient_rows(rows);
    }
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      View& view = views[size_t(id)];
      const ValueLayout& own = layout.value(p, rows.type, id);
      if (own.offset >= 0) view = {base[int(p)] + own.offset + rows.begin * own.ld, own.ld};
      else view = {};
      // A value in child row space lies in its buffer as one row of d per
      // child: at most K of d per vertex row, within what the layout gave it.
      if (own.offset >= 0 && function_plan(p, rows.type).in_child_rows(id)) {
        const int64_t d = n.shape.dims[1];
        view = {base[int(p)] + own.offset + child_row_begin_[size_t(rows.type)][size_t(rows.begin)] * d, d};
      }
      if (in_place_grads) {
        const ValueId whole = own.in_concat >= 0 ? own.in_concat : id;
        const ValueId gg = in_place_target_[size_t(whole)];
        if (gg >= 0) {
          const GatherLayout& g = *in_place_gather(rows, f[gg]);
          const ValueLayout& grad = layout.scatter_grad[size_t(g.source_type)];
          const int64_t column = own.in_concat >= 0 ? own.offset - layout.value(p, rows.type, whole).offset : 0;
          view = {base[int(p)] + grad.offset + int64_t(g.first_row) * grad.ld + column, grad.ld * g.row_step};
        }
      }
      switch (n.op) {
        case Op::Param: view = {param_address(n.param), 0}; break;
        case Op::Concat:
          if (float* stacked = stacked_views_[int(p)][size_t(rows.type)][size_t(id)]) view = {stacked, 0};
          break;
        case Op::Slice: {  // of a product folded into its readers (no data): none either
          const View& whole = views[size_t(n.args[0])];
          if (whole.pointers) view = {nullptr, 0, whole.pointers, whole.parts, whole.offset + n.start};
          else view = whole.data ? View{whole.data + n.start, whole.ld} : View{};
          break;
        }
        case Op::Reshape: view = views[size_t(n.args[0])]; break;
        case Op::SliceCols:  // in child row space: the columns where they lie (child_row_step copies nothing)
          if (function_plan(p, rows.type).in_child_rows(id)) {
            const View& whole = views[size_t(n.args[0])];
            view = {whole.data + n.start, whole.ld};
          }
          break;
        case Op::Fwd: view = lane.views[int(Pass::Forward)][size_t(n.forward_value)]; break;
        case Op::ScatterGrad: {
          const ValueLayout& g = layout.scatter_grad[size_t(rows.type)];
          view = {base[int(Pass::Backward)] + g.offset + rows.begin * g.ld, g.ld};
          break;
        }
        case Op::Gather:
        case Op::GatherSum:
          if (rows.task >= 0) {
            const int slot = n.op == Op::Gather ? n.child_slot : program_.signature(rows.type).fixed_arity;
            const GatherLayout& g = layout.gather(rows.task, slot);
            if (g.is_view() && !forwarded_over_view(rows, id)) {
              view = scattered_rows(g.source_type, g.first_row);
              view.data += n.start;  // 0 but for a Gather of part of the row (ir::gather_slices)
              view.ld *= g.row_step;
            }
          }
          break;
        default: break;
      }
      if (p == Pass::Forward && placed(rows.type).row_pointer_parts[size_t(id)] > 0) {
        const int64_t parts = placed(rows.type).row_pointer_parts[size_t(id)];
        view = {nullptr, 0, row_pointers_[size_t(rows.type)][size_t(id)].data() + rows.begin * parts, parts};
      }
      if (p == Pass::Backward) {
        const GradientPointer& to = placed(rows.type).gradient_pointers[size_t(id)];
        if (to.gradient >= 0 && gradient_rows_bound_[size_t(to.gradient)])
          view = {nullptr, 0, gradient_rows_[size_t(rows.type)][size_t(to.gradient)].data() + rows.begin, 1, to.column};
      }
    }
    if (in_place_grads) {
      for (ValueId gg : placed(rows.type).in_place_gather_grads) in_place_target_[size_t(f[gg].args[0])] = -1;
      for (ValueId gg : placed(rows.type).pointer_gather_grads) gradient_rows_bound_[size_t(f[gg].args[0])] = 0;
    }
  }
}

const GatherLayout* Runner::in_place_gather(const Rows& rows, const Node& gather_grad) const {
  if (rows.task < 0) return nullptr;
  const int slot = gather_grad.target == ir::GatherGradTarget::Slot ? gather_grad.child_slot
                                                                    : program_.signature(rows.type).fixed_arity;
  const GatherLayout& g = batch_.layout->gather(rows.task, slot);
  return g.is_exclusive_view() ? &g : nullptr;
}

bool Runner::computed_in_place(const Rows& rows, const Node& gather_grad, ValueId id) const {
  const std::vector<ValueId>& in_place = placed(rows.type).in_place_gather_grads;
  return in_place_gather(rows, gather_grad) && std::find(in_place.begin(), in_place.end(), id) != in_place.end();
}

bool Runner::was_forwarded(int child, int parent, int slot, const Node& node) const {
  const BatchLayout& layout = *batch_.layout;
  if (layout.forward_parent[size_t(child)] != parent || layout.forward_slot[size_t(child)] != slot) return false;
  // The parts forwarded into the node's columns must cover them.
  int64_t covered = 0;
  for (const ForwardedPart& part : plan_.types[size_t(batch_.graph->type(child))].forward.forwarded)
    if (part.start >= node.start && part.start + part.width <= node.start + node.shape.numel()) covered += part.width;
  return covered == node.shape.numel();
}

bool Runner::forwarded_over_view(const Rows& rows, ValueId gather) const {
  return runtime::forwarded_over_view(plan_, *batch_.layout, rows.type, rows.task, gather);
}

// Fills, for the task being bound, where each row of a gradient written
// through pointers goes: the child's scatter-gradient row where this is its
// one contribution, else the gradient's own row (the GatherGrad adds it).
// Not where the task's GatherGrad is computed in an in-place gather.
void Runner::bind_gradient_rows(const Rows& rows) {
  const BatchLayout& layout = *batch_.layout;
  const ir::Function& f = function(Pass::Backward, rows.type);
  for (ValueId g : placed(rows.type).pointer_gather_grads) {
    const Node& n = f[g];
    if (in_place_gather(rows, n)) continue;
    const ValueId gradient = n.args[0];
    gradient_rows_bound_[size_t(gradient)] = 1;
    const ValueLayout& own = layout.value(Pass::Backward, rows.type, gradient);
    float** table = gradient_rows_[size_t(rows.type)][size_t(gradient)].data() + rows.begin;
    for (int64_t r = 0; r < rows.count; ++r) {
      RowRef child = gather_source(layout, *batch_.graph, rows.task, n.child_slot, rows.vertices, r);
      table[r] = layout.assigned_once[size_t(child.type)][size_t(child.row)]
                     ? scatter_gradient_row(child.type, int64_t(child.row)) + n.start
                     : arena(Pass::Backward) + own.offset + (rows.begin + r) * own.ld;
    }
  }
}


void Runner::size_row_tables() {
  const size_t types = plan_.types.size();
  row_pointers_.resize(types);
  gradient_rows_.resize(types);
  accumulated_rows_.resize(types);
  for (size_t t = 0; t < types; ++t) {
    const TypePlacement& placement = placed(int(t));
    const size_t rows = size_t(batch_.layout->type_rows[t]);
    const std::vector<int>& parts = placement.row_pointer_parts;
    row_pointers_[t].resize(parts.size());
    for (size_t id = 0; id < parts.size(); ++id)
      if (parts[id] > 0) row_pointers_[t][id].resize(rows * size_t(parts[id]));
    const std::vector<GradientPointer>& pointers = placement.gradient_pointers;
    gradient_rows_[t].resize(pointers.size());
    for (size_t id = 0; id < pointers.size(); ++id)
      if (pointers[id].gradient == ValueId(id)) gradient_rows_[t][id].resize(rows);
    accumulated_rows_[t].resize(placement.accumulated_parts.size());
    for (std::vector<float*>& table : accumulated_rows_[t]) table.resize(rows);
  }
}

float* Runner::scatter_gradient_row(int type, int64_t row) const {
  const ValueLayout& s = batch_.layout->scatter_grad[size_t(type)];
  return arena(Pass::Backward) + s.offset + row * s.ld;
}

float* Runner::scatter_gradient_row(int vertex) const {
  return scatter_gradient_row(batch_.graph->type(vertex), int64_t(batch_.layout->vertex_row[size_t(vertex)]));
}

// Points each row of the task's gradient parts at the row its accumulating
// kernel adds it into, as the planner decided (BatchLayout::
// accumulated_to_child): the child's scatter-gradient row, else the part's
// own row, zeroed, from which the GatherGrad adds it.
void Runner::bind_accumulated_rows(const Rows& rows, Lane& lane) {
  const std::vector<AccumulatedPart>& parts = placed(rows.type).accumulated_parts;
  if (parts.empty()) return;
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatBatch& graph = *batch_.graph;
  const ir::Function& f = function(Pass::Backward, rows.type);
  const int fixed_arity = program_.signature(rows.type).fixed_arity;
  const uint64_t* to_child = layout.accumulated_to_child[size_t(rows.type)].data() + rows.begin;
  int group = -1;
  for (size_t k = 0; k < parts.size(); ++k) {
    const AccumulatedPart& part = parts[k];
    const Node& gg = f[part.gather_grad];
    if (k == 0 || parts[k - 1].gather_grad != part.gather_grad) ++group;
    const ValueLayout& own = layout.value(Pass::Backward, rows.type, part.value);
    float** table = accumulated_rows_[size_t(rows.type)][k].data() + rows.begin;
    std::vector<float*>& own_rows = accumulated_own_rows_;
    own_rows.clear();
    for (int64_t r = 0; r < rows.count; ++r) {
      if (to_child[r] >> group & 1) {
        const int child = accumulating_child(gg, graph.children(rows.vertices[r]), fixed_arity);
        const int64_t start = gg.target == ir::GatherGradTarget::Slot ? gg.start : 0;
        table[r] = scatter_gradient_row(child) + start + part.column;
      } else {
        table[r] = arena(Pass::Backward) + own.offset + (rows.begin + r) * own.ld;
        own_rows.push_back(table[r]);
      }
    }
    // The part's own rows that are used zeroed: one fill through their table.
    if (!own_rows.empty()) {
      const int64_t count = int64_t(own_rows.size());
      if (lane.primitives.log) [[unlikely]] lane.at(Pass::Backward, rows.type, rows.task, count, "zero gradient parts");
      device_.fill_rows(lane, count, part.width, 0.0f, {nullptr, 0, own_rows.data(), 1, 0});
    }
    lane.views[int(Pass::Backward)][size_t(part.value)] = {nullptr, 0, table, 1, 0};
  }
}

bool Runner::accumulates(const Rows& rows, ValueId gather_grad, const Lane& lane) const {
  if (rows.task < 0) return false;
  for (const AccumulatedPart& part : placed(rows.type).accumulated_parts)
    if (part.gather_grad == gather_grad) return lane.views[int(Pass::Backward)][size_t(part.value)].pointers != nullptr;
  return false;
}

// --- passes ---

void Runner::begin_forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result) {
  batch_ = batch;
  options_ = options;
  has_batch_ = false;
  result_ = &result;
  const scheduler::FlatBatch& graph = *batch.graph;
  result.objective = 0.0;
  result.pushes.reset(graph.num_samples(),
                      [&](int s) { return graph.sample_offset(s + 1) - graph.sample_offset(s); });
  for (int v = 0; v < graph.num_vertices(); ++v) result.pushes.add_vertex(push_widths_[size_t(graph.type(v))]);
  result.pushes.allocate();
  stats_.tasks += batch.schedule->num_tasks();
  size_row_tables();
  count_child_rows();
}

void Runner::run_forward(bool streaming) {
  point_forwarded_parts();  // the arenas are where they stay for the pass
  if (streaming) {
    run_forward_streaming();
  } else {
    run_phase(Pass::Forward, ir::Phase::Eager, *main_lane_);
    for (int t = 0; t < batch_.schedule->num_tasks(); ++t) run_task(Pass::Forward, t, *main_lane_);
  }
  run_phase(Pass::Forward, ir::Phase::Lazy, *main_lane_);
}

void Runner::end_forward() {
  result_ = nullptr;
  has_batch_ = options_.backward;
}

void Runner::begin_backward() {
  VJIT_USER_CHECK(has_batch_, "backward() needs a forward() with RunOptions::backward set before it");
  has_batch_ = false;
}

void Runner::run_backward() {
  run_phase(Pass::Backward, ir::Phase::Eager, *main_lane_);
  for (int t = batch_.schedule->num_tasks(); t-- > 0;) run_task(Pass::Backward, t, *main_lane_);
  told_point_ = -1;
  if (observer_) tell_gradients_final(0);
  run_phase(Pass::Backward, ir::Phase::Lazy, *main_lane_);
  if (observer_) tell_gradients_final(int(final_at_point_.size()) - 1);
}

void Runner::run_task(Pass pass, int task, Lane& lane) {
  const Rows rows = task_rows(task);
  const int64_t start = trace_ ? trace_->now() : 0;
  bind(pass, rows, lane);
  if (pass == Pass::Backward) bind_accumulated_rows(rows, lane);
  run_steps(pass, rows, function_plan(pass, rows.type).core, lane);
  if (trace_) [[unlikely]] {
    TraceArgs args;
    args.type = rows.type;
    args.task = task;
    args.rows = rows.count;
    trace_->record({}, TraceCategory::Task, start, args);  // named by its vertex type
  }
}

void Runner::run_phase(Pass pass, ir::Phase phase, Lane& lane) {
  for (int t = 0; t < program_.num_types(); ++t) run_type_phase(pass, phase, t, lane);
}

void Runner::run_type_phase(Pass pass, ir::Phase phase, int type, Lane& lane) {
  const BatchLayout& layout = *batch_.layout;
  if (layout.type_rows[size_t(type)] == 0) return;
  const FunctionPlan& fp = function_plan(pass, type);
  const std::vector<Step>& steps = phase == ir::Phase::Eager ? fp.eager : fp.lazy;
  if (steps.empty()) return;
  const Rows rows = all_rows(type);
  const uint64_t views = layout.read_view_slots[size_t(type)];
  const TypePlacement& placed = plan_.placement->types[size_t(type)];
  const std::vector<uint64_t>& reads = (phase == ir::Phase::Eager ? placed.eager_reads : placed.lazy_reads)[int(pass)];
  // Runs of steps over every row alternate with runs that read gather views
  // and so run task by task.
  for (size_t begin = 0; begin < steps.size();) {
    const bool per_task = (reads[begin] & views) != 0;
    size_t end = begin + 1;
    while (end < steps.size() && ((reads[end] & views) != 0) == per_task) ++end;
    // Told of each lazy backward step (one at a time where it can): the
    // gradients it finishes can be summed while the next steps run.
    const bool told = observer_ && pass == Pass::Backward && phase == ir::Phase::Lazy;
    if (per_task) {
      run_steps_per_task(pass, type, std::span(steps).subspan(begin, end - begin), lane);
      if (told) tell_gradients_final(lazy_point_begin_[size_t(type)] + int(end));
    } else {
      bind(pass, rows, lane);
      for (size_t first = begin; first < end;) {
        const size_t last = told ? first + 1 : end;
        run_steps(pass, rows, std::span(steps).subspan(first, last - first), lane);
        if (told) tell_gradients_final(lazy_point_begin_[size_t(type)] + int(last));
        first = last;
      }
    }
    begin = end;
  }
}

// A chain's tasks read their children as views that continue one another
// (task t's children are the rows task t-1 wrote, in order), so the weight
// gradients of a whole run of them are one GEMM over all its rows instead of
// one small GEMM per task. Phase steps read gathered values only through
// bind(); the gathers themselves run in the tasks.
void Runner::run_steps_per_task(Pass pass, int type, std::span<const Step> steps, Lane& lane) {
  const scheduler::FlatSchedule& schedule = *batch_.schedule;
  auto next_of_type = [&](int t) {
    do ++t;
    while (t < schedule.num_tasks() && schedule.task_type[size_t(t)] != type);
    return t;
  };
  for (int t = next_of_type(-1); t < schedule.num_tasks();) {
    Rows rows = task_rows(t);
    for (t = next_of_type(t); t < schedule.num_tasks() && views_continue(rows, t); t = next_of_type(t))
      rows.count += int64_t(schedule.task(t).size());
    bind(pass, rows, lane);
    run_steps(pass, rows, steps, lane);
  }
}

bool Runner::views_continue(const Rows& rows, int next) const {
  const BatchLayout& layout = *batch_.layout;
  // The pqtree order may place a type's tasks in another order than the schedule's.
  if (layout.task_first_row[size_t(next)] != rows.begin + rows.count) return false;
  // A gather one task reads from its buffer (forwarded_over_view), the other as a view.
  if (!layout.forward_parent.empty() &&
      layout.unviewed_targets[size_t(rows.task)] != layout.unviewed_targets[size_t(next)])
    return false;
  const uint64_t views = layout.view_slots[size_t(rows.type)];
  const int slots = program_.signature(rows.type).fixed_arity + 1;  // the fixed slots and the variadic sum
  for (int slot = 0; slot < slots; ++slot) {
    if ((views >> slot & 1) == 0) continue;  // a copy in every task: the type's own buffer, row after row
    const GatherLayout& a = layout.gather(rows.task, slot);
    const GatherLayout& b = layout.gather(next, slot);
    if (!a.is_view() || !b.is_view() || a.source_type != b.source_type || a.row_step != b.row_step ||
        a.exclusive != b.exclusive || b.first_row != a.first_row + int(rows.count) * a.row_step)
      return false;
  }
  return true;
}

// VJIT_ROW_PLACEMENT=tables: for each vertex whose type forwards parts, where each
// part is written a second time: into the gather row of the parent the
// planner chose (BatchLayout::forward_parent), where the planner found one
// of its gathers to take the part (BatchLayout::forward_target), else into
// the part's own row again.
void Runner::point_forwarded_parts() {
  const BatchLayout& layout = *batch_.layout;
  if (layout.forward_parent.empty()) return;
  forward_rows_.resize(plan_.types.size());
  for (size_t c = 0; c < plan_.types.size(); ++c) {
    const std::vector<ForwardedPart>& parts = plan_.types[c].forward.forwarded;
    forward_rows_[c].resize(parts.size());
    for (std::vector<float*>& to : forward_rows_[c]) to.resize(size_t(layout.type_rows[c]));
    for (int r = 0; r < layout.type_rows[c]; ++r) {
      const int v = layout.rows_of(int(c))[size_t(r)];
      for (size_t j = 0; j < parts.size(); ++j) {
        float* target = forward_target(int(c), v, r, j);
        forward_rows_[c][j][size_t(r)] = target ? target : buffer_view(Pass::Forward, int(c), parts[j].value, r).data;
      }
    }
  }
}

// Where part j of `vertex` (row `row` of its type) is written a second time:
// the gather row of the parent the planner chose, or nullptr.
float* Runner::forward_target(int type, int vertex, int row, size_t j) {
  const BatchLayout& layout = *batch_.layout;
  const ForwardedPart& part = plan_.types[size_t(type)].forward.forwarded[j];
  const int i = layout.forward_target[size_t(type)][size_t(row) * plan_.types[size_t(type)].forward.forwarded.size() + j];
  if (i < 0) return nullptr;
  const int p = layout.forward_parent[size_t(vertex)];
  const int parent_type = batch_.graph->type(p);
  const ForwardTarget& g = placed(parent_type).forward_targets[size_t(i)];
  const ValueLayout& at = layout.value(Pass::Forward, parent_type, g.gather);
  return arena(Pass::Forward) + at.offset + int64_t(layout.vertex_row[size_t(p)]) * at.ld + (part.start - g.start);
}

Runner::View Runner::forwarded_rows(const Rows& rows, ValueId value) {
  const std::vector<ForwardedPart>& parts = plan_.types[size_t(rows.type)].forward.forwarded;
  for (size_t j = 0; j < parts.size(); ++j)
    if (parts[j].value == value) return {nullptr, 0, forward_rows_[size_t(rows.type)][j].data() + rows.begin, 1};
  VJIT_INTERNAL_CHECK(false, "a fused step repeats an output that is not a forwarded part");
}

void Runner::run_forward_streaming() {
  const std::vector<int> order = stream_order();
  start_stream([&] {
    for (int t : order) {
      run_type_phase(Pass::Forward, ir::Phase::Eager, t, *stream_lane_);
      eager_done(t);
    }
  });
  std::exception_ptr task_error;
  try {
    for (int t = 0; t < batch_.schedule->num_tasks(); ++t) {
      for_each_input_type(t, [&](int type) { wait_for_eager(type); });
      run_task(Pass::Forward, t, *main_lane_);
    }
  } catch (...) {
    task_error = std::current_exception();
  }
  const std::exception_ptr stream_error = join_stream();
  if (task_error) std::rethrow_exception(task_error);
  if (stream_error) std::rethrow_exception(stream_error);
}

std::vector<int> Runner::stream_order() const {
  std::vector<int> order;
  std::vector<char> seen(size_t(program_.num_types()), 0);
  for (int type : batch_.schedule->task_type)
    if (!seen[size_t(type)]) {
      seen[size_t(type)] = 1;
      order.push_back(type);
    }
  return order;
}

// --- gradients made final ---

void Runner::plan_gradient_final_points() {
  final_point_.assign(size_t(program_.model().size()), 0);
  int points = 1;
  for (const TypePlan& type : plan_.types) {
    lazy_point_begin_.push_back(points - 1);
    points += int(type.backward.lazy.size());
  }
  for (size_t t = 0; t < plan_.types.size(); ++t) {
    const FunctionPlan& fp = plan_.types[t].backward;
    const ir::Function& f = *fp.function;
    std::vector<int> lazy_step_of(f.nodes.size(), -1);
    for (size_t i = 0; i < fp.lazy.size(); ++i)
      if (fp.lazy[i].node >= 0) lazy_step_of[size_t(fp.lazy[i].node)] = int(i);
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      if (n.op != Op::ParamGrad && n.op != Op::EmbeddingGrad) continue;
      int point = 0;  // eager and core steps run before point 0
      if (fp.phases[size_t(id)] == ir::Phase::Lazy)
        // A lazy writer that is not a step of its own: final only at the end.
        point = lazy_step_of[size_t(id)] >= 0 ? lazy_point_begin_[t] + lazy_step_of[size_t(id)] + 1 : points - 1;
      int& final_point = final_point_[size_t(n.param)];
      final_point = std::max(final_point, point);
    }
  }
  final_at_point_.assign(size_t(points), {});
  for (size_t p = 0; p < final_point_.size(); ++p) final_at_point_[size_t(final_point_[p])].push_back(int(p));
}

void Runner::tell_gradients_final(int point) {
  for (; told_point_ < point; ++told_point_) {
    const std::vector<int>& params = final_at_point_[size_t(told_point_ + 1)];
    if (!params.empty()) observer_->gradients_final(params);
  }
  observer_->between_steps();
}

}  // namespace vjit::runtime
