#pragma once
// The CUDA executor: runs an execution plan lowered for the GPU (every fused
// group a kernel of ExecPlan::cuda's module) over a planned batch, task by
// task, on one stream of CudaDevice (two with Config::streaming, below). It is the device form of the CPU executor
// (runtime/cpu_executor.cpp), which specifies what every step means; it follows
// the same layout (offsets and leading dimensions into one device arena per
// pass), resolves the same views, and runs each step as one launch over the
// task's rows: cuBLASLt for products, the plan's fused kernels, and the
// module's fixed kernels (codegen/cuda_source.h) for gathers, scatters,
// pushes, pulls, dropout, reshapes, softmax and losses.
//
// Index lists (which rows a gather reads, which tokens a lookup takes, the
// features a pull reads) are built on the host per step, staged in pinned
// memory and copied asynchronously on the same stream ahead of the launch
// that reads them. The host waits for the device only at the end of a forward
// (the objective and the pushed values come back) and of a backward.
//
// Streaming (Config::streaming, VJIT_STREAMING; Cavs §3.4, as in
// Runner::run_forward_streaming): the forward's eager steps are queued on
// the second stream, type by type in the order the tasks first need them, with
// an event recorded after each type's; the tasks run on the main stream, each
// after a wait on the events of its type and of its children's types. Eager
// forward steps write only their own type's buffers. The lazy steps, the
// backward and the update stay on the main stream, which waits for all of the
// second stream before the lazy steps. One host thread queues both streams;
// the staging buffer is shared, each list uploaded on the stream that reads it.
//
// Parameter store: parameters, gradients and the optimizer's state slots live
// on the device. An SGD or Adam step runs there (OptimizerAccess::device_rule: the
// same float operations as runtime/optimizer_rules.cpp, so the same weights as a CPU
// step): the norm of the listed gradients is summed on the device, the
// optimizer does its bookkeeping (OptimizerAccess::begin_device_step), one kernel
// per parameter updates the listed rows, and the changed values are copied
// back into the Model, which stays current for its user. The kernel first runs
// as a preview (the same float operations, nothing stored) that flags a value
// the update would leave NaN or ±Inf; then the step goes to the host, whose
// Optimizer::step finds the same value, names it and changes nothing. A rule with no device
// form, or dense updates of an embedding table, runs on the host over the
// downloaded gradients instead. Values changed in the Model by hand after the
// engine was built need parameters().upload(model).
//
// Resident parameters (Config::resident_params, VJIT_CUDA_RESIDENT_PARAMS; never
// run on a GPU): the step is one kernel over every parameter for Σ g² and one
// for the preview and the update (vjit_sum_squares_multi,
// vjit_optimizer_update_multi: rows of (weights, gradient, slot 0, slot 1)
// with their start in the flattened range), the update storing nothing when
// the preview flagged a value; with graphs on, each of the two is captured and
// launched as a graph. Nothing is copied back: the store marks the Model
// behind, and its download() brings the whole values block over in one copy
// when a reader asks (Engine::download_parameters, a checkpoint saved, the
// engine destroyed, a step that falls back to the host). The host waits for the
// device twice per step, for Σ g² (the clipping factor and the optimizer's
// bookkeeping are the host's) and for the preview's flag.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/cuda_driver.h"
#include "runtime/cuda_graph.h"
#include "runtime/optimizer_access.h"
#include "runtime/touched_rows.h"
#include "runtime/parallel_for.h"
#include "runtime/runner.h"
#include "runtime/thread_pool.h"

namespace vjit::runtime {

class CudaExecutor;

class CudaParameterStore final : public ParameterStore {
 public:
  CudaParameterStore(CudaExecutor& owner, CudaDevice& device, Model& model, const ExecPlan& plan);
  ~CudaParameterStore() override;
  // Pushes the Model's values to the device.
  void upload(const Model& model) override;
  // Pulls the device's values into the Model when they are newer (one copy); nothing otherwise.
  void download(Model& model) const override;
  // The device's values are newer than the Model's (a resident step ran).
  void mark_model_behind() { model_behind_ = true; }
  // Downloads the gradients of the last backward the first time they are asked for.
  const std::vector<std::vector<float>>& gradients() const override;
  const std::vector<GradientRows>& gradient_rows() const override { return touched_.all(); }

  Model& model() const { return model_; }
  void read_gradient(int param, int64_t offset, int64_t floats, float* values) const override;
  void write_gradient(int param, int64_t offset, int64_t floats, const float* values) override;
  uint64_t device_gradient(int param) const override { return grads_[size_t(param)]; }
  void add_touched_rows(int param, std::span<const int32_t> rows) override;

  DevicePtr value(int param) const { return values_[size_t(param)]; }
  DevicePtr gradient(int param) const { return grads_[size_t(param)]; }
  void touch(int param, int row) { touched_.touch(param, row); }
  void finish_touched() { touched_.finish(); }
  OptimizerState& optimizer_state() { return optimizer_state_; }

 private:
  CudaExecutor& owner_;
  CudaDevice& device_;
  Model& model_;
  OptimizerState optimizer_state_;
  DeviceBuffer values_block_, grads_block_;  // every parameter's values, gradients
  size_t values_bytes_ = 0;                  // of each block
  mutable char* values_mirror_ = nullptr;    // page-locked, for download()
  mutable bool model_behind_ = false;
  std::vector<DevicePtr> values_, grads_;
  TouchedRows touched_;
  mutable std::vector<std::vector<float>> host_grads_;
  mutable std::vector<std::vector<int32_t>> host_rows_;  // rows of an embedding table's host gradient written last
  mutable bool host_current_ = false;
  // Host memory page-locked for the optimizer's transfers: the host gradients
  // and the Model's values as they were at construction.
  std::vector<void*> pinned_;
  friend class CudaExecutor;
};

class CudaExecutor final : public Runner, private Device {
 public:
  struct Config {
    int threads = 1;   // the host optimizer's threads
    bool profile = false;
    bool tf32 = false;  // cuBLASLt on TF32 tensor cores
    bool streaming = false;  // eager forward steps on the second stream (see above)
    bool graphs = false;     // each pass captured and launched as a CUDA graph (runtime/cuda_graph.h)
    bool resident_params = false;  // the Model refreshed only when read; one multi-tensor optimizer step (above)
  };
  CudaExecutor(const Program& program, const ExecPlan& plan, const Config& config);
  ~CudaExecutor() override;

  const char* device() const override { return "cuda"; }
  void forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result) override;
  void backward() override;
  void update(Optimizer& optimizer) override;
  ParameterStore& parameters() override { return store_; }
  OptimizerState optimizer_state() override;
  void set_optimizer_state(OptimizerState state) override;

 private:
  struct Arena {
    DeviceBuffer buffer;
    DevicePtr data = 0;
    int64_t capacity = 0;  // floats
  };

  DevicePtr reserve(Arena& arena, int64_t floats);
  // The runner's views hold device addresses as float*.
  float* arena(Pass pass) const override;
  float* param_address(int param) const override;
  // Copies `count` items to the device through the pinned staging buffer, on
  // the stream, and returns their device address.
  template <typename T>
  DevicePtr stage(const T* data, size_t count);
  // Replaces the staging buffers (host and device) by ones of `capacity` bytes; the device is idle.
  void grow_staging(size_t capacity);
  // Launches one of the module's own kernels, `kind` of primitive, over `elements` threads.
  template <typename... Args>
  void launch(Primitive kind, void* fn, int64_t elements, Args... args);
  // The device's copies and fills, counted as primitives.
  void zero(DevicePtr dst, size_t bytes);
  void download(void* dst, DevicePtr src, size_t bytes);
  void upload(DevicePtr dst, const void* src, size_t bytes);
  void issue(Primitive kind) { lanes_[stream_].issue(kind); }
  // Moves rows by (dst, src) address pairs (dst only, zeroing: kMoveZero).
  void move_pairs(const std::vector<uint64_t>& pairs, int64_t width, int mode);
  void copy_strided(int64_t rows, int64_t width, DevicePtr src, int64_t sld, DevicePtr dst, int64_t dld);

  float* push_values() const override;
  float* param_gradient(int param) override;
  TouchedRows& touched_rows() override { return store_.touched_; }
  void start_stream(const std::function<void()>& eager) override;
  void eager_done(int type) override;
  void wait_for_eager(int type) override;
  std::exception_ptr join_stream() override;

  // --- primitives (runtime/device.h) ---
  void finish(Lane& lane) override;
  void launch_fused(Lane& lane, const KernelLaunch& launch) override;
  void move_rows(Lane& lane, std::span<const RowMove> moves, int64_t width, RowMode mode,
                 const uint8_t* assign) override;
  void zero_gradient_rows(Lane& lane, int64_t rows, int64_t ld, int64_t width, const uint8_t* assigned,
                          float* data) override;
  void sum_rows(Lane& lane, int64_t rows, int64_t width, int64_t row_width, std::span<const float* const> sources,
                std::span<const int> begin, bool stack, const uint8_t* keep, const View& out) override;
  void upload_rows(Lane& lane, std::span<const float* const> host_rows, int64_t width, const View& out) override;
  void copy_rows(Lane& lane, int64_t rows, std::span<const ColumnCopy> copies) override;
  void fill_rows(Lane& lane, int64_t rows, int64_t width, float value, const View& out) override;
  void broadcast_rows(Lane& lane, int64_t rows, int64_t width, const View& src, int64_t period,
                      const View& out) override;
  void sum_columns_mod(Lane& lane, int64_t rows, int64_t width, int64_t in_width, const View& src,
                       const View& out) override;
  void elementwise(Lane& lane, const ir::Node& node, int64_t rows, int64_t width, Operand a, Operand b,
                   const View& out) override;
  void dropout(Lane& lane, int64_t rows, int64_t width, const View& x, const DropoutMask& mask,
               const View& out) override;
  void outer(Lane& lane, int64_t rows, int64_t m, int64_t n, const View& a, const View& b, const View* addend,
             const View& out) override;
  void row_op(Lane& lane, const ir::RowOp& op, int64_t rows, std::span<const View> in,
              std::span<const int64_t> in_width, int64_t width, const View& out) override;
  void softmax_ce(Lane& lane, int64_t rows, int64_t classes, const View& logits, std::span<const int> labels,
                  const View* upstream, const View& out) override;
  void add_objective(Lane& lane, int64_t rows, const View& x) override;
  NonFinite find_non_finite(Lane& lane, int64_t rows, int64_t width, const View& x) override;

  void gemm(Lane& lane, const Gemm& gemm) override;
  void gemm_batched(Lane& lane, std::span<const Gemm> gemms) override;
  static bool strided_batch(std::span<const Gemm> gemms, GemmBatch& batch);
  void vertex_products(Lane& lane, int64_t rows, const VertexProducts& products) override;
  void accumulate_vertex_products(Lane& lane, int64_t rows, const ir::Node& product, const Shape& a_shape,
                                  const Shape& b_shape, const View& a, const View& b, float* grad) override;
  void reduce_rows(Lane& lane, int64_t rows, int64_t width, const View& x, float* dst) override;
  void children_block(Lane& lane, const ir::Node& node, int64_t rows, const Shape& in, const View& x, const View* g,
                      std::span<const int> children, const View& out) override;
  // The store's host copy of the gradients, from the device.
  void fetch_gradients();
  template <typename Source, typename Dense, typename Put>
  void download_touched(Source&& source, Dense&& dense, Put&& put);
  // Uploads what an optimizer step changed: every dense parameter, and the
  // touched rows of each embedding table (all of it when `dense`).
  void upload_updated(bool dense);
  // The optimizer on the host (runtime/optimizer.cpp), for a rule without a
  // device form or dense updates of embedding tables.
  void update_on_host(Optimizer& optimizer);
  // The device step's parts (update()).
  struct UpdateSegment {
    int64_t first = 0, rows = 0, width = 0;  // first tuple in pairs_, tuples, floats per row
  };
  void make_slots();
  std::vector<UpdateSegment> update_table();
  bool begin_device_step(Optimizer& optimizer, double sum_of_squares, DeviceUpdate& rule);
  template <typename... Leading>
  void launch_update(void* fn, int64_t elements, const DeviceUpdate& rule, int preview, Leading... leading);
  bool preview_passed(Optimizer& optimizer, const DeviceUpdate& rule);
  void update_resident(Optimizer& optimizer, std::span<const UpdateSegment> segments);
  // Copies the values an update changed into the Model: dense parameters
  // whole, embedding tables their touched rows.
  void download_updated();
  // Copies the device's state slots into the host's OptimizerState, when the
  // device's are the live ones.
  void download_slots();
  friend class CudaParameterStore;

  CudaDevice& cuda_;
  Config config_;
  ThreadPool pool_;
  PoolParallelFor parallel_;
  CudaParameterStore store_;
  DeviceModule module_;  // the plan's kernels; unloaded after the destructor's synchronize()
  std::vector<void*> fused_fn_[2];  // per type·fused index, flattened: [pass][fused_begin[type] + i]
  std::vector<size_t> fused_begin_[2];
  void *move_rows_fn_ = nullptr, *copy_rows_fn_ = nullptr, *elementwise_fn_ = nullptr, *dropout_fn_ = nullptr,
       *broadcast_fn_ = nullptr, *sum_mod_fn_ = nullptr, *sum_columns_fn_ = nullptr, *loss_sum_fn_ = nullptr,
       *outer_fn_ = nullptr, *batched_matmul_fn_ = nullptr,
       *softmax_fn_ = nullptr, *gather_sum_fn_ = nullptr, *fill_rows_fn_ = nullptr, *sum_squares_fn_ = nullptr,
       *optimizer_fn_ = nullptr, *sum_squares_multi_fn_ = nullptr, *optimizer_multi_fn_ = nullptr;
  std::array<void*, ir::kNumOps> row_fns_{};  // each row op's kernel (ir::row_op), by op
  std::array<void*, ir::kNumOps> children_fns_{};  // each children-block op's kernel, by op
  // The optimizer's state slots on the device (two per parameter), live when
  // slots_on_device_; otherwise the host's OptimizerState holds them.
  DeviceBuffer slots_block_;
  std::vector<DevicePtr> slots_;
  bool slots_on_device_ = false;
  DevicePtr norm_ = 0;        // Σ g² of a step, in double
  DevicePtr non_finite_ = 0;  // the optimizer kernel's preview: 1 when a value would be non-finite

  // The stream that launches, GEMMs and staging copies are queued on: 0, or 1
  // while the eager forward steps are queued with streaming on; each its lane
  // (one host thread queues both).
  int stream_ = 0;
  Lane lanes_[2];
  std::vector<void*> type_events_;  // streaming: per type, after its eager forward steps
  std::vector<char> type_waited_;

  Arena arena_[2], pushes_;
  DeviceBuffer scalars_;  // the objective and a step's Σ g², in double
  DevicePtr objective_ = 0;
  // Staging: pinned host memory mirrored by a device buffer of the same size.
  char* staging_host_ = nullptr;
  DeviceBuffer staging_buffer_;
  DevicePtr staging_device_ = 0;
  size_t staging_capacity_ = 0, staging_used_ = 0;
  // Scratch for index lists.
  std::vector<uint64_t> pairs_;
  std::vector<int64_t> offsets_;
  std::vector<int> ints_;
  std::vector<float> floats_;
  std::vector<void*> params_;  // a fused kernel's kernelParams
  StepGraphs graphs_;
};

}  // namespace vjit::runtime
