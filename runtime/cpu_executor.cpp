#include "runtime/cpu_executor.h"

#include <algorithm>
#include <atomic>
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
  observe_steps(config.profile, config.trace);
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
  ++transposes_.pass;  // the weights' transposed copies are made again
  fill_uniform_values(Pass::Forward, frame_);
  run_forward(streaming_);
  end_forward();
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

}  // namespace vjit::runtime
