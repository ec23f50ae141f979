#pragma once
// The executor interface: what runs an execution plan (runtime/exec_plan.h)
// over a planned batch (runtime/memplan.h) on one device. An executor owns the
// parameter store of its device — parameter values, their gradients and the
// rows of each embedding table a batch touched — and updates the parameters
// with an optimizer. The engine (jit/engine.cpp) holds one through this
// interface, chosen by Options::device; the CPU executor is the first.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/exec_plan.h"
#include "runtime/memplan.h"
#include "scheduler/schedule.h"
#include "vjit/optimizer.h"
#include "vjit/primitive.h"
#include "vjit/program.h"
#include "vjit/run.h"

namespace vjit::runtime {

struct ExecStats {
  int64_t tasks = 0;
  int64_t kernels = 0;           // what the passes ran: on the CPU its steps' primitives, on CUDA its launches
  int64_t gemm_calls = 0;
  double gemm_flops = 0;          // 2·m·n·k summed over the GEMMs
  int64_t param_grad_gemms = 0;  // GEMMs that accumulate a weight gradient
  int64_t copy_calls = 0;
  int64_t copy_bytes = 0;
  int64_t layout_copy_bytes = 0;  // of those a layout decides: gathers, their gradients, Concat copies
  int64_t stacked_weight_bytes = 0;  // weights of merged products copied into one block (not in copy_bytes)
  int64_t gather_views = 0;      // (task, slot) gathers read in place, without a copy
  int64_t pretransposed_weights = 0;  // weights copied transposed for the GEMMs (VJIT_PRETRANSPOSE)
  double copy_s = 0, gemm_s = 0, elementwise_s = 0;
  PrimitiveCounts primitives;  // what the device ran, by kind

  ExecStats& operator+=(const ExecStats& o) {
    tasks += o.tasks;
    kernels += o.kernels;
    gemm_calls += o.gemm_calls;
    gemm_flops += o.gemm_flops;
    param_grad_gemms += o.param_grad_gemms;
    copy_calls += o.copy_calls;
    copy_bytes += o.copy_bytes;
    layout_copy_bytes += o.layout_copy_bytes;
    stacked_weight_bytes += o.stacked_weight_bytes;
    gather_views += o.gather_views;
    pretransposed_weights += o.pretransposed_weights;
    copy_s += o.copy_s;
    gemm_s += o.gemm_s;
    elementwise_s += o.elementwise_s;
    primitives += o.primitives;
    return *this;
  }
};

// Adds the time from its construction to its destruction to `total` (one of
// ExecStats' times).
class ScopedTimer {
 public:
  explicit ScopedTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

// One primitive an executor issued (VJIT_LOG=primitives): its kind, where in
// the plan it came from (pass, vertex type, task; -1 where none: a pass's
// zeroed gradients, the optimizer's update) and what ran — a fused kernel's
// name, an op's name or the executor's word for it ("zero gradients").
struct PrimitiveRecord {
  Primitive kind = Primitive::Gemm;
  Pass pass = Pass::Forward;
  int type = -1;
  int task = -1;
  int64_t rows = 0;
  std::string_view what;  // a literal, an op's name or a kernel name of the plan
};

// Counts the primitives an executor issues and, while VJIT_LOG=primitives
// records them (log not null), lists each with where it came from.
struct PrimitiveRecorder {
  PrimitiveRecord step;  // where the primitives issued next come from
  std::vector<PrimitiveRecord>* log = nullptr;

  void at(Pass pass, int type, int task, int64_t rows, std::string_view what) {
    step = {Primitive::Gemm, pass, type, task, rows, what};
  }
  void issue(PrimitiveCounts& counts, Primitive kind) {
    counts.add(kind);
    if (log != nullptr) [[unlikely]] {
      log->push_back(step);
      log->back().kind = kind;
    }
  }
};

// The time one step of a plan took, summed over the calls since the executor
// was built (VJIT_PROFILE): which pass, vertex type and phase it belongs to,
// what it is (an op and its value id, or a fused kernel's name) and how often
// it ran. Lets a user see which step of which vertex function costs what.
struct StepTime {
  std::string label;  // "backward internal core %40 matmul [512]"
  double seconds = 0;
  int64_t calls = 0;
  int64_t rows = 0;  // rows summed over the calls
};

// One batch, flattened, scheduled and laid out; the engine owns all three and
// keeps them (with copies of the tokens and labels the backward reads) until
// the next forward, so the caller's GraphBatch may go away after forward().
struct PlannedBatch {
  const scheduler::FlatBatch* graph = nullptr;
  const scheduler::FlatSchedule* schedule = nullptr;
  const BatchLayout* layout = nullptr;
};

// Parameters, gradients, touched rows and the optimizer state, resident where
// the executor runs.
// Upload copies the Model's values in; download copies them back out. On the
// CPU the store reads and writes the Model's own memory, so both are no-ops
// there; a device executor copies.
class ParameterStore {
 public:
  virtual ~ParameterStore() = default;
  virtual void upload(const Model& model) = 0;
  virtual void download(Model& model) const = 0;
  // The gradient of every parameter after the last backward, on the host.
  virtual const std::vector<std::vector<float>>& gradients() const = 0;
  // Per parameter, the rows of the last backward's gradient that may be
  // non-zero: for an embedding table (a parameter only EmbeddingGrad writes)
  // the batch's tokens, sorted and unique; every other parameter is dense.
  virtual const std::vector<GradientRows>& gradient_rows() const = 0;
  // Data-parallel training (vjit/distributed.h, jit/gradient_exchange.h)
  // replaces the last backward's gradients by their sums over all processes
  // before the update. It reads and writes `floats` gradient values of a
  // parameter from element `offset` on (through host memory: on a device
  // store a copy each way), sums dense ones in place on the device where the
  // store says where they are (device_gradient: 0 for a host store), and adds
  // the rows of an embedding table another process touched, for the update
  // to include (sorted after).
  virtual void read_gradient(int param, int64_t offset, int64_t floats, float* values) const = 0;
  virtual void write_gradient(int param, int64_t offset, int64_t floats, const float* values) = 0;
  virtual uint64_t device_gradient(int /*param*/) const { return 0; }
  virtual void add_touched_rows(int param, std::span<const int32_t> rows) = 0;
};

// Told by an executor, during backward(), which parameters' gradients are
// final: no later step of that backward writes them. Data-parallel training
// starts their sums over the processes then (Options::Tuning::dist_overlap,
// jit/gradient_exchange.h). Called on the thread that called backward().
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  // The gradients of `params` are final. Every parameter is named once per
  // backward, in the same order in every backward of the same executor.
  virtual void gradients_final(std::span<const int> params) = 0;
  // Between steps, after the first gradients_final: lets started sums progress.
  virtual void between_steps() = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* device() const = 0;
  // Runs F over the batch task by task; the objective and the pushed values go
  // to `result` (its buffers are reused).
  virtual void forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result) = 0;
  // Runs ∂F for the last forward; the gradients are then in parameters().
  virtual void backward() = 0;
  // The observer the next backward() passes tell (null: none; not owned). An
  // executor that does not tell (the CUDA executor) ignores it.
  virtual void set_backward_observer(BackwardObserver* /*observer*/) {}
  // Per parameter, the point of the backward after which its gradient is final
  // (the order gradients_final follows: point 0 first); empty when this
  // executor does not tell a BackwardObserver.
  virtual std::vector<int> gradient_final_points() const { return {}; }
  // One optimizer step over the parameters with the last gradients and the
  // optimizer state the parameter store keeps.
  virtual void update(Optimizer& optimizer) = 0;
  virtual ParameterStore& parameters() = 0;
  // For checkpoints: a copy of the optimizer state the parameter store keeps,
  // as of now (a device executor brings its live state slots back first), and
  // its replacement (a device executor takes the new slots up before its next
  // step).
  virtual OptimizerState optimizer_state() = 0;
  virtual void set_optimizer_state(OptimizerState state) = 0;
  // Counters since the last take_stats(), which resets them.
  virtual ExecStats take_stats() = 0;
  // VJIT_LOG=primitives: while on, every primitive issued is also recorded,
  // in the order issued; take_primitive_log() hands the records over and
  // starts a new list.
  virtual void record_primitives(bool on) = 0;
  virtual std::vector<PrimitiveRecord> take_primitive_log() = 0;
  // Per step of the plans, when the executor was asked to profile (VJIT_PROFILE);
  // empty otherwise. Costliest first.
  virtual std::vector<StepTime> step_profile() const { return {}; }
  // Starts step_profile() afresh (Engine::reset_stats).
  virtual void reset_step_profile() {}
};

}  // namespace vjit::runtime
