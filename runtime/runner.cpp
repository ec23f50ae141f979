#include "runtime/runner.h"

#include <algorithm>

#include "runtime/row_placement.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

Runner::Runner(const Program& program, const ExecPlan& plan) : program_(program), plan_(plan) {
  VJIT_INTERNAL_CHECK(plan.placement && plan.placement->types.size() == plan.types.size(),
                      "the plan was lowered without its row placement (jit::lower_program)");
  push_widths_.resize(plan.types.size());
  push_index_.resize(plan.types.size());
  for (size_t t = 0; t < plan.types.size(); ++t) {
    for (const FunctionPlan* fp : {&plan.types[t].forward, &plan.types[t].backward})
      max_values_ = std::max(max_values_, fp->function->nodes.size());
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
  plan_gradient_final_points();
}

void Runner::set_lanes(Lane& main, Lane& stream, bool stream_concurrent) {
  main_lane_ = &main;
  stream_lane_ = &stream;
  stream_concurrent_ = stream_concurrent;
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
}

void Runner::run_forward(bool streaming) {
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
  bind(pass, rows, lane);
  run_steps(pass, rows, function_plan(pass, rows.type).core, lane);
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
