#pragma once
// The plan runner: the part of running an execution plan (runtime/exec_plan.h)
// over a planned batch (runtime/memplan.h) that is the same on every device.
// It keeps the batch being run and what the passes hand each other (the
// objective and pushed values of a forward, whether a backward may follow),
// sizes the pushes, and walks the plan: per pass, the eager steps of every
// vertex type, the tasks (in schedule order forward, reversed backward), the
// lazy steps. A type's eager and lazy steps run over all its rows at once,
// except runs of steps that read a gather the layout made a view in some task
// (BatchLayout::read_view_slots): those run task by task, joined where the
// tasks' views continue one another. In the backward it tells a
// BackwardObserver which parameters' gradients are final, step by step.
//
// Before steps run over some rows, bind() resolves every value of the vertex
// function from the layout to a View: a value's own buffer (arena of its pass,
// offset and leading dimension), a parameter, a slice or reshape of another
// view, the forward value a Fwd names, the scatter gradient, the children's
// scattered rows for a gather the layout made a view (or, in the backward, the
// children's scatter-gradient rows for the gradient of an exclusive one), or a
// row table (ExecPlan::placement's row pointers). Views hold addresses in the
// device's memory; the runner never reads through them.
//
// A device (CpuExecutor, CudaExecutor) derives from it and provides the
// primitives (runtime/device.h), where its arenas and parameters are, and the
// second lane of a streamed forward; the runner binds the layout's row tables
// and, for a device that asks, times and traces the steps and tasks
// (observe_steps). Work is issued on a Lane: the host
// thread's, or the one the forward's eager steps are streamed on
// (VJIT_STREAMING), each with its counters and primitive recorder.
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/products.h"
#include "runtime/row_placement.h"
#include "runtime/touched_rows.h"
#include "runtime/trace.h"

namespace vjit::runtime {

class Runner : public Executor {
 public:
  ExecStats take_stats() override;
  void record_primitives(bool on) override;
  std::vector<PrimitiveRecord> take_primitive_log() override;
  std::vector<StepTime> step_profile() const override;
  void reset_step_profile() override;

 protected:
  // A range of rows of one type: a task, a run of tasks, or every vertex of
  // the type (task -1).
  struct Rows {
    int type = 0;
    int task = -1;
    int64_t begin = 0, count = 0;
    const int* vertices = nullptr;  // flat vertex id of each row
  };
  using View = runtime::View;
  using Lane = runtime::Lane;
  // Row i of row r's value, stored as `stored_rows` rows of `row_ld` floats
  // (a per-vertex matrix operand as its product reads it), whether the view
  // is a buffer (ld 0: uniform) or row pointers.
  static const float* stored_row(const View& v, int64_t r, int64_t i, int64_t stored_rows, int64_t row_ld) {
    if (v.pointers == nullptr) return v.data + r * v.ld + i * row_ld;
    const int64_t per_part = stored_rows / v.parts;
    return v.pointers[r * v.parts + i / per_part] + v.offset + (i % per_part) * row_ld;
  }

  // `device` runs the primitives of every step (the derived device itself).
  Runner(const Program& program, const ExecPlan& plan, Device& device);
  // The device's lanes: `main` issues everything but a streamed forward's
  // eager steps, which `stream` issues. With `stream_concurrent` the stream
  // lane runs on a thread of its own and keeps its own counters and list
  // until merge_stream_lane(); else it shares the main lane's.
  void set_lanes(Lane& main, Lane& stream, bool stream_concurrent);
  void merge_stream_lane();

  const FunctionPlan& function_plan(Pass pass, int type) const;
  const ir::Function& function(Pass pass, int type) const { return *function_plan(pass, type).function; }
  Rows task_rows(int task) const;
  Rows all_rows(int type) const;

  // --- the device's part ---
  // Row 0 of a pass's arena (sized for the batch), and a parameter's values.
  virtual float* arena(Pass pass) const = 0;
  // Row `row` of vertex type `type`'s scatter gradient in the backward arena.
  float* scatter_gradient_row(int type, int64_t row) const;
  // Vertex `vertex`'s row of its type's scatter gradient.
  float* scatter_gradient_row(int vertex) const;
  virtual float* param_address(int param) const = 0;
  // Runs the steps in turn (run_step, or observe_step when observe_steps_),
  // each checked after it with check_finite_ in the forward.
  void run_steps(Pass pass, const Rows& rows, std::span<const Step> steps, Lane& lane);
  // Steps timed (VJIT_PROFILE: step_profile()) and steps and tasks traced
  // (VJIT_TRACE: to `trace`, null: off) from now on (runtime/observed_steps.cpp).
  void observe_steps(bool profile, TraceRecorder* trace);
  // VJIT_CHECK_FINITE: the values the forward step wrote for the rows;
  // throws UserError at the first NaN or ±Inf (runtime/check_finite.cpp).
  void check_finite(const Rows& rows, const Step& step, Lane& lane);
  [[noreturn]] void throw_non_finite(const Rows& rows, int64_t row, const Step& step, ir::ValueId value,
                                     int64_t element, float found) const;
  bool observe_steps_ = false;
  bool check_finite_ = false;
  TraceRecorder* trace_ = nullptr;  // null unless VJIT_TRACE
  // Where the pushed values go, a parameter's gradient, and the rows of the
  // embedding tables' gradients a backward touched.
  virtual float* push_values() const = 0;
  virtual float* param_gradient(int param) = 0;
  virtual TouchedRows& touched_rows() = 0;
  // The stacked weights uniform Concat `n` of `f` stands for, where the
  // device reads them in place as one block; else null (copied).
  virtual float* stacked_in_place(const ir::Function&, const ir::Node&) { return nullptr; }

  // --- steps (runtime/steps.cpp) ---
  void run_step(Pass pass, const Rows& rows, const Step& step, Lane& lane);
  // Runs the unfused node `id` over the rows.
  void run_node(Pass pass, const Rows& rows, ir::ValueId id, Lane& lane);
  // The fused step `index` of the rows' function plan: in a forward pass no
  // backward follows, the inference kernel (FunctionPlan::inference_fused:
  // only what the forward reads is written).
  const FusedStep& fused_step(Pass pass, int type, int index) const;
  // The scatter gradients, zeroed at the start of a backward.
  void zero_scatter_gradients(Lane& lane);
  // Stacked weights (uniform Concats of parameters), once per pass.
  void fill_uniform_values(Pass pass, Lane& lane);
  // Whether `add` is the epilogue of a product the plan folded into it.
  bool folded_into(Pass pass, int type, const ir::Node& add) const;
  // Whether the parent `parent`'s gather `node` of `slot` finds its child's
  // parts there already (VJIT_ROW_PLACEMENT=tables).
  bool was_forwarded(int child, int parent, int slot, const ir::Node& node) const;
  int variadic_children(int type, int vertex) const;
  // The streamed forward's second lane (run_forward_streaming): start_stream
  // runs `eager` there (on a thread of its own, or queued on a second stream
  // now), eager_done(type) marks a type's eager steps issued there,
  // wait_for_eager(type) makes the main lane wait for them, and join_stream
  // waits for all of the second lane and returns what `eager` threw (null:
  // nothing).
  virtual void start_stream(const std::function<void()>& eager) = 0;
  virtual void eager_done(int type) = 0;
  virtual void wait_for_eager(int type) = 0;
  virtual std::exception_ptr join_stream() = 0;
  // Binds a task's rows and runs its core steps.
  void run_task(Pass pass, int task, Lane& lane);

  // --- binding ---
  // Resolves every value of the rows' function, in order (a view's operand
  // comes before it), into the lane's views; the forward views are resolved
  // for the backward too (Fwd reads them).
  void bind(Pass pass, const Rows& rows, Lane& lane);
  View buffer_view(Pass pass, int type, ir::ValueId id, int64_t begin) const;
  View scattered_rows(int type, int64_t row) const;  // forward: what `type` scatters, at `row`
  // The plan's row placement (runtime/row_placement.h), per type.
  const TypePlacement& placed(int type) const { return plan_.placement->types[size_t(type)]; }
  // The gather a task's GatherGrad adds its gradient into, when that gradient
  // is computed there in place instead (an exclusive view); else nullptr.
  const GatherLayout* in_place_gather(const Rows& rows, const ir::Node& gather_grad) const;
  // Whether the GatherGrad `id` of the rows' backward was computed in place.
  bool computed_in_place(const Rows& rows, const ir::Node& gather_grad, ir::ValueId id) const;
  // Whether children forward over the task's gather `gather`, a view the task
  // then reads from its own buffer (BatchLayout::unviewed_targets).
  bool forwarded_over_view(const Rows& rows, ir::ValueId gather) const;

  // --- the walk ---
  // Takes the batch (the caller's result receives the objective and pushes,
  // sized here) and counts its tasks.
  void begin_forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result);
  // The forward's eager steps (streamed when `streaming`), tasks and lazy steps.
  void run_forward(bool streaming);
  void end_forward();
  // Checks that a forward which may be differentiated came before.
  void begin_backward();
  // The backward's eager steps, tasks in reverse and lazy steps, telling the
  // observer (when one is set) of the gradients each point makes final.
  void run_backward();
  void run_phase(Pass pass, ir::Phase phase, Lane& lane);
  void run_type_phase(Pass pass, ir::Phase phase, int type, Lane& lane);
  // The forward's eager steps on the stream lane, type by type in
  // stream_order(), while the main lane runs the tasks, each after the eager
  // steps of the types for_each_input_type() names (Cavs §3.4). Eager forward
  // steps write only their own type's buffers.
  void run_forward_streaming();
  // The types in the order the tasks first need them.
  std::vector<int> stream_order() const;
  // Calls fn(type) for each type whose eager forward steps task `task` reads:
  // its own and its children's (repeats included).
  template <typename Fn>
  void for_each_input_type(int task, Fn&& fn) const {
    fn(batch_.schedule->task_type[size_t(task)]);
    for (int v : batch_.schedule->task(task))
      for (int child : batch_.graph->children(v)) fn(batch_.graph->type(child));
  }

  const Program& program_;
  const ExecPlan& plan_;
  Device& device_;
  // The batch being run.
  PlannedBatch batch_;
  RunOptions options_;
  Evaluation<float>* result_ = nullptr;
  bool has_batch_ = false;
  ExecStats stats_;
  std::vector<std::vector<int64_t>> push_widths_;  // per type: the width of each push, in function order
  std::vector<std::vector<int>> push_index_;       // per type, per forward value id: which push it is (-1)
  std::vector<int64_t> scatter_width_;             // per type: floats per row of what it scatters (0: none)
  size_t max_values_ = 0;                          // the most values of any function of the plan

  // The observer backward() tells (BackwardObserver); null: none. A device
  // whose gradients the host may read as soon as a step is issued sets it.
  BackwardObserver* observer_ = nullptr;
  std::vector<int> final_point_;  // per parameter: the point after which its gradient is final

  // Per pass and type, per value: where a uniform Concat's stacked weights
  // are read this pass when the device reads them in place (null: in the
  // value's own buffer, filled by the device).
  std::vector<std::vector<float*>> stacked_views_[2];
  // Row tables (TypePlacement::row_pointer_parts): per type, per Gather or
  // Concat read through row pointers, this batch's pointers (the type's rows ×
  // parts), filled by its step in place of a copy.
  std::vector<std::vector<std::vector<float*>>> row_pointers_;
  // And in the backward (TypePlacement::gradient_pointers): per type, per
  // gradient value written through row pointers, their table (a pointer per
  // row of the type, filled when a task is bound).
  std::vector<std::vector<std::vector<float*>>> gradient_rows_;  // [type][gradient value]

 private:
  void run_fused(Pass pass, const Rows& rows, const FusedStep& step, int index, Lane& lane);
  // VJIT_ROW_PLACEMENT=tables: per type, per forwarded part (FunctionPlan::
  // forwarded), this batch's row pointers where each row writes the part a
  // second time: the gather row of the parent the planner chose
  // (BatchLayout::forward_parent), or the part's own row again.
  std::vector<std::vector<std::vector<float*>>> forward_rows_;
  void point_forwarded_parts();
  // The parent gather row the child `vertex` (row `row` of type `type`)
  // writes its forwarded part j into, or nullptr.
  float* forward_target(int type, int vertex, int row, size_t j);
  // The view a fused step's repeated output `value` is written through.
  View forwarded_rows(const Rows& rows, ir::ValueId value);
  void gather(const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void gather_variadic(const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void pull(const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void sink(Pass pass, const Rows& rows, const ir::Node& node, Lane& lane);
  void gather_grad(const Rows& rows, const ir::Node& node, ir::ValueId id, const View& g, Lane& lane);
  // VJIT_ROW_PLACEMENT=tables: adds what the kernels did not add of
  // GatherGrad `id`'s gradient `g` into the children's rows, when the task
  // bound some parts to them; false when none was.
  bool add_accumulated_gradient(const Rows& rows, const ir::Node& node, ir::ValueId id, const View& g, Lane& lane);
  // Whether the rows being run add their gradient parts into the children's
  // rows (bound by run_task), for GatherGrad `gather_grad`.
  bool accumulates(const Rows& rows, ir::ValueId gather_grad, const Lane& lane) const;
  void children_block(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  // --- child row space (runtime/child_row_steps.cpp; FunctionPlan::child_rows) ---
  // Per type with values in child row space, the first child row of each of
  // its rows in this batch (type_rows + 1 entries), counted by begin_forward.
  std::vector<std::vector<int64_t>> child_row_begin_;
  void count_child_rows();
  // The child rows of the rows' vertices (no vertex per row: `vertices` is null).
  Rows child_rows(const Rows& rows) const;
  // Which of the rows child row `child_row` (from the rows' first) belongs to.
  int64_t parent_row(const Rows& rows, int64_t child_row) const;
  // Runs node `id` where it moves rows between child row space and the
  // vertices' rows; false for any other node.
  bool child_row_step(Pass pass, const Rows& rows, ir::ValueId id, Lane& lane);
  void sum_child_rows(const Rows& rows, const View& in, int64_t width, const View& out, Lane& lane);
  // Where variadic child k of row r finds its gradient in GatherGrad `gather_grad`'s operand `g`.
  const float* child_gradient_row(const Rows& rows, const ir::Node& gather_grad, const View& g, int64_t r, int64_t k,
                                  int64_t width) const;
  // --- products (runtime/product_steps.cpp) ---
  void matmul(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane, const View* bias);
  bool weight_gemm(Pass pass, const Rows& rows, const ir::Node& node, const View& out, const View* bias, Lane& lane,
                   Gemm& gemm);
  void run_gemm_batch(Pass pass, const Rows& rows, std::span<const Step> steps, Lane& lane);
  // A per-vertex matrix times a uniform weight as GEMMs over the rows; false
  // when the product is not of that form.
  bool matrix_times_weight(const Rows& rows, const ir::Node& node, const Shape& sa, const Shape& sb, const View& a,
                           const View& b, const View& out, Lane& lane, const View* bias);
  // Σ_r op(A_r)ᵀ·B_r of two per-vertex matrices as GEMMs over the stacked
  // rows; false when the product is not of that form.
  bool accumulate_stacked_products(const Rows& rows, const ir::Node& product, const Shape& sa, const Shape& sb,
                                   const View& a, const View& b, float* grad, Lane& lane);
  void param_grad(Pass pass, const Rows& rows, const ir::Node& node, Lane& lane);
  void bias_add(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void elementwise(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void softmax_ce(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void concat(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane);
  void reshape(Pass pass, const Rows& rows, const ir::Node& node, const View& out, Lane& lane);

  // Runs steps once per task of the type (the gathers they read are views in
  // some task, so not one buffer: BatchLayout::view_slots), or once per run of
  // consecutive tasks whose views continue each other.
  void run_steps_per_task(Pass pass, int type, std::span<const Step> steps, Lane& lane);
  // Whether the rows of `next` (the type's task after `rows`) can join them:
  // its rows follow them in the type's buffers, and each gather slot that is a
  // view somewhere reads, in both, the same buffer at the same stride, `next`'s
  // children right after those of `rows`.
  bool views_continue(const Rows& rows, int next) const;

  // Which parameters' gradients each point of the backward makes final: point
  // 0 is the end of the tasks, point lazy_point_begin_[t] + i + 1 the end of
  // type t's lazy backward step i. A gradient is final after the last step
  // that writes it (ParamGrad, EmbeddingGrad); the lazy weight-gradient GEMMs
  // of the types run one type after the other, so the first types' weights
  // are final early.
  void plan_gradient_final_points();
  // Tells the observer of the points after the last one told, up to `point`.
  void tell_gradients_final(int point);
  // Sizes the row tables for the batch.
  void size_row_tables();
  // Fills, for the task being bound, where each row of a gradient written
  // through pointers goes.
  void bind_gradient_rows(const Rows& rows);
  // VJIT_ROW_PLACEMENT=tables (TypePlacement::accumulated_parts): per type,
  // per such part, this batch's table of where each row goes
  // (bind_accumulated_rows).
  std::vector<std::vector<std::vector<float*>>> accumulated_rows_;  // [type][part]
  std::vector<float*> accumulated_own_rows_;  // bind_accumulated_rows' scratch: the own rows to zero
  void bind_accumulated_rows(const Rows& rows, Lane& lane);
  // A step timed for VJIT_PROFILE and/or recorded for VJIT_TRACE.
  void observe_step(Pass pass, const Rows& rows, const Step& step, Lane& lane);
  void trace_step(Pass pass, const Rows& rows, const Step& step, const Lane& lane, const ExecStats& before,
                  int64_t start);
  bool profile_ = false;
  // VJIT_PROFILE: time and calls per step, keyed by the step's address in the
  // plan (stable: the plan outlives the runner's use of it).
  struct StepAccount {
    Pass pass = Pass::Forward;
    int type = 0;
    double seconds = 0;
    int64_t calls = 0, rows = 0;
  };
  std::unordered_map<const Step*, StepAccount> step_accounts_;
  std::mutex step_accounts_mutex_;  // the streaming thread profiles too
  // The GatherGrad whose gradient the task being bound computes in place, per
  // gradient value (-1: none); bind()'s scratch.
  std::vector<ir::ValueId> in_place_target_;
  std::vector<uint8_t> gradient_rows_bound_;  // per backward value: the task being bound writes it through pointers
  std::vector<std::vector<int>> final_at_point_;  // per point: the parameters it makes final
  std::vector<int> lazy_point_begin_;             // per type
  int told_point_ = -1;                           // the last point the observer heard of

  Lane* main_lane_ = nullptr;
  Lane* stream_lane_ = nullptr;
  bool stream_concurrent_ = false;
  ExecStats stream_stats_;  // a concurrent stream lane's, merged after each forward
  // VJIT_LOG=primitives: what each lane issued since the last take_primitive_log().
  std::vector<PrimitiveRecord> primitive_log_, stream_primitive_log_;
};

}  // namespace vjit::runtime
