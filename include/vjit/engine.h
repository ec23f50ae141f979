#pragma once
// The engine: compiles F and ∂F of every vertex type into execution plans once,
// then runs batches of input graphs through them, batching the vertices of all
// samples into tasks (a batching policy decides which), with every result equal
// to the reference interpreter's.
//
//   vjit::Engine engine(program);                 // options from VJIT_* variables
//   double loss = engine.train_step(batch, adam); // forward, backward, update
//   auto out = engine.infer(batch);               // pushed values, no dropout
//
// Threads. Every member function may be called from any thread: the engine
// holds an internal lock for the whole call, so calls on one engine run one at
// a time, each with the engine's worker threads (VJIT_THREADS). save_checkpoint
// and load_checkpoint (vjit/checkpoint.h) hold it too: a save beside a
// train_step holds one step's weights, optimizer state and step count, and a
// load never lands in the middle of an infer or a step. infer() returns
// a copy of its results, so concurrent callers never see each other's. The
// accessors that return a reference (last_result, gradients, gradient_rows)
// return the engine's own buffers, valid until the next forward or backward
// on this engine from any thread: copy them before another thread may run a
// batch. Serving from several threads is therefore safe but serialised; for
// throughput across threads, give each thread an Engine of its own with fewer
// VJIT_THREADS (perf/concurrency_bench measures both). Several engines may run
// one Program concurrently as long as none of them trains: training writes the
// Model's parameters, which the others read. Building an engine may lay the
// Model's values out again (VJIT_PARAM_LAYOUT, values kept; Model::value_moves
// counts it), so build every engine of a Model before any of them runs, and
// take pointers into ParamData::value after.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vjit/batching.h"
#include "vjit/graph.h"
#include "vjit/growth.h"
#include "vjit/optimizer.h"
#include "vjit/options.h"
#include "vjit/primitive.h"
#include "vjit/program.h"
#include "vjit/run.h"

namespace vjit {

class Distributed;  // vjit/distributed.h
namespace jit {
class EngineAccess;  // jit/engine_access.h: the engine's lock held across a checkpoint's save or load
}  // namespace jit

/// Counters and times, summed over the calls since the last reset_stats():
/// what the batches were, what the device ran for them, and where the time
/// went (VJIT_PROFILE prints them at exit).
struct EngineStats {
  int64_t batches = 0;   ///< batches run (each growth round counts one)
  int64_t vertices = 0;  ///< their vertices
  int64_t tasks = 0;     ///< forward tasks: batched groups of vertices of one type (the backward replays them)
  /// Σ of each batch's ED-Batch lower bound on tasks, when
  /// Engine::track_lower_bound(true) or VJIT_PROFILE asked for it (else 0).
  int64_t lower_bound = 0;
  int64_t kernels = 0;     ///< node executions that did work, forward and backward
  int64_t gemm_calls = 0;  ///< matrix products run (forward and backward)
  double gemm_flops = 0;   ///< 2·m·n·k summed over every GEMM
  /// What the batches needed, not what was executed: for each vertex, the flops
  /// of its type's F (and of ∂F when backward() ran), counted on the Program's
  /// own functions before any merging, fusion or recomputation (MatMul
  /// 2·m·n·k, Outer m·n, a weight gradient's add m·n, elementwise 1 per
  /// element, softmax 4 per class, data movement 0). The numerator of
  /// vjit/roofline.h.
  double useful_flops = 0;
  int64_t copy_calls = 0;  ///< row copies run: gathers, their gradients, pulls, pushes, embedding gradients
  int64_t copy_bytes = 0;  ///< the bytes those copies moved
  /// Seconds: validating, flattening and scheduling a batch; laying it out in
  /// memory (the memory planner); gather/pull/push/scatter-gradient copies;
  /// GEMMs; elementwise and other kernels; the optimizer's update.
  /// @{
  double schedule_s = 0, plan_s = 0, copy_s = 0, gemm_s = 0, elementwise_s = 0, optimizer_s = 0;
  /// @}
  /// Seconds running the forward and backward tasks (the executor's part of a
  /// call: copy_s, gemm_s and elementwise_s are parts of these two), and the
  /// wall time of the public calls (forward, backward, train_step, infer),
  /// which every phase above is a part of.
  /// @{
  double forward_s = 0, backward_s = 0, call_s = 0;
  /// @}
  /// Graphs that grow (vjit/growth.h): the rounds run (each is also counted in
  /// batches, vertices and tasks above) and the vertices the callbacks added.
  /// @{
  int64_t growth_rounds = 0;
  int64_t grown_vertices = 0;
  /// @}
  /// The primitives the device ran (vjit/primitive.h), by kind: GEMMs, fused
  /// kernels, row copies, ..., optimizer steps. VJIT_LOG=primitives prints
  /// each call's list.
  PrimitiveCounts primitives;
};

/// What building the engine's plans cost and made.
struct CompileInfo {
  int fused_groups = 0;      ///< fused elementwise kernels in the plans (F and ∂F)
  /// Fused groups of F whose inference kernel (VJIT_INFER_KERNELS) writes fewer
  /// outputs than the training kernel, or is skipped: an infer() runs those.
  int inference_kernels = 0;
  /// Fused groups of ∂F with a kernel that adds gradient parts into the
  /// children's rows (VJIT_ROW_PLACEMENT=tables).
  int accumulating_kernels = 0;
  /// Distinct stacked weights of merged products in the plans (ir/merge_matmuls.h),
  /// and of them those the Model holds as one block, read in place with no copy
  /// (VJIT_PARAM_LAYOUT, runtime/param_layout.h; the CUDA executor stacks its own).
  /// @{
  int stacked_weights = 0;
  int stacked_in_place = 0;
  /// @}
  int64_t jit_compiles = 0;  ///< kernels compiled for this engine, a CUDA plan's module counting one (the rest were cache hits)
  int64_t jit_cache_hits = 0;    ///< kernels of the plans found compiled in the process's kernel cache
  double jit_compile_s = 0;      ///< seconds compiling kernels (a part of lower_s)
  double lower_s = 0;        ///< the whole lowering, compiles included
};

/// Runs batches of graphs through a Program's vertex functions, compiled
/// once into plans: forward, backward, train_step, infer. See the comment at
/// the top of vjit/engine.h for threads.
class Engine {
 public:
  /// Lowers and compiles every vertex type of `program` with `options` (by
  /// default the VJIT_* variables). The program, and the Model it reads, must
  /// outlive the engine. With VJIT_PARAM_LAYOUT on, building it may move the
  /// Model's values to another place in memory (values unchanged; counted by
  /// Model::value_moves()): take pointers or spans into ParamData::value after
  /// building the engines of a Model, not before.
  explicit Engine(const Program& program, Options options = Options::from_env());
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Runs F over the batch. Returns the objective; last_result() holds it with
  /// the pushed values. The engine keeps what backward() needs, so the batch
  /// may be destroyed once forward() returns.
  double forward(const GraphBatch& batch, const RunOptions& options = {});
  /// ∂F for the last forward (which must have had RunOptions::backward set); the
  /// gradients are then in gradients().
  void backward();
  /// forward (training, a fresh dropout seed per step), backward, optimizer step.
  /// When the step fails (a non-finite gradient) after a forward pass whose
  /// objective is not finite, the UserError also names the first non-finite
  /// value of that pass (sample, vertex, op): the engine runs it again with the
  /// check of VJIT_CHECK_FINITE, on the CPU, only then.
  double train_step(const GraphBatch& batch, Optimizer& optimizer);
  /// Data-parallel training (vjit/distributed.h): with a communicator of more
  /// than one process set, train_step runs forward and backward on this
  /// process's share of the global batch, replaces the gradients by their sums
  /// over all ranks (dense parameters bucketed, embedding tables by touched
  /// rows), takes the optimizer step on the summed gradients, and returns the
  /// global batch's objective; last_result()'s pushes stay this shard's. Null
  /// (the default) trains alone. On the CPU and CUDA executors (on GPUs the
  /// dense sums go through NCCL where built: Options::Tuning::dist_nccl).
  /// @{
  void set_distributed(std::shared_ptr<Distributed> comm);
  std::shared_ptr<Distributed> distributed() const;
  /// @}
  /// Forward without dropout or gradients; returns objective and pushed values.
  /// With Options::Tuning::infer_shards > 1 (VJIT_INFER_SHARDS) on the CPU, the batch is
  /// inferred in that many groups of consecutive samples at once, each by an
  /// engine of its own on one thread; the results come back in sample order,
  /// and growth callbacks of different groups run concurrently.
  Evaluation<float> infer(const GraphBatch& batch);

  /// Graphs that grow during execution (vjit/growth.h): after each round of a
  /// forward, `callback` is called for every vertex of `type` that round
  /// evaluated first, and may add vertices to its sample; the rounds go on
  /// until none is added. A null callback makes the type static again.
  /// UserError for a type outside the program. An exception the callback
  /// throws ends the call as a UserError naming the sample, vertex and type,
  /// with the callback's exception nested in it (std::rethrow_if_nested).
  void set_growth(int type, GrowthCallback callback);
  /// The most vertices growth may bring one sample to (default 4096): an
  /// add_vertex past it is a UserError, so a callback that never stops fails
  /// instead of running forever.
  void set_growth_limit(int max_vertices_per_sample);
  /// The last forward's batch as it ended, with every vertex growth added: the
  /// graph last_result() and gradients() belong to. UserError when the last
  /// forward had no growing type (its batch is the caller's own).
  const GraphBatch& grown_batch() const;

  /// The last forward's objective and pushes; UserError before any forward.
  const Evaluation<float>& last_result() const;
  /// One vector per parameter, in the model's order; UserError before any backward.
  const std::vector<std::vector<float>>& gradients() const;
  /// Per parameter, the rows of gradients() that may be non-zero: the rows of
  /// each embedding table the batch looked up (sorted), every row of the others.
  /// Pass it to Optimizer::step after a backward() of your own for the update
  /// train_step makes (only the touched rows of embedding tables: LazyAdam).
  const std::vector<GradientRows>& gradient_rows() const;

  /// The program the engine runs, and through it the Model it trains.
  const Program& program() const;

  /// Training state beside the Model's values, for checkpoints (vjit/checkpoint.h).
  /// The optimizer state the engine keeps for its parameters (a copy, brought
  /// back from the GPU when it lives there), and its replacement: pass a state
  /// the optimizer adopted (Optimizer::adopt) for its next train_step to
  /// continue it.
  /// @{
  OptimizerState optimizer_state() const;
  void set_optimizer_state(OptimizerState state);
  /// @}
  /// How many train_step calls this engine made: each draws its dropout seed
  /// from this count, so a resumed run sets it to continue the same masks.
  /// @{
  uint64_t train_steps() const;
  void set_train_steps(uint64_t steps);
  /// @}
  /// Copies the Model's values to where the engine keeps the parameters, after
  /// they were changed from outside (e.g. by load_parameters). On the CPU the
  /// engine reads the Model itself and this does nothing; on the GPU it uploads.
  void upload_parameters();
  /// Copies the parameters' values into the Model where the engine keeps newer
  /// ones: with VJIT_CUDA_RESIDENT_PARAMS the GPU's values after train_step
  /// reach the Model only through this call (one copy from the device), a
  /// checkpoint saved (save_checkpoint calls it) or the engine destroyed. Call
  /// it before reading the Model's values yourself, and before changing a part
  /// of them for upload_parameters(). Does nothing where the Model is current
  /// (on the CPU; on the GPU without that option; after a call already made).
  void download_parameters() const;

  EngineStats stats() const;  ///< a copy, taken under the engine's lock
  /// The memory planner that lays batches out (VJIT_MEMPLAN): options().tuning.memplan,
  /// except auto's choice once made ("copy" or "pqtree"; "auto" while the two
  /// still take turns, its first 8 timed batches), and "copy" for auto on the GPU.
  std::string memory_planner() const;
  /// Computes each batch's ED-Batch lower bound into stats().lower_bound (a
  /// diagnostic that costs a pass over the batch; off by default).
  void track_lower_bound(bool on);
  const CompileInfo& compile_info() const;  ///< what building the plans cost and made
  void reset_stats();                       ///< zeroes stats()
  /// The options the engine runs: the device chosen (never auto) and every
  /// lever resolved for it (Options::resolve: on or off, never auto).
  const Options& options() const;

  /// VJIT_TRACE: writes the trace recorded so far to Options::trace_path now
  /// (the destructor writes it too). UserError when tracing is off or the file
  /// cannot be written.
  void flush_trace();

  /// The learned policy used when options().policy is Fsm (ED-Batch learns
  /// one per program). Without one, the engine loads it at start from
  /// options().cache_dir when a policy for this program was saved there, and
  /// otherwise learns it on the first batch it sees (and saves it there). A policy
  /// learned for another number of vertex types than the program's is refused
  /// (UserError naming both counts) and the one in place kept; a cached one is
  /// set aside and learned again.
  /// @{
  void set_fsm_policy(std::shared_ptr<const FsmPolicy> policy);
  std::shared_ptr<const FsmPolicy> fsm_policy() const;
  /// @}
  /// Learns the policy on `batch` (ED-Batch samples 32 instances of it).
  std::shared_ptr<const FsmPolicy> learn_fsm_policy(const GraphBatch& batch);
  /// Saves with the program's signature; load rejects a file of another program.
  /// @{
  void save_fsm_policy(const std::string& path) const;
  void load_fsm_policy(const std::string& path);
  /// @}

 private:
  friend class jit::EngineAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vjit
