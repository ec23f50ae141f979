#pragma once
// The CPU device: the plan runner (runtime/runner.h) walks the plan, binds
// every value to a View from the batch's layout and issues the primitives of
// runtime/device.h, which this device runs on the host: on the pool's threads
// by blocks of rows (or of columns where rows add into shared rows). Besides
// them it keeps the arenas, the parameter store and the optimizer step, and
// the streamed forward's second thread. Each thread that issues primitives has
// its own Frame (its Lane and scratch). A steady-state step (a batch no larger
// than one seen before) allocates nothing.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/forwarding.h"
#include "runtime/gemm.h"
#include "runtime/products.h"
#include "runtime/row_placement.h"
#include "runtime/runner.h"
#include "runtime/parallel_for.h"
#include "runtime/thread_pool.h"
#include "runtime/touched_rows.h"
#include "runtime/trace.h"

namespace vjit::runtime {

class CpuParameterStore final : public ParameterStore {
 public:
  CpuParameterStore(Model& model, const ExecPlan& plan);

  // The CPU reads and writes the Model's own memory: nothing to copy.
  void upload(const Model& model) override;
  void download(Model& model) const override;
  const std::vector<std::vector<float>>& gradients() const override { return gradients_; }
  const std::vector<GradientRows>& gradient_rows() const override { return touched_.all(); }
  void read_gradient(int param, int64_t offset, int64_t floats, float* values) const override;
  void write_gradient(int param, int64_t offset, int64_t floats, const float* values) override;
  void add_touched_rows(int param, std::span<const int32_t> rows) override;

  Model& model() const { return model_; }
  float* value(int param) const { return model_.param(param).value.data(); }
  float* gradient(int param) { return gradients_[size_t(param)].data(); }
  // Zeroes the gradients (of an embedding table only the rows last touched).
  void zero_gradients();
  // Notes that the backward wrote row `row` of `param` (an embedding table).
  void touch(int param, int row) { touched_.touch(param, row); }
  TouchedRows& touched() { return touched_; }
  // Sorts the touched rows, after a backward.
  void finish_touched() { touched_.finish(); }
  // The optimizer's state for these parameters (moments, step count), in host
  // memory beside them; every train_step reads and updates it.
  OptimizerState& optimizer_state() { return optimizer_state_; }

 private:
  Model& model_;
  OptimizerState optimizer_state_;
  std::vector<std::vector<float>> gradients_;
  TouchedRows touched_;
};

class CpuExecutor final : public Runner, private Device {
 public:
  struct Config {
    int threads = 1;
    GemmBackend gemm = GemmBackend::Reference;
    // The eager forward steps run on a second thread while the tasks run
    // (Cavs §3.4, VJIT_STREAMING).
    bool streaming = false;
    // Time every step (VJIT_PROFILE): step_profile().
    bool profile = false;
    // VJIT_MAX_MEMORY: the two arenas together never hold more (0: no bound).
    // The engine refuses a batch that needs more before it runs.
    int64_t max_memory = 0;
    // Check every value a forward step writes (VJIT_CHECK_FINITE): the first
    // NaN or ±Inf, in execution order, is a UserError naming its sample,
    // vertex, vertex type and op (check_finite()).
    bool check_finite = false;
    // Results bitwise independent of `threads` (VJIT_DETERMINISTIC): GEMMs cut
    // into GemmSplit::Fixed blocks, reductions over rows into blocks that
    // depend on the rows alone, summed in block order. Off: the blocks follow
    // the thread count (faster where a product would be cut finer than the
    // threads need).
    bool deterministic = true;
    // VJIT_TRACE: an event per task, GEMM, fused kernel, copy, kernel and
    // optimizer step goes to this recorder (null: tracing off). Not owned.
    TraceRecorder* trace = nullptr;
    // VJIT_PRETRANSPOSE: see WeightTransposes.
    bool pretranspose = true;
    // VJIT_VERTEX_GEMM: the back end of the products run one per vertex
    // (MV-RNN's W_M·[A; B]; unset: `gemm`).
    std::optional<GemmBackend> vertex_gemm;
    // VJIT_PARAM_LAYOUT: a merged product's stacked weights are read where
    // the Model holds them as one block (runtime/param_layout.h); off, or
    // where it does not, they are copied into the arena every pass.
    bool stacked_in_place = true;
  };
  CpuExecutor(const Program& program, const ExecPlan& plan, const Config& config);

  const char* device() const override { return "cpu"; }
  void forward(const PlannedBatch& batch, const RunOptions& options, Evaluation<float>& result) override;
  void backward() override;
  void set_backward_observer(BackwardObserver* observer) override { observer_ = observer; }
  std::vector<int> gradient_final_points() const override { return final_point_; }
  void update(Optimizer& optimizer) override;
  ParameterStore& parameters() override { return store_; }
  OptimizerState optimizer_state() override { return store_.optimizer_state(); }
  void set_optimizer_state(OptimizerState state) override { store_.optimizer_state() = std::move(state); }
  // After a forward: what the vertex at `row` of `type` scattered (a type
  // that scatters), read before the next forward reuses the buffers. Lets a
  // graph that grows keep its values from round to round (jit/engine.cpp).
  std::span<const float> scattered_row(int type, int row);
  // Config::check_finite for the passes from now on: the engine turns it on
  // to run again a batch whose objective came out non-finite (jit/engine.cpp).
  void set_check_finite(bool on) { check_finite_ = on; }

 private:
  // What one thread needs to run steps.
  struct Frame : Lane {
    std::vector<const float*> inputs;
    std::vector<float*> outputs;
    // launch_fused's: per row block, the operands' ld and row tables (null:
    // none); the tables, per operand a row address per row being run.
    std::vector<int64_t> operand_ld;
    std::vector<const float* const*> row_tables;
    std::vector<const float*> row_addresses;
    bool use_pool = true;  // split large steps across the pool's threads
    std::vector<std::vector<float>> scratch;  // per row block: a private accumulator (block 0 needs none)
  };

  float* arena(Pass pass) const override { return arena_[int(pass)].data(); }
  float* param_address(int param) const override { return store_.value(param); }
  // The buffers of one pass: uninitialised floats, grown geometrically.
  class Arena {
   public:
    // At least `floats`, at most `max_capacity` when that is more (the
    // geometric slack is capped, and an arena already past the cap is
    // allocated again); invalidates earlier pointers when it reallocates.
    float* reserve(int64_t floats, int64_t max_capacity = std::numeric_limits<int64_t>::max());
    void release();
    float* data() const { return data_.get(); }
    int64_t capacity() const { return capacity_; }

   private:
    std::unique_ptr<float[]> data_;
    int64_t capacity_ = 0;
  };

  // Sizes both arenas for a batch that needs `forward` and (when it trains)
  // `backward` floats, within max_memory.
  void reserve_forward_arena(int64_t forward, int64_t backward);
  float* reserve_backward_arena(int64_t backward);
  // Where the Model holds the parameters of stacked weights as one block, in
  // order (runtime/param_layout.h), they are read there.
  float* stacked_in_place(const ir::Function& f, const ir::Node& n) override;
  float* push_values() const override { return result_->pushes.data(); }
  float* param_gradient(int param) override { return store_.gradient(param); }
  TouchedRows& touched_rows() override { return store_.touched(); }
  std::vector<int> stacked_params_;  // stacked_in_model's scratch
  void start_stream(const std::function<void()>& eager) override;
  void eager_done(int type) override;
  void wait_for_eager(int type) override;
  std::exception_ptr join_stream() override;
  // The streaming thread, the types whose eager steps it ran, what it threw.
  std::thread streamer_;
  std::vector<std::atomic<bool>> eager_done_;
  std::exception_ptr stream_error_;
  // Calls fn(begin, count, block) over blocks of rows, on the pool's threads
  // when rows × work_per_row (elements, or multiply-adds) is large enough.
  template <typename Fn>
  void for_row_blocks(const Frame& frame, int64_t rows, int64_t work_per_row, Fn&& fn);
  // How many blocks for_row_blocks cuts the rows into (1 to the pool's size).
  int64_t parallel_row_blocks(const Frame& frame, int64_t rows, int64_t work_per_row) const;
  // Calls fn(begin, count, block) over `blocks` even blocks of rows: on the
  // pool's threads when the frame may use them, else one after the other.
  template <typename Fn>
  void run_row_blocks(const Frame& frame, int64_t rows, int64_t blocks, Fn&& fn);
  // Calls fn(first_column, columns) over blocks of the columns [0, width), on
  // the pool's threads when rows × width is large enough: for adds of rows into
  // rows that several of them may share (scatter and embedding gradients).
  // Each block adds its columns of every row in row order, so no two threads
  // write one float and each float is summed in the same order as on one thread.
  template <typename Fn>
  void for_column_blocks(const Frame& frame, int64_t rows, int64_t width, Fn&& fn);

  // --- primitives (runtime/device.h) ---
  // The lane's frame, counting a kernel and recording a primitive of `kind`.
  Frame& start(Lane& lane, Primitive kind);
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
  void run_gemm(Frame& frame, const Gemm& gemm);
  void vertex_products(Lane& lane, int64_t rows, const VertexProducts& products) override;
  void accumulate_vertex_products(Lane& lane, int64_t rows, const ir::Node& product, const Shape& a_shape,
                                  const Shape& b_shape, const View& a, const View& b, float* grad) override;
  void reduce_rows(Lane& lane, int64_t rows, int64_t width, const View& x, float* dst) override;
  void children_block(Lane& lane, const ir::Node& node, int64_t rows, const Shape& in, const View& x, const View* g,
                      std::span<const int> children, const View& out) override;
  // Wᵀ [k, n] of the weight w [n, k] (leading dimension ldw) as of this
  // forward pass, made at its first use in the pass (WeightTransposes).
  const float* transposed_weight(int64_t key, const float* w, int64_t n, int64_t k, int64_t ldw, Frame& frame);

  ThreadPool pool_;
  PoolParallelFor parallel_;  // the pool, lent to the optimizer
  GemmBackend gemm_backend_;
  // VJIT_VERTEX_GEMM: small products one per vertex run many calls of one
  // shape, where a JIT kernel's lower cost per call pays (libxsmm; MV-RNN's
  // 64×64 products, Zen 4: 3% of a training step).
  GemmBackend vertex_gemm_backend_;
  GemmSplit gemm_split_;  // Fixed when deterministic, else Auto
  // VJIT_PRETRANSPOSE. dnnl_sgemm multiplies rows by a transposed weight (Y =
  // X·Wᵀ, every forward product of a weight W [n, k]) markedly slower than by
  // an untransposed one on AVX-512 CPUs (Zen 4, one thread, [58, 512] by a
  // [384, 512] W: 85 against 112 GFLOP/s, cold caches too). So a weight that
  // multiplies at least kPretransposeMinRows rows of a vertex type in a pass is
  // copied transposed at its first use in the forward pass, and its GEMMs
  // read Wᵀ [k, n]. The copies are made again every forward pass (the backward
  // of a step reads the same values): the Model's values may change between
  // calls — the optimizer, load_parameters, the user's own code — as with the
  // stacked weights of merged products, which are also filled every pass.
  struct WeightTransposes {
    struct Copy {
      int64_t pass = -1;
      std::vector<float> values;
    };
    int64_t pass = 0;  // forward passes begun
    std::mutex mutex;  // the streaming thread's eager steps may ask at the same time
    // By parameter, or by (pass, type, value) for a uniform value that is not
    // one (stacked weights, which move with the arena): the same keys every
    // batch, so that a steady state allocates nothing.
    std::unordered_map<int64_t, Copy> copies;
  };
  bool pretranspose_;
  bool stacked_in_place_;
  WeightTransposes transposes_;
  bool deterministic_;
  bool streaming_;
  int64_t max_memory_floats_;  // Config::max_memory in floats (0: no bound)
  CpuParameterStore store_;
  Frame frame_;             // the calling thread's
  Frame stream_frame_;      // the streaming thread's

  Arena arena_[2];
};

}  // namespace vjit::runtime
