#pragma once
// The CPU executor: runs an execution plan over a batch in the order of a
// schedule, batching each task's vertices into one call per node.
//
// Memory (Cavs §3.3, "dynamic tensors"): one buffer per (vertex type, IR value,
// pass) holding a row per vertex of that type in the batch; a task owns a
// contiguous range of rows, assigned in task order. Gather and pull copy rows
// into the task's block, one copy call per (task, slot); what a vertex scatters
// stays in place and is read from there. Slices, reshapes, parameters and the
// forward values ∂F reads are views, never copies.
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/exec_plan.h"
#include "runtime/gemm.h"
#include "runtime/thread_pool.h"
#include "scheduler/schedule.h"
#include "vjit/program.h"
#include "vjit/reference.h"

namespace vjit::runtime {

struct ExecStats {
  int64_t tasks = 0;
  int64_t kernels = 0;           // node executions that did work (views excluded)
  int64_t gemm_calls = 0;
  double gemm_flops = 0;          // 2·m·n·k summed over the GEMMs
  int64_t param_grad_gemms = 0;  // GEMMs that accumulate a weight gradient
  int64_t copy_calls = 0;
  int64_t copy_bytes = 0;
  double copy_s = 0, gemm_s = 0, elementwise_s = 0;

  ExecStats& operator+=(const ExecStats& o) {
    tasks += o.tasks;
    kernels += o.kernels;
    gemm_calls += o.gemm_calls;
    gemm_flops += o.gemm_flops;
    param_grad_gemms += o.param_grad_gemms;
    copy_calls += o.copy_calls;
    copy_bytes += o.copy_bytes;
    copy_s += o.copy_s;
    gemm_s += o.gemm_s;
    elementwise_s += o.elementwise_s;
    return *this;
  }
};

class CpuExecutor {
 public:
  // With `streaming`, the eager forward steps run on a second thread while the
  // tasks run (Cavs §3.4, VJIT_STREAMING).
  CpuExecutor(const Program& program, const ExecPlan& plan, ThreadPool& pool, GemmBackend gemm, bool streaming);

  // Runs F over `batch` task by task. `batch` and `schedule` must stay alive and
  // unchanged until backward() returns.
  Evaluation<float> forward(const GraphBatch& batch, const Schedule& schedule, const RunOptions& options);
  // Runs ∂F for the last forward: eager nodes, the tasks in reverse, lazy nodes.
  // Gradients are written (not added) into `grads`, one vector per parameter.
  void backward(std::vector<std::vector<float>>& grads);

  ExecStats& stats() { return stats_; }

 private:
  struct Slot {
    float* data = nullptr;  // row 0 of the value for this type
    int64_t ld = 0;         // row stride; 0 for a uniform value (a parameter)
  };
  // A range of rows of one type: a task, or every vertex of the type.
  struct Rows {
    int type = 0;
    int64_t begin = 0, count = 0;
    const VertexRef* vertices = nullptr;  // the vertex of each row
  };
  enum class Pass { Forward, Backward };

  void assign_rows();
  void allocate(Pass pass);
  Slot view_slot(Pass pass, int type, const ir::Node& node) const;
  void fill_uniform_values(Pass pass);  // stacked parameters (uniform Concat), once per pass
  void zero_gradients(std::vector<std::vector<float>>& grads);
  void run_phase(Pass pass, ir::Phase phase);
  void run_type_phase(Pass pass, ir::Phase phase, int type);
  void run_forward_streaming();
  ExecStats& local_stats();  // the calling thread's counters
  void run_task(Pass pass, const Task& task, int64_t begin);
  void run_steps(Pass pass, const Rows& rows, const std::vector<Step>& steps);
  void run_node(Pass pass, const Rows& rows, ir::ValueId id);
  void run_fused(Pass pass, const Rows& rows, const FusedStep& step);
  // Splits rows across the pool's threads when the work is large enough.
  void for_row_blocks(int64_t rows, int64_t width, const std::function<void(int64_t, int64_t)>& fn);

  // Node kinds.
  void gather(const Rows& rows, const ir::Node& node, const Slot& out);
  void pull(const Rows& rows, const ir::Node& node, const Slot& out);
  void elementwise(Pass pass, const Rows& rows, const ir::Node& node, const Slot& out);
  void reshape_data(Pass pass, const Rows& rows, const ir::Node& node, const Slot& out);
  void matmul(Pass pass, const Rows& rows, const ir::Node& node, const Slot& out);
  void outer(Pass pass, const Rows& rows, const ir::Node& node, const Slot& out);
  void softmax_ce(Pass pass, const Rows& rows, const ir::Node& node, const Slot& out);
  void sink(Pass pass, const Rows& rows, const ir::Node& node);
  void param_grad(Pass pass, const Rows& rows, const ir::Node& node);
  void gather_grad(const Rows& rows, const ir::Node& node, const Slot& g);

  const ir::Function& function(Pass pass, int type) const;
  const FunctionPlan& function_plan(Pass pass, int type) const;
  const Slot& slot(Pass pass, int type, ir::ValueId id) const;
  static const float* at(const Slot& s, int64_t row) { return s.data + row * s.ld; }
  static float* at_mut(const Slot& s, int64_t row) { return s.data + row * s.ld; }
  const Vertex& vertex(const VertexRef& ref) const;
  int64_t row_of(const VertexRef& ref) const;
  int type_of(const VertexRef& ref) const { return vertex(ref).type; }
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc);

  const Program& program_;
  const ExecPlan& plan_;
  ThreadPool& pool_;
  GemmBackend gemm_backend_;
  bool streaming_;
  ExecStats stats_;
  ExecStats stream_stats_;  // the streaming thread's, merged after each forward

  // The batch being run.
  const GraphBatch* batch_ = nullptr;
  const Schedule* schedule_ = nullptr;
  RunOptions options_;
  Evaluation<float>* result_ = nullptr;
  std::vector<std::vector<float>>* grads_ = nullptr;
  std::vector<int64_t> sample_offset_;           // first global vertex id of each sample
  std::vector<int64_t> vertex_row_;              // per global vertex id: its row in its type
  std::vector<int64_t> type_rows_;               // rows per type
  std::vector<int64_t> task_begin_;              // first row of each task
  std::vector<std::vector<VertexRef>> row_vertex_;  // per type, per row
  std::vector<std::vector<Slot>> slots_[2];      // [pass][type][value id]
  std::vector<Slot> scatter_grad_;               // per type: the gradient of what it scattered
  std::vector<float> arena_[2];
  std::vector<std::vector<int>> touched_rows_;   // per parameter: embedding rows the last backward wrote
};

}  // namespace vjit::runtime
