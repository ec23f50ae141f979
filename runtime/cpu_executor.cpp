#include "runtime/cpu_executor.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <system_error>
#include <thread>

#include "ir/model_layout.h"
#include "ir/passes.h"
#include "runtime/batch_rows.h"
#include "runtime/kernels.h"
#include "runtime/optimizer_access.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;
using ir::is_copy;  // the op table's execution classes
using ir::is_view;

namespace {

// Whether this CPU runs code of `target`.
bool can_launch(KernelTarget target) {
  switch (target) {
    case KernelTarget::HostReference: return true;
#if defined(__x86_64__)
    case KernelTarget::X86Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case KernelTarget::X86Avx512: return __builtin_cpu_supports("avx512f");
    case KernelTarget::A64Neon: return false;
#elif defined(__aarch64__)
    case KernelTarget::X86Avx2:
    case KernelTarget::X86Avx512: return false;
    case KernelTarget::A64Neon: return true;  // Advanced SIMD: part of every AArch64 CPU Linux runs on
#else
    case KernelTarget::X86Avx2:
    case KernelTarget::X86Avx512:
    case KernelTarget::A64Neon: return false;
#endif
    case KernelTarget::Cuda: return false;
  }
  return false;
}

}  // namespace

// --- parameter store ---

CpuParameterStore::CpuParameterStore(Model& model, const ExecPlan& plan)
    : model_(model), gradients_(size_t(model.size())), touched_(model, plan) {}

void CpuParameterStore::upload(const Model&) {}
void CpuParameterStore::download(Model&) const {}

void CpuParameterStore::read_gradient(int param, int64_t offset, int64_t floats, float* values) const {
  std::copy_n(gradients_[size_t(param)].begin() + offset, floats, values);
}

void CpuParameterStore::write_gradient(int param, int64_t offset, int64_t floats, const float* values) {
  std::copy_n(values, floats, gradients_[size_t(param)].begin() + offset);
}

void CpuParameterStore::add_touched_rows(int param, std::span<const int32_t> rows) {
  for (int32_t row : rows) touched_.touch(param, row);
  touched_.finish();
}

void CpuParameterStore::zero_gradients() {
  for (int p = 0; p < model_.size(); ++p) {
    std::vector<float>& g = gradients_[size_t(p)];
    const ParamData& param = model_.param(p);
    const size_t numel = size_t(param.shape.numel());
    if (!touched_.of(p).all && g.size() == numel) {
      const size_t cols = size_t(param.shape.cols());
      touched_.clear(p, [&](int row) { std::fill_n(g.begin() + int64_t(size_t(row) * cols), cols, 0.0f); });
    } else {
      g.assign(numel, 0.0f);
      touched_.clear(p, [](int) {});
    }
  }
}

// --- executor ---

float* CpuExecutor::Arena::reserve(int64_t floats, int64_t max_capacity) {
  if (floats > capacity_ || capacity_ > std::max(floats, max_capacity)) {
    // Geometric growth: a run whose batches grow by a little each time
    // reallocates (and faults fresh pages in) only a few times. The old
    // contents are dead between batches, so nothing is copied or zeroed.
    capacity_ = std::max(floats, std::min(capacity_ + capacity_ / 2, max_capacity));
    data_.reset();  // before the new one: never both at once
    data_ = std::make_unique_for_overwrite<float[]>(size_t(capacity_));
  }
  return data_.get();
}

void CpuExecutor::Arena::release() {
  data_.reset();
  capacity_ = 0;
}

// Without a bound the arenas just grow. With one, the forward arena grows at
// most to what leaves room for this batch's backward arena, and the backward
// arena (dead between batches) is released when both would not fit.
void CpuExecutor::reserve_forward_arena(int64_t forward, int64_t backward) {
  Arena& values = arena_[int(Pass::Forward)];
  Arena& gradients = arena_[int(Pass::Backward)];
  if (max_memory_floats_ == 0) {
    values.reserve(forward);
    return;
  }
  values.reserve(forward, max_memory_floats_ - backward);
  if (values.capacity() + gradients.capacity() > max_memory_floats_) gradients.release();
}

float* CpuExecutor::reserve_backward_arena(int64_t backward) {
  Arena& gradients = arena_[int(Pass::Backward)];
  if (max_memory_floats_ == 0) return gradients.reserve(backward);
  return gradients.reserve(backward, max_memory_floats_ - arena_[int(Pass::Forward)].capacity());
}

CpuExecutor::CpuExecutor(const Program& program, const ExecPlan& plan, const Config& config)
    : Runner(program, plan, *this),
      pool_(config.threads),
      parallel_(pool_),
      gemm_backend_(config.gemm),
      vertex_gemm_backend_(config.vertex_gemm.value_or(config.gemm)),
      gemm_split_(config.deterministic ? GemmSplit::Fixed : GemmSplit::Auto),
      pretranspose_(config.pretranspose),
      stacked_in_place_(config.stacked_in_place),
      deterministic_(config.deterministic),
      streaming_(config.streaming),
      profile_(config.profile),
      trace_(config.trace),
      max_memory_floats_(config.max_memory / int64_t(sizeof(float))),
      store_(program.model(), plan) {
  size_t max_inputs = 0, max_outputs = 0;
  for (size_t t = 0; t < plan.types.size(); ++t) {
    for (Pass pass : {Pass::Forward, Pass::Backward}) {
      const FunctionPlan& fp = function_plan(pass, int(t));
      for (const FusedStep& step : fp.fused) {
        VJIT_INTERNAL_CHECK(can_launch(step.kernel.target), "the CPU executor cannot launch kernel "
                                                                << step.kernel.name << " of target "
                                                                << kernel_target_name(step.kernel.target));
        max_inputs = std::max(max_inputs, step.inputs.size() + step.accumulated.size());
        max_outputs = std::max(max_outputs, step.outputs.size());
      }
    }
  }
  // Fused steps split rows over the pool: one set of pointers per block.
  size_t blocks = size_t(pool_.size());
  for (Frame* frame : {&frame_, &stream_frame_}) {
    frame->inputs.resize(max_inputs * blocks);
    frame->outputs.resize(max_outputs * blocks);
    frame->operand_ld.resize((max_inputs + max_outputs) * blocks);
    frame->row_tables.resize((max_inputs + max_outputs) * blocks);
  }
  set_lanes(frame_, stream_frame_, true);
  observe_steps_ = config.profile || config.trace;
  check_finite_ = config.check_finite;
  stream_frame_.use_pool = false;  // the pool belongs to the thread running the tasks
}

std::span<const float> CpuExecutor::scattered_row(int type, int row) {
  return {scattered_rows(type, row).data, size_t(scatter_width_[size_t(type)])};
}

// --- passes ---

float* CpuExecutor::stacked_in_place(const ir::Function& f, const Node& n) {
  if (!stacked_in_place_) return nullptr;
  stacked_params_.clear();
  for (ValueId arg : n.args) {
    if (f[arg].op != Op::Param) return nullptr;
    stacked_params_.push_back(f[arg].param);
  }
  return ir::ModelLayout::consecutive(store_.model(), stacked_params_) ? store_.value(stacked_params_[0]) : nullptr;
}

void CpuExecutor::forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result) {
  begin_forward(batch, options, result);
  reserve_forward_arena(batch.layout->arena_floats[int(Pass::Forward)],
                        options.backward ? batch.layout->arena_floats[int(Pass::Backward)] : 0);
  size_accumulated_rows();
  ++transposes_.pass;  // the weights' transposed copies are made again
  fill_uniform_values(Pass::Forward, frame_);
  run_forward(streaming_);
  end_forward();
}

void CpuExecutor::size_accumulated_rows() {
  const size_t types = plan_.types.size();
  accumulated_rows_.resize(types);
  for (size_t t = 0; t < types; ++t) {
    accumulated_rows_[t].resize(placed(int(t)).accumulated_parts.size());
    for (std::vector<float*>& table : accumulated_rows_[t]) table.resize(size_t(batch_.layout->type_rows[t]));
  }
}

// Points each row of the task's gradient parts at the row its accumulating
// kernel adds it into: the child's scatter-gradient row (of a Slot, or of an
// EveryVariadic row with one child), else the part's own row, zeroed, from
// which the GatherGrad adds it (an EveryVariadic row of no or several
// children; a child a part of this task already goes to: two rows of one
// kernel call never add into one row).
void CpuExecutor::bind_accumulated_rows(const Rows& rows, Frame& frame) {
  const std::vector<AccumulatedPart>& parts = placed(rows.type).accumulated_parts;
  if (parts.empty()) return;
  const BatchLayout& layout = *batch_.layout;
  const scheduler::FlatBatch& graph = *batch_.graph;
  const ir::Function& f = function(Pass::Backward, rows.type);
  const size_t first_variadic = size_t(program_.signature(rows.type).fixed_arity);
  const int64_t bind = ++accumulate_binds_;
  if (accumulated_claim_.size() < size_t(graph.num_vertices())) accumulated_claim_.resize(size_t(graph.num_vertices()), 0);
  std::vector<uint8_t>& to_child = accumulated_to_child_;  // per row: its GatherGrad's parts go to the child
  if (to_child.size() < size_t(rows.count)) to_child.resize(size_t(rows.count));
  for (size_t k = 0; k < parts.size(); ++k) {
    const AccumulatedPart& part = parts[k];
    const Node& gg = f[part.gather_grad];
    const bool new_gather_grad = k == 0 || parts[k - 1].gather_grad != part.gather_grad;
    const ValueLayout& own = layout.value(Pass::Backward, rows.type, part.value);
    float** table = accumulated_rows_[size_t(rows.type)][k].data() + rows.begin;
    for (int64_t r = 0; r < rows.count; ++r) {
      std::span<const int> children = graph.children(rows.vertices[r]);
      int child = -1;
      if (gg.target == ir::GatherGradTarget::Slot) child = children[size_t(gg.child_slot)];
      else if (children.size() == first_variadic + 1) child = children[first_variadic];
      // The parts of one GatherGrad go to one child together (its columns).
      if (child >= 0 && new_gather_grad) {
        to_child[size_t(r)] = accumulated_claim_[size_t(child)] != bind;
        accumulated_claim_[size_t(child)] = bind;
      }
      if (child >= 0 && to_child[size_t(r)]) {
        const ValueLayout& s = layout.scatter_grad[size_t(graph.type(child))];
        const int64_t start = gg.target == ir::GatherGradTarget::Slot ? gg.start : 0;
        table[r] = arena(Pass::Backward) + s.offset + int64_t(layout.vertex_row[size_t(child)]) * s.ld + start +
                   part.column;
      } else {
        table[r] = arena(Pass::Backward) + own.offset + (rows.begin + r) * own.ld;
        std::fill_n(table[r], size_t(part.width), 0.0f);
      }
    }
    frame.views[int(Pass::Backward)][size_t(part.value)] = {nullptr, 0, table, 1, 0};
  }
}

bool CpuExecutor::accumulates(const Rows& rows, ValueId gather_grad, const Frame& frame) const {
  if (rows.task < 0) return false;
  for (const AccumulatedPart& part : placed(rows.type).accumulated_parts)
    if (part.gather_grad == gather_grad) return frame.views[int(Pass::Backward)][size_t(part.value)].pointers != nullptr;
  return false;
}

void CpuExecutor::backward() {
  begin_backward();
  store_.zero_gradients();
  frame_.at(Pass::Backward, -1, -1, 0, "zero parameter gradients");
  frame_.issue(Primitive::Fill);
  const BatchLayout& layout = *batch_.layout;
  reserve_backward_arena(layout.arena_floats[int(Pass::Backward)]);
  zero_scatter_gradients(frame_);
  fill_uniform_values(Pass::Backward, frame_);
  run_backward();
  store_.finish_touched();
}

// Only the rows of the embedding tables the batch looked up, on the pool's
// threads, with the optimizer state this executor's store keeps.
void CpuExecutor::update(Optimizer& optimizer) {
  TraceArgs args;
  if (trace_) [[unlikely]] {
    // The rows it updates: every row of a dense parameter, the touched rows of an embedding table.
    args.rows = args.bytes = 0;
    const Model& model = store_.model();
    for (int p = 0; p < model.size(); ++p) {
      const Shape& shape = model.param(p).shape;
      const GradientRows& touched = store_.gradient_rows()[size_t(p)];
      const int64_t rows = touched.all ? shape.rows() : int64_t(touched.rows.size());
      args.rows += rows;
      args.bytes += rows * shape.cols() * int64_t(sizeof(float));
    }
  }
  TraceScope scope(trace_, "optimizer step", TraceCategory::Optimizer, args);
  frame_.at(Pass::Backward, -1, -1, 0, "optimizer step");
  frame_.issue(Primitive::OptimizerStep);
  OptimizerAccess::step(optimizer, store_.model(), store_.gradients(), store_.gradient_rows(), &parallel_,
                        &store_.optimizer_state());
}

// Streaming: a second thread runs the eager steps while this thread runs the
// tasks, the two never writing the same memory. (A thread is started per
// forward: streaming is off by default and allocates.)
void CpuExecutor::start_stream(const std::function<void()>& eager) {
  eager_done_ = std::vector<std::atomic<bool>>(size_t(program_.num_types()));
  for (std::atomic<bool>& done : eager_done_) done.store(false);
  stream_error_ = nullptr;
  auto run = [this, eager] {
    if (trace_) trace_->name_this_thread("vjit stream");
    try {
      eager();
    } catch (...) {
      stream_error_ = std::current_exception();
    }
    for (std::atomic<bool>& done : eager_done_) done.store(true, std::memory_order_release);  // no waiter left behind
  };
  try {
    streamer_ = std::thread(run);
  } catch (const std::system_error& e) {
    throw UserError(std::string("VJIT_STREAMING: cannot start the thread that runs the eager steps: ") + e.what() +
                    "; turn streaming off");
  }
}

void CpuExecutor::eager_done(int type) { eager_done_[size_t(type)].store(true, std::memory_order_release); }

void CpuExecutor::wait_for_eager(int type) {
  while (!eager_done_[size_t(type)].load(std::memory_order_acquire)) std::this_thread::yield();
}

std::exception_ptr CpuExecutor::join_stream() {
  streamer_.join();
  merge_stream_lane();
  return stream_error_;
}

void CpuExecutor::run_task(Pass pass, int task, Lane& lane) {
  Frame& frame = static_cast<Frame&>(lane);
  const Rows rows = task_rows(task);
  if (trace_) [[unlikely]] {
    const int64_t start = trace_->now();
    run_task_steps(pass, rows, frame);
    TraceArgs args;
    args.type = rows.type;
    args.task = task;
    args.rows = rows.count;
    trace_->record({}, TraceCategory::Task, start, args);  // named by its vertex type
    return;
  }
  run_task_steps(pass, rows, frame);
}

void CpuExecutor::run_task_steps(Pass pass, const Rows& rows, Frame& frame) {
  bind(pass, rows, frame);
  if (pass == Pass::Backward) bind_accumulated_rows(rows, frame);
  run_steps(pass, rows, function_plan(pass, rows.type).core, frame);
}

void CpuExecutor::observe_step(Pass pass, const Rows& rows, const Step& step, Lane& lane) {
  run_step_observed(pass, rows, step, static_cast<Frame&>(lane));
}

void CpuExecutor::run_step_observed(Pass pass, const Rows& rows, const Step& step, Frame& frame) {
  const ExecStats before = *frame.stats;
  const int64_t trace_start = trace_ ? trace_->now() : 0;
  auto start = std::chrono::steady_clock::now();
  run_step(pass, rows, step, frame);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (trace_) trace_step(pass, rows, step, frame, before, trace_start);
  if (!profile_) return;
  std::lock_guard<std::mutex> lock(step_accounts_mutex_);
  StepAccount& account = step_accounts_[&step];
  account.pass = pass;
  account.type = rows.type;
  account.seconds += seconds;
  account.calls += 1;
  account.rows += rows.count;
}

// One event for a step that did work, classified by what its counters say it
// did: a GEMM (with each product's M, N, K), a copy (with the bytes it moved;
// a gather read in place moved none and is no event), a fused kernel or
// another kernel (with the bytes of the rows it wrote).
void CpuExecutor::trace_step(Pass pass, const Rows& rows, const Step& step, const Frame& frame,
                             const ExecStats& before, int64_t start) {
  const ExecStats& after = *frame.stats;
  const FunctionPlan& fp = function_plan(pass, rows.type);
  TraceArgs args;
  args.type = rows.type;
  args.task = rows.task;
  args.rows = rows.count;
  if (step.fused >= 0) {
    const FusedStep& fused = fused_step(pass, rows.type, step.fused);
    if (fused.outputs.empty()) return;  // skipped: an inference pass needs none of its outputs
    args.cols = fused.width;
    args.bytes = rows.count * fused.width * int64_t(sizeof(float)) * int64_t(fused.inputs.size() + fused.outputs.size());
    trace_->record(fused.kernel.name, TraceCategory::Fused, start, args);
    return;
  }
  if (after.kernels == before.kernels) return;  // a view, a scatter or a uniform value: no work
  const Node& n = (*fp.function)[step.node];
  const std::string_view name = ir::op_name(n.op);
  args.cols = n.shape.numel();
  if (after.gemm_calls > before.gemm_calls) {
    args.products = after.gemm_calls - before.gemm_calls;
    args.m = frame.last_gemm.m;
    args.n = frame.last_gemm.n;
    args.k = frame.last_gemm.k;
    args.bytes = (args.m * args.k + args.k * args.n + args.m * args.n) * int64_t(sizeof(float)) * args.products;
    trace_->record(name, TraceCategory::Gemm, start, args);
  } else if (is_copy(n.op)) {
    if (after.copy_calls == before.copy_calls) return;  // read or written in place
    args.bytes = after.copy_bytes - before.copy_bytes;
    trace_->record(name, TraceCategory::Copy, start, args);
  } else {
    args.bytes = rows.count * args.cols * int64_t(sizeof(float));
    trace_->record(name, TraceCategory::Kernel, start, args);
  }
}

std::vector<StepTime> CpuExecutor::step_profile() const {
  std::vector<StepTime> out;
  for (const auto& [step, account] : step_accounts_) {
    const FunctionPlan& fp = function_plan(account.pass, account.type);
    const char* phase = step >= fp.core.data() && step < fp.core.data() + fp.core.size()   ? "core"
                        : step >= fp.eager.data() && step < fp.eager.data() + fp.eager.size() ? "eager"
                                                                                               : "lazy";
    std::string label = std::string(account.pass == Pass::Forward ? "forward " : "backward ") +
                        program_.type_name(account.type) + " " + phase + " ";
    if (step->fused >= 0) {
      // One account for both kernels where inference runs a smaller one.
      const size_t g = size_t(step->fused);
      label += fp.fused[g].kernel.name;
      if (fp.inference_differs(g)) {
        const FusedStep& inference = fp.inference_fused[g];
        label += " (inference: " + (inference.outputs.empty() ? "skipped" : inference.kernel.name) + ")";
      }
    } else {
      const Node& n = (*fp.function)[step->node];
      label += "%" + std::to_string(step->node) + " " + ir::op_name(n.op) + " " + n.shape.str();
    }
    out.push_back({std::move(label), account.seconds, account.calls, account.rows});
  }
  std::sort(out.begin(), out.end(), [](const StepTime& a, const StepTime& b) { return a.seconds > b.seconds; });
  return out;
}

void CpuExecutor::reset_step_profile() {
  std::lock_guard<std::mutex> lock(step_accounts_mutex_);
  step_accounts_.clear();
}

}  // namespace vjit::runtime
