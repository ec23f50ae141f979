#include "runtime/cuda_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <span>

#include "ir/op_semantics.h"
#include "ir/ops.h"
#include "ir/row_op.h"
#include "runtime/optimizer_access.h"
#include "runtime/products.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;
using ir::is_copy;
using ir::is_view;

namespace {

// The kernel of each op of the children block (codegen/cuda_source.h), and
// the primitive it counts as (the CPU device's for the op).
struct ChildrenBlockKernel {
  Op op;
  const char* name;
  Primitive primitive;
};
constexpr ChildrenBlockKernel kChildrenBlockKernels[] = {
    {Op::SliceCols, "vjit_slice_cols", Primitive::MoveRows},
    {Op::PadCols, "vjit_pad_cols", Primitive::MoveRows},
    {Op::Transpose, "vjit_transpose", Primitive::MoveRows},
    {Op::ChildCount, "vjit_child_count", Primitive::Fill},
    {Op::MaxChildren, "vjit_max_children", Primitive::Reduce},
    {Op::MaxChildrenGrad, "vjit_max_children_grad", Primitive::Reduce},
};

constexpr int kMoveCopy = 0, kMoveAdd = 1, kMoveZero = 2;

// The device address `floats` floats past `base`.
DevicePtr at(DevicePtr base, int64_t floats) { return base + DevicePtr(floats) * sizeof(float); }
// A view's device address (the runner's views hold them as float*), and back.
DevicePtr address(const float* view) { return DevicePtr(reinterpret_cast<uintptr_t>(view)); }
float* as_view(DevicePtr p) { return reinterpret_cast<float*>(uintptr_t(p)); }

// Work that is no pass's (an optimizer step, gradients downloaded): what it
// launches and copies is left out of the pass counters (EngineStats::kernels,
// copy_calls, ...: the forward's and backward's node work, as on the CPU),
// which the engine would otherwise add to the next call's. Its primitives
// stay counted: they are work the device ran.
class UncountedWork {
 public:
  explicit UncountedWork(ExecStats& stats) : stats_(stats), saved_(stats) {}
  ~UncountedWork() {
    const PrimitiveCounts issued = stats_.primitives;
    stats_ = saved_;
    stats_.primitives = issued;
  }
  UncountedWork(const UncountedWork&) = delete;
  UncountedWork& operator=(const UncountedWork&) = delete;

 private:
  ExecStats& stats_;
  ExecStats saved_;
};

int64_t bytes_of(int64_t floats) { return floats * int64_t(sizeof(float)); }

// Σ g²'s threads: a few hundred blocks, each thread's partial added once.
constexpr int64_t kNormThreads = 65536;

}  // namespace

CudaExecutor::CudaExecutor(const Program& program, const ExecPlan& plan, const Config& config)
    : Runner(program, plan, *this),
      cuda_(CudaDevice::get()),
      config_(config),
      pool_(config.threads),
      parallel_(pool_),
      store_(*this, cuda_, program.model(), plan),
      graphs_(cuda_, config.graphs) {
  // A captured pass runs after its steps are issued: none can be timed then.
  observe_steps(config.profile && !config.graphs, nullptr);
  VJIT_INTERNAL_CHECK(!plan.cuda.image.empty(), "the CUDA executor needs a plan lowered for VJIT_DEVICE=cuda");
  module_ = DeviceModule(cuda_, plan.cuda.image);
  auto fn = [&](const char* name) { return cuda_.function(module_.get(), name); };
  move_rows_fn_ = fn("vjit_move_rows");
  copy_rows_fn_ = fn("vjit_copy_rows");
  elementwise_fn_ = fn("vjit_elementwise");
  dropout_fn_ = fn("vjit_dropout");
  broadcast_fn_ = fn("vjit_broadcast");
  sum_mod_fn_ = fn("vjit_sum_mod");
  sum_columns_fn_ = fn("vjit_sum_columns_into");
  loss_sum_fn_ = fn("vjit_loss_sum");
  outer_fn_ = fn("vjit_outer");
  batched_matmul_fn_ = fn("vjit_batched_matmul");
  softmax_fn_ = fn("vjit_softmax_ce");
  gather_sum_fn_ = fn("vjit_gather_sum");
  fill_rows_fn_ = fn("vjit_fill_rows");
  sum_squares_fn_ = fn("vjit_sum_squares");
  optimizer_fn_ = fn("vjit_optimizer_update");
  sum_squares_multi_fn_ = fn("vjit_sum_squares_multi");
  optimizer_multi_fn_ = fn("vjit_optimizer_update_multi");
  for (int op = 0; op < ir::kNumOps; ++op)
    if (const ir::RowOp* row = ir::row_op(ir::Op(op))) row_fns_[size_t(op)] = fn(row->cuda_kernel);
  for (const ChildrenBlockKernel& kernel : kChildrenBlockKernels) children_fns_[size_t(kernel.op)] = fn(kernel.name);
  for (size_t t = 0; t < plan.types.size(); ++t) {
    for (Pass pass : {Pass::Forward, Pass::Backward}) {
      const FunctionPlan& fp = function_plan(pass, int(t));
      fused_begin_[int(pass)].push_back(fused_fn_[int(pass)].size());
      for (const FusedStep& step : fp.fused) {
        VJIT_INTERNAL_CHECK(step.kernel.target == KernelTarget::Cuda,
                            "the CUDA executor cannot launch kernel " << step.kernel.name << " of target "
                                                                     << kernel_target_name(step.kernel.target));
        fused_fn_[int(pass)].push_back(fn(step.kernel.name.c_str()));
      }
    }
  }
  set_lanes(lanes_[0], lanes_[1], false);
  scalars_ = DeviceBuffer(cuda_, 3 * sizeof(double));
  objective_ = scalars_.get();
  norm_ = scalars_.get() + sizeof(double);
  non_finite_ = scalars_.get() + 2 * sizeof(double);
  if (config.streaming)
    for (int t = 0; t < program.num_types(); ++t) type_events_.push_back(cuda_.create_event());
}

CudaExecutor::~CudaExecutor() {
  try {
    cuda_.synchronize();
  } catch (...) {  // a failed device cannot be waited for; nothing to save
  }
  for (void* event : type_events_) cuda_.destroy_event(event);
  cuda_.free_pinned(staging_host_);
}

void CudaExecutor::zero(DevicePtr dst, size_t bytes) {
  issue(Primitive::Fill);
  cuda_.memset_zero(dst, bytes);
}

void CudaExecutor::download(void* dst, DevicePtr src, size_t bytes) {
  issue(Primitive::Download);
  cuda_.download_async(dst, src, bytes);
}

void CudaExecutor::upload(DevicePtr dst, const void* src, size_t bytes) {
  issue(Primitive::Upload);
  cuda_.upload(dst, src, bytes);
}

// Arenas grow geometrically, with half again as much room as asked for: a
// new buffer costs a cuMemFree (which waits for the device) and a cuMemAlloc,
// a millisecond or more at these sizes, so batches a little larger than the
// first must not each pay it. The old buffer goes once no queued work reads it
// (a pass reserves before it queues anything, so the wait finds the device idle).
// When the new buffer cannot be had, the arena stays as it was.
DevicePtr CudaExecutor::reserve(Arena& arena, int64_t floats) {
  if (floats > arena.capacity) {
    cuda_.synchronize();
    const int64_t capacity = std::max(floats + floats / 2, 2 * arena.capacity);
    arena.buffer = DeviceBuffer(cuda_, size_t(bytes_of(capacity)));
    arena.capacity = capacity;
    arena.data = arena.buffer.get();
  }
  return arena.data;
}

template <typename T>
DevicePtr CudaExecutor::stage(const T* data, size_t count) {
  const size_t bytes = count * sizeof(T);
  const size_t aligned = (bytes + 255) & ~size_t(255);
  if (staging_used_ + aligned > staging_capacity_) {
    // Everything staged so far must have reached the device, and the kernels
    // reading it run, before either buffer goes; in a captured pass nothing
    // has run yet, and the old buffers go after its graph ran (grow_staging).
    if (!graphs_.capturing()) cuda_.synchronize();
    grow_staging(std::max(aligned, 2 * staging_capacity_ + (size_t(4) << 20)));
  }
  std::memcpy(staging_host_ + staging_used_, data, bytes);
  DevicePtr dst = staging_device_ + staging_used_;
  issue(Primitive::Upload);
  cuda_.upload(dst, staging_host_ + staging_used_, bytes, stream_);
  staging_used_ += aligned;
  return dst;
}

// Both new buffers are made before the old ones go: when either cannot be
// had, the staging buffers stay as they were.
void CudaExecutor::grow_staging(size_t capacity) {
  DeviceBuffer on_device(cuda_, capacity);
  char* pinned = static_cast<char*>(cuda_.alloc_pinned(capacity));
  if (graphs_.capturing()) graphs_.retire(std::move(staging_buffer_), staging_host_);
  else cuda_.free_pinned(staging_host_);
  staging_host_ = pinned;
  staging_buffer_ = std::move(on_device);
  staging_device_ = staging_buffer_.get();
  staging_capacity_ = capacity;
  staging_used_ = 0;
}

template <typename... Args>
void CudaExecutor::launch(Primitive kind, void* fn, int64_t elements, Args... args) {
  static_assert(((sizeof(Args) <= sizeof(uint64_t)) && ...));
  uint64_t slots[sizeof...(Args)] = {};
  void* params[sizeof...(Args)];
  size_t i = 0;
  ((std::memcpy(&slots[i], &args, sizeof(Args)), params[i] = &slots[i], ++i), ...);
  ++stats_.kernels;
  issue(kind);
  cuda_.launch(fn, CudaDevice::grid_for(elements), 256, params, stream_);
}

void CudaExecutor::move_pairs(const std::vector<uint64_t>& pairs, int64_t width, int mode) {
  const int64_t rows = int64_t(pairs.size() / 2);
  if (rows == 0 || width == 0) return;
  launch(mode == kMoveAdd ? Primitive::AddRows : mode == kMoveZero ? Primitive::Fill : Primitive::MoveRows, move_rows_fn_,
         rows * width, rows, width, stage(pairs.data(), pairs.size()), mode);
}

void CudaExecutor::copy_strided(int64_t rows, int64_t width, DevicePtr src, int64_t sld, DevicePtr dst, int64_t dld) {
  if (rows == 0 || width == 0) return;
  launch(Primitive::MoveRows, copy_rows_fn_, rows * width, rows, width, src, sld, dst, dld);
}

float* CudaExecutor::arena(Pass pass) const { return as_view(arena_[int(pass)].data); }

float* CudaExecutor::push_values() const { return as_view(pushes_.data); }

float* CudaExecutor::param_gradient(int param) { return as_view(store_.gradient(param)); }

float* CudaExecutor::param_address(int param) const { return as_view(store_.value(param)); }

void CudaExecutor::forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result) {
  CudaDevice::get();  // the context current on this thread (an engine may move between threads)
  begin_forward(batch, options, result);
  const int64_t push_floats = int64_t(result.pushes.values().size());
  reserve(pushes_, push_floats);
  reserve(arena_[0], batch.layout->arena_floats[0]);
  staging_used_ = 0;  // the last pass ended with the device idle
  StepGraphs::Capture capture(graphs_, 0);
  lanes_[0].at(Pass::Forward, -1, -1, 0, "objective");
  zero(objective_, sizeof(double));
  fill_uniform_values(Pass::Forward, lanes_[0]);
  run_forward(config_.streaming);
  capture.launch();  // the downloads into pageable memory stay out of the graph
  double objective = 0;
  lanes_[0].at(Pass::Forward, -1, -1, 0, "objective and pushes");
  download(&objective, objective_, sizeof objective);
  if (push_floats > 0) download(result.pushes.data(), pushes_.data, size_t(bytes_of(push_floats)));
  cuda_.synchronize();
  result.objective = objective;
  end_forward();
}

void CudaExecutor::backward() {
  begin_backward();
  CudaDevice::get();
  reserve(arena_[1], batch_.layout->arena_floats[1]);  // may wait for the device: before a capture
  staging_used_ = 0;
  StepGraphs::Capture capture(graphs_, 0);
  lanes_[0].at(Pass::Backward, -1, -1, 0, "zero gradients");
  // Zero the gradients: dense ones whole, embedding tables the rows last touched.
  for (int p = 0; p < store_.model().size(); ++p) {
    const ParamData& param = store_.model().param(p);
    if (store_.touched_.of(p).all) {
      zero(store_.gradient(p), size_t(bytes_of(param.shape.numel())));
      continue;
    }
    const int64_t cols = param.shape.cols();
    pairs_.clear();
    store_.touched_.clear(p, [&](int row) {
      pairs_.push_back(at(store_.gradient(p), int64_t(row) * cols));
      pairs_.push_back(0);
    });
    move_pairs(pairs_, cols, kMoveZero);
  }
  store_.host_current_ = false;
  zero_scatter_gradients(lanes_[0]);
  fill_uniform_values(Pass::Backward, lanes_[0]);
  run_backward();
  capture.launch();
  store_.finish_touched();
  cuda_.synchronize();
}

// Per parameter: a dense one's device array `source(p)` whole into `dense(p)`
// (host, its size); for an embedding table, its touched rows of `source(p)`,
// gathered into one block on the device and downloaded at once, each handed to
// put(p, row, values).
template <typename Source, typename Dense, typename Put>
void CudaExecutor::download_touched(Source&& source, Dense&& dense, Put&& put) {
  const Model& model = store_.model();
  int64_t sparse_floats = 0;
  for (int p = 0; p < model.size(); ++p)
    if (!store_.touched_.of(p).all)
      sparse_floats += int64_t(store_.touched_.of(p).rows.size()) * model.param(p).shape.cols();
  DevicePtr block = reserve(pushes_, std::max<int64_t>(sparse_floats, 1));  // the push buffer is free here
  int64_t used = 0;
  for (int p = 0; p < model.size(); ++p) {
    if (model.param(p).frozen) continue;  // optimizers never update it
    const GradientRows& rows = store_.touched_.of(p);
    if (rows.all) {
      download(dense(p), source(p), size_t(bytes_of(model.param(p).shape.numel())));
      continue;
    }
    const int64_t cols = model.param(p).shape.cols();
    pairs_.clear();
    for (size_t i = 0; i < rows.rows.size(); ++i) {
      pairs_.push_back(at(block, used + int64_t(i) * cols));
      pairs_.push_back(at(source(p), int64_t(rows.rows[i]) * cols));
    }
    move_pairs(pairs_, cols, kMoveCopy);
    used += int64_t(rows.rows.size()) * cols;
  }
  floats_.resize(size_t(std::max<int64_t>(sparse_floats, 1)));
  if (sparse_floats > 0) download(floats_.data(), block, size_t(bytes_of(sparse_floats)));
  cuda_.synchronize();
  used = 0;
  for (int p = 0; p < model.size(); ++p) {
    if (model.param(p).frozen) continue;  // optimizers never update it
    const GradientRows& rows = store_.touched_.of(p);
    if (rows.all) continue;
    const int64_t cols = model.param(p).shape.cols();
    for (int32_t row : rows.rows) {
      put(p, row, floats_.data() + used);
      used += cols;
    }
  }
}

// The host gradients: an embedding table's rows of the previous backward are
// zeroed before this one's are written.
void CudaExecutor::fetch_gradients() {
  CudaDevice::get();
  UncountedWork uncounted(stats_);
  staging_used_ = 0;
  for (int p = 0; p < store_.model().size(); ++p) {
    if (store_.touched_.of(p).all) continue;
    const int64_t cols = store_.model().param(p).shape.cols();
    std::vector<float>& host = store_.host_grads_[size_t(p)];
    for (int32_t row : store_.host_rows_[size_t(p)]) std::fill_n(host.begin() + int64_t(row) * cols, cols, 0.0f);
    store_.host_rows_[size_t(p)] = store_.touched_.of(p).rows;
  }
  download_touched([&](int p) { return store_.gradient(p); }, [&](int p) { return store_.host_grads_[size_t(p)].data(); },
                   [&](int p, int32_t row, const float* values) {
                     const int64_t cols = store_.model().param(p).shape.cols();
                     std::copy_n(values, cols, store_.host_grads_[size_t(p)].begin() + int64_t(row) * cols);
                   });
}

void CudaExecutor::upload_updated(bool dense) {
  staging_used_ = 0;
  for (int p = 0; p < store_.model().size(); ++p) {
    const ParamData& param = store_.model().param(p);
    const GradientRows& rows = store_.touched_.of(p);
    if (rows.all || dense) {
      upload(store_.value(p), param.value.data(), param.value.size() * sizeof(float));
      continue;
    }
    // The touched rows, staged as one block, then moved into the table.
    const int64_t cols = param.shape.cols();
    floats_.resize(rows.rows.size() * size_t(cols));
    for (size_t i = 0; i < rows.rows.size(); ++i)
      std::copy_n(param.value.begin() + int64_t(rows.rows[i]) * cols, cols, floats_.begin() + int64_t(i) * cols);
    if (floats_.empty()) continue;
    DevicePtr block = stage(floats_.data(), floats_.size());
    pairs_.clear();
    for (size_t i = 0; i < rows.rows.size(); ++i) {
      pairs_.push_back(at(store_.value(p), int64_t(rows.rows[i]) * cols));
      pairs_.push_back(at(block, int64_t(i) * cols));
    }
    move_pairs(pairs_, cols, kMoveCopy);
  }
  cuda_.synchronize();
}

void CudaExecutor::download_slots() {
  if (!slots_on_device_) return;
  CudaDevice::get();
  OptimizerState& state = store_.optimizer_state();
  for (int p = 0; p < store_.model().size(); ++p)
    for (size_t k = 0; k < 2 && size_t(p) < state.slots.size() && k < state.slots[size_t(p)].size(); ++k)
      download(state.slots[size_t(p)][k].data(), slots_[size_t(2 * p) + k],
                             state.slots[size_t(p)][k].size() * sizeof(float));
  cuda_.synchronize();
}

OptimizerState CudaExecutor::optimizer_state() {
  download_slots();
  return store_.optimizer_state();
}

// The next device step uploads the host's slots (update(): !slots_on_device_).
void CudaExecutor::set_optimizer_state(OptimizerState state) {
  store_.optimizer_state() = std::move(state);
  slots_on_device_ = false;
}

void CudaExecutor::update_on_host(Optimizer& optimizer) {
  Model& model = store_.model();
  OptimizerState& state = store_.optimizer_state();
  store_.download(model);  // resident: the step reads and writes the Model's values
  download_slots();        // the device's slots are the live ones: bring them over
  slots_on_device_ = false;
  store_.gradients();
  OptimizerAccess::step(optimizer, model, store_.host_grads_, store_.touched_.all(), &parallel_, &state);
  upload_updated(optimizer.dense_updates());
}

void CudaExecutor::download_updated() {
  Model& model = store_.model();
  download_touched([&](int p) { return store_.value(p); }, [&](int p) { return model.param(p).value.data(); },
                   [&](int p, int32_t row, const float* values) {
                     const int64_t cols = model.param(p).shape.cols();
                     std::copy_n(values, cols, model.param(p).value.begin() + int64_t(row) * cols);
                   });
}

// The optimizer's state slots on the device: two per parameter, in one
// block, made by the first device step.
void CudaExecutor::make_slots() {
  if (!slots_.empty()) return;
  const Model& model = store_.model();
  auto slot_bytes = [&](int p) { return (size_t(bytes_of(model.param(p).shape.numel())) + 255) & ~size_t(255); };
  size_t bytes = 0;
  for (int p = 0; p < model.size(); ++p) bytes += 2 * slot_bytes(p);
  slots_block_ = DeviceBuffer(cuda_, bytes);
  DevicePtr next = slots_block_.get();
  for (int p = 0; p < model.size(); ++p)
    for (int k = 0; k < 2; ++k) {
      slots_.push_back(next);
      next += slot_bytes(p);
    }
}

// The rows a step updates, as (weights, gradient, slot 0, slot 1) addresses in
// pairs_: per parameter not frozen, a dense one as one row, an embedding table
// its touched rows.
std::vector<CudaExecutor::UpdateSegment> CudaExecutor::update_table() {
  const Model& model = store_.model();
  std::vector<UpdateSegment> segments;
  pairs_.clear();
  for (int p = 0; p < model.size(); ++p) {
    if (model.param(p).frozen) continue;  // optimizers never update it
    const GradientRows& rows = store_.touched_.of(p);
    const int64_t cols = model.param(p).shape.cols();
    UpdateSegment segment{int64_t(pairs_.size() / 4), 0, rows.all ? model.param(p).shape.numel() : cols};
    auto tuple = [&](int64_t offset) {
      pairs_.insert(pairs_.end(), {at(store_.value(p), offset), at(store_.gradient(p), offset),
                                   at(slots_[size_t(2 * p)], offset), at(slots_[size_t(2 * p + 1)], offset)});
      ++segment.rows;
    };
    if (rows.all) tuple(0);
    else
      for (int32_t row : rows.rows) tuple(int64_t(row) * cols);
    if (segment.rows > 0 && segment.width > 0) segments.push_back(segment);
  }
  return segments;
}

// Σ g² summed on the device: the optimizer's bookkeeping and the slots made
// ready for the kernels. False when the step went to the host instead.
bool CudaExecutor::begin_device_step(Optimizer& optimizer, double sum_of_squares, DeviceUpdate& rule) {
  if (!std::isfinite(sum_of_squares)) {  // step() names the culprit
    update_on_host(optimizer);
    return false;
  }
  const Model& model = store_.model();
  OptimizerState& state = store_.optimizer_state();
  const bool slots_were_on_device = slots_on_device_;
  rule = OptimizerAccess::begin_device_step(optimizer, model, state, sum_of_squares);
  if (rule.state_made && slots_were_on_device) {
    // Another state's slots are live on the device (another optimizer, or one
    // before a reset()): the host step brings them into that state before it
    // is replaced, so that a failed step can give it back as it was.
    OptimizerAccess::cancel_device_step(optimizer, state);
    update_on_host(optimizer);
    return false;
  }
  if (rule.state_made || !slots_on_device_) {
    // Fresh state: zeros; after host steps: the host's slots.
    for (int p = 0; p < model.size(); ++p)
      for (size_t k = 0; k < 2; ++k) {
        const size_t bytes = size_t(bytes_of(model.param(p).shape.numel()));
        if (rule.state_made || k >= state.slots[size_t(p)].size()) zero(slots_[size_t(2 * p) + k], bytes);
        else upload(slots_[size_t(2 * p) + k], state.slots[size_t(p)][k].data(), bytes);
      }
    slots_on_device_ = true;
  }
  return true;
}

// Check, then apply (as Optimizer::step does on the host): the preview
// stores nothing and flags a non-finite value the update would store.
// `leading`: the kernel's arguments before the rule's.
template <typename... Leading>
void CudaExecutor::launch_update(void* fn, int64_t elements, const DeviceUpdate& rule, int preview,
                                 Leading... leading) {
  const int kind = rule.kind == DeviceUpdate::Kind::Sgd ? 1 : rule.kind == DeviceUpdate::Kind::SgdMomentum ? 2 : 3;
  launch(Primitive::OptimizerStep, fn, elements, leading..., kind, rule.lr, rule.weight_decay, rule.momentum,
         rule.beta1, rule.beta2, 1.0f - rule.beta1, 1.0f - rule.beta2, rule.correction1, rule.correction2, rule.eps,
         rule.decay, rule.scale, preview, non_finite_);
}

// After the preview (and, resident, the update it guarded): true when it
// flagged nothing. Otherwise nothing was written on the device; the host step
// runs the same float operations over the same values and throws the
// UserError naming the parameter, element and step, leaving the model and
// state as they are.
bool CudaExecutor::preview_passed(Optimizer& optimizer, const DeviceUpdate& rule) {
  unsigned non_finite = 0;
  download(&non_finite, non_finite_, sizeof non_finite);
  cuda_.synchronize();
  if (non_finite == 0) return true;
  OptimizerAccess::cancel_device_step(optimizer, store_.optimizer_state());
  if (rule.state_made) slots_on_device_ = false;  // zeros for a state that was not made: nothing to bring back
  update_on_host(optimizer);
  return false;
}

// One step on the device (see the header): the rows of update_table() summed,
// then updated by the rule's kernel, a launch per segment; resident, by the
// multi-tensor kernels (update_resident).
void CudaExecutor::update(Optimizer& optimizer) {
  CudaDevice::get();
  UncountedWork uncounted(stats_);
  lanes_[0].at(Pass::Backward, -1, -1, 0, "optimizer step");
  if (OptimizerAccess::device_rule(optimizer).kind == DeviceUpdate::Kind::None || optimizer.dense_updates())
    return update_on_host(optimizer);
  staging_used_ = 0;
  make_slots();
  const std::vector<UpdateSegment> segments = update_table();
  if (segments.empty()) return update_on_host(optimizer);
  if (config_.resident_params) return update_resident(optimizer, segments);
  const DevicePtr tuples = stage(pairs_.data(), pairs_.size());
  auto segment_tuples = [&](const UpdateSegment& s) { return tuples + DevicePtr(s.first) * 4 * sizeof(uint64_t); };
  zero(norm_, sizeof(double));
  for (const UpdateSegment& s : segments)
    launch(Primitive::Reduce, sum_squares_fn_, std::min(s.rows * s.width, kNormThreads), s.rows, s.width,
           segment_tuples(s), norm_);
  double sum = 0;
  download(&sum, norm_, sizeof sum);
  cuda_.synchronize();
  DeviceUpdate rule;
  if (!begin_device_step(optimizer, sum, rule)) return;
  zero(non_finite_, sizeof(unsigned));
  for (const UpdateSegment& s : segments)
    launch_update(optimizer_fn_, s.rows * s.width, rule, 1, s.rows, s.width, segment_tuples(s));
  if (!preview_passed(optimizer, rule)) return;
  for (const UpdateSegment& s : segments)
    launch_update(optimizer_fn_, s.rows * s.width, rule, 0, s.rows, s.width, segment_tuples(s));
  download_updated();
}

// The resident step over the rows in pairs_: one launch of each multi-tensor
// kernel, each pair of waits a graph when graphs are on; the Model is left
// behind the device (see the header).
void CudaExecutor::update_resident(Optimizer& optimizer, std::span<const UpdateSegment> segments) {
  std::vector<int64_t>& starts = offsets_;  // each row's first element in the flattened range
  starts.assign(1, 0);
  for (const UpdateSegment& s : segments)
    for (int64_t r = 0; r < s.rows; ++r) starts.push_back(starts.back() + s.width);
  const int64_t rows = int64_t(starts.size()) - 1, total = starts.back();
  DevicePtr tuples = 0, row_starts = 0;
  {
    StepGraphs::Capture capture(graphs_, 0);
    tuples = stage(pairs_.data(), pairs_.size());
    row_starts = stage(starts.data(), starts.size());
    zero(norm_, sizeof(double));
    launch(Primitive::Reduce, sum_squares_multi_fn_, std::min(total, kNormThreads), rows, tuples, row_starts, norm_);
    capture.launch();
  }
  double sum = 0;
  download(&sum, norm_, sizeof sum);
  cuda_.synchronize();
  DeviceUpdate rule;
  if (!begin_device_step(optimizer, sum, rule)) return;
  {
    StepGraphs::Capture capture(graphs_, 0);
    zero(non_finite_, sizeof(unsigned));
    launch_update(optimizer_multi_fn_, total, rule, 1, rows, tuples, row_starts);
    launch_update(optimizer_multi_fn_, total, rule, 0, rows, tuples, row_starts);
    capture.launch();
  }
  if (preview_passed(optimizer, rule)) store_.mark_model_behind();
}

// Streaming (see the header). The second stream starts after what the main
// stream queued for this forward (the zeroed objective, the uniform values);
// the main stream waits for each type's event at most once, and for the whole
// second stream before the lazy steps. The staging buffer is one: each list is
// copied on the stream whose kernel reads it, and the buffer is replaced only
// after a synchronize() of both streams (stage()).
void CudaExecutor::start_stream(const std::function<void()>& eager) {
  type_waited_.assign(size_t(program_.num_types()), 0);
  cuda_.wait(1, 0);
  stream_ = 1;
  try {
    eager();
  } catch (...) {
    stream_ = 0;
    throw;
  }
  stream_ = 0;
}

void CudaExecutor::eager_done(int type) { cuda_.record(type_events_[size_t(type)], 1); }

void CudaExecutor::wait_for_eager(int type) {
  if (type_waited_[size_t(type)]) return;
  type_waited_[size_t(type)] = 1;
  cuda_.wait_event(0, type_events_[size_t(type)]);
}

std::exception_ptr CudaExecutor::join_stream() {
  cuda_.wait(0, 1);
  return nullptr;
}

// --- primitives (runtime/device.h) ---

// The kernel's arguments: long long rows, then (pointer, ld) per operand.
// VJIT_PROFILE: each step timed until the GPU has run it.
void CudaExecutor::finish(Lane&) { cuda_.synchronize(); }

void CudaExecutor::launch_fused(Lane&, const KernelLaunch& launch) {
  void* fn = fused_fn_[int(launch.pass)][fused_begin_[int(launch.pass)][size_t(launch.type)] + launch.index];
  std::vector<uint64_t>& slots = pairs_;
  slots.assign(1, uint64_t(launch.rows));
  for (const View& v : launch.operands) {
    VJIT_INTERNAL_CHECK(v.pointers == nullptr, "the CUDA plan reads no operand through row tables");
    slots.insert(slots.end(), {address(v.data), uint64_t(v.ld)});
  }
  params_.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) params_[i] = &slots[i];
  ++stats_.kernels;
  issue(Primitive::Fused);
  cuda_.launch(fn, CudaDevice::grid_for(launch.rows * launch.width), 256, params_.data(), stream_);
}

// A row assigned once was zeroed whole (zero_gradient_rows): adding assigns it.
void CudaExecutor::move_rows(Lane&, std::span<const RowMove> moves, int64_t width, RowMode mode, const uint8_t*) {
  if (moves.empty() || width == 0) return;
  const int64_t rows = int64_t(moves.size());
  static_assert(sizeof(RowMove) == 2 * sizeof(uint64_t), "vjit_move_rows reads (dst, src) address pairs");
  launch(mode == RowMode::Add ? Primitive::AddRows : Primitive::MoveRows, move_rows_fn_, rows * width, rows, width,
         stage(moves.data(), moves.size()), mode == RowMode::Add ? kMoveAdd : kMoveCopy);
}

void CudaExecutor::zero_gradient_rows(Lane&, int64_t rows, int64_t ld, int64_t, const uint8_t*, float* data) {
  zero(address(data), size_t(bytes_of(rows * ld)));
}

// Sources in order per row (vjit_gather_sum), read through their addresses:
// a child's scattered row, or a child row of either pass's arena.
void CudaExecutor::sum_rows(Lane&, int64_t rows, int64_t width, int64_t row_width,
                            std::span<const float* const> sources, std::span<const int> begin, bool stack,
                            const uint8_t* keep, const View& out) {
  VJIT_INTERNAL_CHECK(keep == nullptr, "the CUDA device's children forward no rows");
  if (stack) fill_rows(lanes_[stream_], rows, row_width, 0.0f, out);
  if (sources.empty()) {
    if (!stack) fill_rows(lanes_[stream_], rows, width, 0.0f, out);
    return;
  }
  static_assert(sizeof(const float*) == sizeof(uint64_t), "vjit_gather_sum reads 64-bit row addresses");
  const DevicePtr first = stage(begin.data(), begin.size());
  const DevicePtr src = stage(sources.data(), sources.size());
  launch(Primitive::AddRows, gather_sum_fn_, rows * width, rows, width, first, src, address(out.data), out.ld,
         int(stack));
}

// Staged packed, then copied to their rows.
void CudaExecutor::upload_rows(Lane&, std::span<const float* const> host_rows, int64_t width, const View& out) {
  const int64_t rows = int64_t(host_rows.size());
  floats_.resize(size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(host_rows[size_t(r)], width, floats_.begin() + r * width);
  copy_strided(rows, width, stage(floats_.data(), floats_.size()), width, address(out.data), out.ld);
}

void CudaExecutor::copy_rows(Lane& lane, int64_t rows, std::span<const ColumnCopy> copies) {
  for (const ColumnCopy& c : copies) {
    if (c.src.data) copy_strided(rows, c.width, address(c.src.data), c.src.ld, address(c.dst.data), c.dst.ld);
    else fill_rows(lane, rows, c.width, 0.0f, c.dst);
  }
}

void CudaExecutor::fill_rows(Lane&, int64_t rows, int64_t width, float value, const View& out) {
  VJIT_INTERNAL_CHECK(out.pointers == nullptr, "the CUDA plan fills no rows through a row table");
  launch(Primitive::Fill, fill_rows_fn_, rows * width, rows, width, value, address(out.data), out.ld);
}

void CudaExecutor::broadcast_rows(Lane&, int64_t rows, int64_t width, const View& src, int64_t period,
                                  const View& out) {
  launch(Primitive::MoveRows, broadcast_fn_, rows * width, rows, width, address(src.data), src.ld, period,
         address(out.data), out.ld);
}

void CudaExecutor::sum_columns_mod(Lane&, int64_t rows, int64_t width, int64_t in_width, const View& src,
                                   const View& out) {
  launch(Primitive::Reduce, sum_mod_fn_, rows * width, rows, width, in_width, address(src.data), src.ld,
         address(out.data), out.ld);
}

// An operand of another shape is a scalar (element 0) or a vector broadcast
// over the rows (element i mod n).
void CudaExecutor::elementwise(Lane&, const Node& node, int64_t rows, int64_t width, Operand a, Operand b,
                               const View& out) {
  launch(Primitive::Elementwise, elementwise_fn_, rows * width, int(node.op), rows, width, address(a.data), a.ld,
         a.n, address(b.data), b.ld, b.n, float(ir::unary_constant(node)), address(out.data), out.ld);
}

void CudaExecutor::dropout(Lane&, int64_t rows, int64_t width, const View& x, const DropoutMask& mask,
                           const View& out) {
  const float scale = mask.training ? float(1.0 / (1.0 - mask.rate)) : 1.0f;
  launch(Primitive::Elementwise, dropout_fn_, rows * width, rows, width, address(x.data), x.ld, address(out.data),
         out.ld, stage(mask.sample_vertex.data(), mask.sample_vertex.size()), mask.seed, mask.key, mask.rate, scale,
         int(mask.training));
}

void CudaExecutor::outer(Lane&, int64_t rows, int64_t m, int64_t n, const View& a, const View& b,
                         const View* addend, const View& out) {
  VJIT_INTERNAL_CHECK(addend == nullptr, "the CUDA plan folds no outer product into an add");
  launch(Primitive::Outer, outer_fn_, rows * m * n, rows, m, n, address(a.data), a.ld, address(b.data), b.ld,
         address(out.data), out.ld);
}

// The kernel made around the row op's device function (codegen/cuda_source.h).
void CudaExecutor::row_op(Lane&, const ir::RowOp& op, int64_t rows, std::span<const View> in,
                          std::span<const int64_t> in_width, int64_t width, const View& out) {
  void* fn = nullptr;
  for (int o = 0; o < ir::kNumOps && !fn; ++o)
    if (ir::row_op(ir::Op(o)) == &op) fn = row_fns_[size_t(o)];
  const int64_t threads = op.cuda_form == ir::CudaRowForm::Element ? rows * width : rows;
  if (in.size() == 1)
    launch(op.primitive, fn, threads, rows, address(in[0].data), in[0].ld, in_width[0], address(out.data), out.ld,
           width);
  else
    launch(op.primitive, fn, threads, rows, address(in[0].data), in[0].ld, in_width[0], address(in[1].data), in[1].ld,
           in_width[1], address(out.data), out.ld, width);
}

void CudaExecutor::softmax_ce(Lane&, int64_t rows, int64_t classes, const View& logits, std::span<const int> labels,
                              const View* upstream, const View& out) {
  const View up = upstream ? *upstream : View{};
  launch(Primitive::SoftmaxCE, softmax_fn_, rows, rows, classes, address(logits.data), logits.ld,
         stage(labels.data(), labels.size()), address(up.data), up.ld, int(upstream != nullptr), address(out.data),
         out.ld);
}

void CudaExecutor::add_objective(Lane&, int64_t rows, const View& x) {
  launch(Primitive::Reduce, loss_sum_fn_, rows, rows, address(x.data), x.ld, objective_);
}

// VJIT_CHECK_FINITE is refused on this device (Options::resolve).
NonFinite CudaExecutor::find_non_finite(Lane&, int64_t, int64_t, const View&) {
  VJIT_INTERNAL_CHECK(false, "the CUDA device does not check values for VJIT_CHECK_FINITE");
}

// cuBLASLt; with a bias, the rows start as the bias and the GEMM adds the
// product, except that a bias laid out as C is cuBLASLt's C operand, read
// where it lies (C = product + bias in one call).
void CudaExecutor::gemm(Lane&, const Gemm& g) {
  VJIT_INTERNAL_CHECK(g.c_rows == nullptr, "the CUDA plan writes no GEMM through row tables");
  const bool bias_as_c = g.bias && g.bias_ld == g.ldc && g.k > 0;
  if (g.bias && !bias_as_c) copy_strided(g.m, g.n, address(g.bias), g.bias_ld, address(g.c), g.ldc);
  ++stats_.gemm_calls;
  stats_.gemm_flops += 2.0 * double(g.m) * double(g.n) * double(g.k);
  if (g.m == 0 || g.n == 0) return;
  const float beta = g.bias ? 1.0f : g.beta;
  if (g.k == 0) {  // C = beta·C: nothing to add
    VJIT_INTERNAL_CHECK(beta == 1.0f, "a GEMM over no terms must accumulate");
    return;
  }
  issue(Primitive::Gemm);
  cuda_.sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, address(g.a), g.lda, address(g.b), g.ldb, beta, address(g.c), g.ldc,
              config_.tf32, stream_, bias_as_c ? address(g.bias) : 0);
}

// One strided-batched cuBLASLt call where the products' operands lie one
// stride apart, each operand at its own (GemmBatch), every stride
// at least 0 in some order of the products, and the outputs apart (each
// product's rows wholly before the next's); otherwise one call each, a
// primitive per product. cuBLASLt's batches are strided (or, in newer
// releases, arrays of pointers, which this device does not use): products
// whose operands lie at no common stride cannot be one call.
void CudaExecutor::gemm_batched(Lane& lane, std::span<const Gemm> gemms) {
  GemmBatch batch;
  if (!strided_batch(gemms, batch)) {
    for (const Gemm& g : gemms) gemm(lane, g);
    return;
  }
  const Gemm& first = batch.stride_c >= 0 ? gemms.front() : gemms.back();
  batch.stride_a = std::abs(batch.stride_a);
  batch.stride_b = std::abs(batch.stride_b);
  batch.stride_c = std::abs(batch.stride_c);
  const bool bias_as_c = first.bias && first.bias_ld == first.ldc;
  for (const Gemm& g : gemms)
    if (g.bias && !bias_as_c) copy_strided(g.m, g.n, address(g.bias), g.bias_ld, address(g.c), g.ldc);
  stats_.gemm_calls += int64_t(gemms.size());
  stats_.gemm_flops += 2.0 * double(first.m) * double(first.n) * double(first.k) * double(gemms.size());
  issue(Primitive::GemmBatched);
  cuda_.sgemm(first.ta, first.tb, first.m, first.n, first.k, 1.0f, address(first.a), first.lda, address(first.b),
              first.ldb, first.bias ? 1.0f : first.beta, address(first.c), first.ldc, config_.tf32, stream_,
              bias_as_c ? address(first.bias) : 0, batch);
}

// Whether `gemms` are one strided batch: two or more products of one shape
// and kind (transposes, leading dimensions, beta, a bias read as C or
// copied), none over no rows or terms, whose A, B, C (and a bias read as C,
// at C's stride) lie at uniform strides, in floats, in list order: A's and
// B's of C's sign (the batch runs from the last product when that is
// negative), C's at least a product's extent.
bool CudaExecutor::strided_batch(std::span<const Gemm> gemms, GemmBatch& batch) {
  if (gemms.size() < 2) return false;
  const Gemm& g0 = gemms[0];
  // In floats, as device addresses (the views' floats of no one host array).
  auto stride = [](const float* to, const float* from) {
    return int64_t(address(to) - address(from)) / int64_t(sizeof(float));
  };
  batch = {int64_t(gemms.size()), stride(gemms[1].a, g0.a), stride(gemms[1].b, g0.b), stride(gemms[1].c, g0.c)};
  const bool bias_as_c = g0.bias && g0.bias_ld == g0.ldc;
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Gemm& g = gemms[i];
    const bool same_kind = g.ta == g0.ta && g.tb == g0.tb && g.m == g0.m && g.n == g0.n && g.k == g0.k &&
                           g.lda == g0.lda && g.ldb == g0.ldb && g.ldc == g0.ldc && g.beta == g0.beta &&
                           (g.bias != nullptr) == (g0.bias != nullptr) && g.bias_ld == g0.bias_ld &&
                           g.c_rows == nullptr && g.m > 0 && g.n > 0 && g.k > 0;
    const int64_t n = int64_t(i);
    // (at() wraps modulo 2⁶⁴: a negative stride steps back.)
    const bool strided = address(g.a) == at(address(g0.a), n * batch.stride_a) &&
                         address(g.b) == at(address(g0.b), n * batch.stride_b) &&
                         address(g.c) == at(address(g0.c), n * batch.stride_c) &&
                         (!bias_as_c || address(g.bias) == at(address(g0.bias), n * batch.stride_c));
    if (!same_kind || !strided) return false;
  }
  const int64_t sign = batch.stride_c < 0 ? -1 : 1;
  return batch.stride_a * sign >= 0 && batch.stride_b * sign >= 0 &&
         batch.stride_c * sign >= (g0.m - 1) * g0.ldc + g0.n;
}

// Per-vertex matrices (MV-RNN): one launch over every row's product.
void CudaExecutor::vertex_products(Lane&, int64_t rows, const VertexProducts& v) {
  VJIT_INTERNAL_CHECK(v.u == nullptr && v.a.pointers == nullptr && v.b.pointers == nullptr,
                      "the CUDA plan folds no product into an outer product's add and reads no row tables");
  const Node& node = *v.node;
  const PerVertexProduct p = per_vertex_product(node, v.a_shape, v.b_shape);
  stats_.gemm_calls += rows;
  stats_.gemm_flops += p.flops() * double(rows);
  launch(Primitive::VertexProducts, batched_matmul_fn_, rows * p.m * p.n, rows, p.m, p.n, p.k, address(v.a.data),
         v.a.ld, p.lda, int(node.trans_a), address(v.b.data), v.b.ld, p.ldb, int(node.trans_b), address(v.out.data),
         v.out.ld);
}

void CudaExecutor::accumulate_vertex_products(Lane&, int64_t, const Node& product, const Shape&, const Shape&,
                                              const View&, const View&, float*) {
  VJIT_INTERNAL_CHECK(false, "the CUDA plan folds no per-vertex " << ir::op_name(product.op) << " into a weight gradient");
}

void CudaExecutor::reduce_rows(Lane&, int64_t rows, int64_t width, const View& x, float* dst) {
  launch(Primitive::Reduce, sum_columns_fn_, width, rows, width, address(x.data), x.ld, address(dst));
}

// One launch of the op's kernel over every element of the rows' results, the
// children counts staged beside it.
void CudaExecutor::children_block(Lane&, const Node& node, int64_t rows, const Shape& in, const View& x,
                                  const View* g, std::span<const int> children, const View& out) {
  const ChildrenBlockKernel* kernel = nullptr;
  for (const ChildrenBlockKernel& k : kChildrenBlockKernels)
    if (k.op == node.op) kernel = &k;
  VJIT_INTERNAL_CHECK(kernel != nullptr, "no CUDA kernel of the children block runs " << ir::op_name(node.op));
  VJIT_INTERNAL_CHECK(x.pointers == nullptr && (g == nullptr || g->pointers == nullptr) && out.pointers == nullptr,
                      "the CUDA plan reads no children block through row pointers");
  const int64_t width = node.shape.numel();
  if (rows == 0 || width == 0) return;
  const View up = g ? *g : View{};
  launch(kernel->primitive, children_fns_[size_t(node.op)], rows * width, rows, width, int64_t(in.rows()),
         int64_t(in.cols()), int64_t(node.start), address(x.data), x.ld, address(up.data), up.ld,
         stage(children.data(), children.size()), address(out.data), out.ld);
}

}  // namespace vjit::runtime
