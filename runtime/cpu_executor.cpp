#include "runtime/cpu_executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <cmath>
#include <cstring>
#include <functional>

#include "ir/dropout.h"
#include "runtime/kernels.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

namespace {

class ScopedTimer {
 public:
  explicit ScopedTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

bool is_view(Op op) {
  return op == Op::Param || op == Op::Slice || op == Op::Reshape || op == Op::Fwd || op == Op::ScatterGrad;
}

bool is_copy(Op op) {
  switch (op) {
    case Op::Gather:
    case Op::GatherSum:
    case Op::GatherAll:
    case Op::Pull:
    case Op::PullEmbedding:
    case Op::Push:
    case Op::GatherGrad:
    case Op::EmbeddingGrad: return true;
    default: return false;
  }
}

// Set on the streaming thread: it runs its steps on itself alone (the pool
// belongs to the task thread) and counts into its own stats.
thread_local bool t_on_streaming_thread = false;

constexpr int64_t kAlignFloats = 16;  // 64-byte rows of buffers start aligned
int64_t aligned(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

CpuExecutor::CpuExecutor(const Program& program, const ExecPlan& plan, ThreadPool& pool, GemmBackend gemm,
                         bool streaming)
    : program_(program), plan_(plan), pool_(pool), gemm_backend_(gemm), streaming_(streaming) {}

ExecStats& CpuExecutor::local_stats() { return t_on_streaming_thread ? stream_stats_ : stats_; }

const ir::Function& CpuExecutor::function(Pass pass, int type) const { return *function_plan(pass, type).function; }

const FunctionPlan& CpuExecutor::function_plan(Pass pass, int type) const {
  const TypePlan& t = plan_.types[size_t(type)];
  return pass == Pass::Forward ? t.forward : t.backward;
}

const CpuExecutor::Slot& CpuExecutor::slot(Pass pass, int type, ValueId id) const {
  return slots_[int(pass)][size_t(type)][size_t(id)];
}

const Vertex& CpuExecutor::vertex(const VertexRef& ref) const {
  return batch_->samples[size_t(ref.sample)].vertices[size_t(ref.vertex)];
}

int64_t CpuExecutor::row_of(const VertexRef& ref) const {
  return vertex_row_[size_t(sample_offset_[size_t(ref.sample)] + ref.vertex)];
}

// --- batch setup ---

void CpuExecutor::assign_rows() {
  size_t num_types = size_t(program_.num_types());
  sample_offset_.assign(batch_->samples.size() + 1, 0);
  for (size_t s = 0; s < batch_->samples.size(); ++s)
    sample_offset_[s + 1] = sample_offset_[s] + int64_t(batch_->samples[s].vertices.size());
  vertex_row_.assign(size_t(sample_offset_.back()), -1);
  type_rows_.assign(num_types, 0);
  row_vertex_.assign(num_types, {});
  task_begin_.clear();
  for (const Task& task : schedule_->tasks) {
    task_begin_.push_back(type_rows_[size_t(task.type)]);
    for (const VertexRef& ref : task.vertices) {
      VJIT_INTERNAL_CHECK(type_of(ref) == task.type, "a task mixes vertex types");
      vertex_row_[size_t(sample_offset_[size_t(ref.sample)] + ref.vertex)] = type_rows_[size_t(task.type)]++;
      row_vertex_[size_t(task.type)].push_back(ref);
    }
  }
  for (int64_t row : vertex_row_) VJIT_INTERNAL_CHECK(row >= 0, "the schedule misses a vertex");
}

CpuExecutor::Slot CpuExecutor::view_slot(Pass pass, int type, const Node& node) const {
  const std::vector<Slot>& slots = slots_[int(pass)][size_t(type)];
  switch (node.op) {
    // Parameters are read, never written, through this pointer.
    case Op::Param: return {const_cast<float*>(program_.model().param(node.param).value.data()), 0};
    case Op::Slice: return {slots[size_t(node.args[0])].data + node.start, slots[size_t(node.args[0])].ld};
    case Op::Reshape: return slots[size_t(node.args[0])];
    case Op::Fwd: return slots_[int(Pass::Forward)][size_t(type)][size_t(node.slot)];
    case Op::ScatterGrad: return scatter_grad_[size_t(type)];
    default: break;
  }
  VJIT_INTERNAL_CHECK(false, "not a view: " << ir::op_name(node.op));
}

void CpuExecutor::allocate(Pass pass) {
  size_t num_types = size_t(program_.num_types());
  std::vector<Slot>* slots = slots_[int(pass)].data();
  slots_[int(pass)].assign(num_types, {});
  // Offsets first: the arena is resized once, then pointers are taken.
  std::vector<std::vector<int64_t>> offsets(num_types);
  std::vector<int64_t> scatter_grad_offset(num_types, -1);
  int64_t total = 0;
  for (size_t t = 0; t < num_types; ++t) {
    const FunctionPlan& fp = function_plan(pass, int(t));
    offsets[t].assign(fp.function->nodes.size(), -1);
    for (ValueId id = 0; id < fp.function->size(); ++id) {
      const Node& n = (*fp.function)[id];
      if (ir::is_sink(n.op) || is_view(n.op) || fp.folded[size_t(id)]) continue;
      offsets[t][size_t(id)] = total;
      total += aligned((n.uniform ? 1 : type_rows_[t]) * n.shape.numel());  // uniform: one row
    }
    const FunctionPlan& forward = function_plan(Pass::Forward, int(t));
    if (pass == Pass::Backward && forward.scatter_value >= 0) {
      scatter_grad_offset[t] = total;
      total += aligned(type_rows_[t] * (*forward.function)[forward.scatter_value].shape.numel());
    }
  }
  std::vector<float>& arena = arena_[int(pass)];
  if (int64_t(arena.size()) < total) arena.resize(size_t(total));
  slots = slots_[int(pass)].data();
  if (pass == Pass::Backward) scatter_grad_.assign(num_types, {});
  for (size_t t = 0; t < num_types; ++t) {
    const FunctionPlan& forward = function_plan(Pass::Forward, int(t));
    if (scatter_grad_offset[t] >= 0) {
      int64_t width = (*forward.function)[forward.scatter_value].shape.numel();
      scatter_grad_[t] = {arena.data() + scatter_grad_offset[t], width};
      std::memset(scatter_grad_[t].data, 0, size_t(type_rows_[t] * width) * sizeof(float));
    }
    const ir::Function& f = function(pass, int(t));
    slots[t].resize(f.nodes.size());
    for (ValueId id = 0; id < f.size(); ++id) {
      if (offsets[t][size_t(id)] >= 0)
        slots[t][size_t(id)] = {arena.data() + offsets[t][size_t(id)], f[id].uniform ? 0 : f[id].shape.numel()};
      else if (is_view(f[id].op)) slots[t][size_t(id)] = view_slot(pass, int(t), f[id]);
    }
  }
  fill_uniform_values(pass);
}

// A uniform value other than a parameter is a Concat of parameters (stacked
// weights, made by matmul merging): one row with ld 0 that changes with every
// optimizer step, so it is filled here, once per pass, from the parameters'
// current values, before any step reads it (run_node skips it).
void CpuExecutor::fill_uniform_values(Pass pass) {
  for (int t = 0; t < program_.num_types(); ++t) {
    const ir::Function& f = function(pass, t);
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      if (!n.uniform || n.op == Op::Param) continue;
      VJIT_INTERNAL_CHECK(n.op == Op::Concat, "executor cannot compute uniform " << ir::to_string(f, id));
      float* dst = slot(pass, t, id).data;
      for (ValueId arg : n.args) {
        const int64_t part = f[arg].shape.numel();
        std::memcpy(dst, slot(pass, t, arg).data, size_t(part) * sizeof(float));
        dst += part;
      }
    }
  }
}

// --- passes ---

Evaluation<float> CpuExecutor::forward(const GraphBatch& batch, const Schedule& schedule, const RunOptions& options) {
  batch_ = &batch;
  schedule_ = &schedule;
  options_ = options;
  Evaluation<float> result;
  result.pushes.resize(batch.samples.size());
  for (size_t s = 0; s < batch.samples.size(); ++s) result.pushes[s].resize(batch.samples[s].vertices.size());
  result_ = &result;
  assign_rows();
  allocate(Pass::Forward);
  stats_.tasks += int64_t(schedule.tasks.size());
  if (streaming_) {
    run_forward_streaming();
  } else {
    run_phase(Pass::Forward, ir::Phase::Eager);
    for (size_t i = 0; i < schedule.tasks.size(); ++i) run_task(Pass::Forward, schedule.tasks[i], task_begin_[i]);
  }
  run_phase(Pass::Forward, ir::Phase::Lazy);
  result_ = nullptr;
  return result;
}

void CpuExecutor::backward(std::vector<std::vector<float>>& grads) {
  VJIT_USER_CHECK(batch_ != nullptr, "backward() needs a forward() first");
  zero_gradients(grads);
  grads_ = &grads;
  allocate(Pass::Backward);
  run_phase(Pass::Backward, ir::Phase::Eager);
  for (size_t i = schedule_->tasks.size(); i-- > 0;) run_task(Pass::Backward, schedule_->tasks[i], task_begin_[i]);
  run_phase(Pass::Backward, ir::Phase::Lazy);
  grads_ = nullptr;
}

// Sets every gradient to zero. An embedding table's gradient keeps its storage
// between steps, and only the rows the last backward wrote are cleared.
void CpuExecutor::zero_gradients(std::vector<std::vector<float>>& grads) {
  const Model& model = program_.model();
  bool reuse = grads.size() == size_t(model.size()) && touched_rows_.size() == grads.size();
  grads.resize(size_t(model.size()));
  touched_rows_.resize(grads.size());
  for (int p = 0; p < model.size(); ++p) {
    std::vector<float>& g = grads[size_t(p)];
    const ParamData& param = model.param(p);
    size_t numel = size_t(param.shape.numel());
    if (reuse && param.sparse_rows && g.size() == numel) {
      size_t cols = size_t(param.shape.cols());
      for (int row : touched_rows_[size_t(p)]) std::fill_n(g.begin() + int64_t(size_t(row) * cols), cols, 0.0f);
    } else {
      g.assign(numel, 0.0f);
    }
    touched_rows_[size_t(p)].clear();
  }
}

void CpuExecutor::run_phase(Pass pass, ir::Phase phase) {
  for (int t = 0; t < program_.num_types(); ++t) run_type_phase(pass, phase, t);
}

void CpuExecutor::run_type_phase(Pass pass, ir::Phase phase, int type) {
  if (type_rows_[size_t(type)] == 0) return;
  const FunctionPlan& fp = function_plan(pass, type);
  Rows rows{type, 0, type_rows_[size_t(type)], row_vertex_[size_t(type)].data()};
  run_steps(pass, rows, phase == ir::Phase::Eager ? fp.eager : fp.lazy);
}

// Streaming (Cavs §3.4): a second thread runs the eager steps type by type, in
// the order the tasks first need them, while this thread runs the tasks; a task
// waits only for the eager steps of its own type and of its children's types.
// Eager forward steps write only their own type's buffers, so the two threads
// never write the same memory.
void CpuExecutor::run_forward_streaming() {
  size_t num_types = size_t(program_.num_types());
  std::vector<int> order;
  std::vector<char> seen(num_types, 0);
  for (const Task& task : schedule_->tasks)
    if (!seen[size_t(task.type)]) {
      seen[size_t(task.type)] = 1;
      order.push_back(task.type);
    }
  std::vector<std::atomic<bool>> done(num_types);
  for (auto& d : done) d.store(false);
  std::exception_ptr error;
  std::thread streamer([&] {
    t_on_streaming_thread = true;
    try {
      for (int t : order) {
        run_type_phase(Pass::Forward, ir::Phase::Eager, t);
        done[size_t(t)].store(true, std::memory_order_release);
      }
    } catch (...) {
      error = std::current_exception();
    }
    for (auto& d : done) d.store(true, std::memory_order_release);  // never leave a waiter behind
    t_on_streaming_thread = false;
  });
  auto wait_for = [&](int type) {
    while (!done[size_t(type)].load(std::memory_order_acquire)) std::this_thread::yield();
  };
  std::exception_ptr task_error;
  try {
    for (size_t i = 0; i < schedule_->tasks.size(); ++i) {
      const Task& task = schedule_->tasks[i];
      wait_for(task.type);
      for (const VertexRef& ref : task.vertices)
        for (int child : vertex(ref).children) wait_for(type_of({ref.sample, child}));
      run_task(Pass::Forward, task, task_begin_[i]);
    }
  } catch (...) {
    task_error = std::current_exception();
  }
  streamer.join();
  stats_ += stream_stats_;
  stream_stats_ = {};
  if (task_error) std::rethrow_exception(task_error);
  if (error) std::rethrow_exception(error);
}

void CpuExecutor::run_task(Pass pass, const Task& task, int64_t begin) {
  Rows rows{task.type, begin, int64_t(task.vertices.size()), task.vertices.data()};
  run_steps(pass, rows, function_plan(pass, task.type).core);
}

void CpuExecutor::run_steps(Pass pass, const Rows& rows, const std::vector<Step>& steps) {
  const FunctionPlan& fp = function_plan(pass, rows.type);
  for (const Step& step : steps) {
    if (step.fused >= 0) run_fused(pass, rows, fp.fused[size_t(step.fused)]);
    else run_node(pass, rows, step.node);
  }
}

void CpuExecutor::run_fused(Pass pass, const Rows& rows, const FusedStep& step) {
  ScopedTimer timer(local_stats().elementwise_s);
  ++local_stats().kernels;
  std::vector<const float*> inputs;
  std::vector<int64_t> input_ld;
  std::vector<float*> outputs;
  std::vector<int64_t> output_ld;
  for (ValueId id : step.inputs) {
    const Slot& s = slot(pass, rows.type, id);
    inputs.push_back(at(s, rows.begin));
    input_ld.push_back(s.ld);
  }
  for (ValueId id : step.outputs) {
    const Slot& s = slot(pass, rows.type, id);
    outputs.push_back(at_mut(s, rows.begin));
    output_ld.push_back(s.ld);
  }
  for_row_blocks(rows.count, step.width, [&](int64_t begin, int64_t count) {
    std::vector<const float*> in(inputs);
    std::vector<float*> out(outputs);
    for (size_t i = 0; i < in.size(); ++i) in[i] += begin * input_ld[i];
    for (size_t i = 0; i < out.size(); ++i) out[i] += begin * output_ld[i];
    KernelArgs args{count, in.data(), input_ld.data(), out.data(), output_ld.data()};
    step.run(args);
  });
}

void CpuExecutor::for_row_blocks(int64_t rows, int64_t width, const std::function<void(int64_t, int64_t)>& fn) {
  // Below this many elements waking a second thread costs more than it saves.
  constexpr int64_t kParallelElements = 16384;
  bool parallel = rows * width >= kParallelElements && !t_on_streaming_thread;
  int64_t blocks = parallel ? std::min<int64_t>(pool_.size(), rows) : 1;
  if (blocks <= 1) {
    fn(0, rows);
    return;
  }
  pool_.parallel_for(blocks, [&](int64_t b) {
    int64_t begin = rows * b / blocks, end = rows * (b + 1) / blocks;
    fn(begin, end - begin);
  });
}

void CpuExecutor::run_node(Pass pass, const Rows& rows, ValueId id) {
  const Node& n = function(pass, rows.type)[id];
  if (is_view(n.op) || n.op == Op::Scatter || n.uniform) return;  // uniform: fill_uniform_values
  ++local_stats().kernels;
  const Slot& out = slot(pass, rows.type, id);
  if (is_copy(n.op)) {
    ScopedTimer timer(local_stats().copy_s);
    ++local_stats().copy_calls;
    switch (n.op) {
      case Op::Gather:
      case Op::GatherSum:
      case Op::GatherAll: gather(rows, n, out); break;
      case Op::Pull:
      case Op::PullEmbedding: pull(rows, n, out); break;
      case Op::GatherGrad: gather_grad(rows, n, slot(pass, rows.type, n.args[0])); break;
      default: sink(pass, rows, n); break;
    }
    return;
  }
  if (n.op == Op::MatMul || n.op == Op::ParamGrad) {
    ScopedTimer timer(local_stats().gemm_s);
    if (n.op == Op::MatMul) matmul(pass, rows, n, out);
    else param_grad(pass, rows, n);
    return;
  }
  ScopedTimer timer(local_stats().elementwise_s);
  switch (ir::op_kind(n.op)) {
    case ir::OpKind::Unary:
    case ir::OpKind::Binary: elementwise(pass, rows, n, out); return;
    default: break;
  }
  switch (n.op) {
    case Op::Constant: fill_rows(rows.count, n.shape.numel(), float(n.scalar), at_mut(out, rows.begin), out.ld); return;
    case Op::Outer: outer(pass, rows, n, out); return;
    case Op::SoftmaxCE:
    case Op::SoftmaxCEGrad: softmax_ce(pass, rows, n, out); return;
    case Op::Loss: sink(pass, rows, n); return;
    default: reshape_data(pass, rows, n, out); return;
  }
}

// --- node kinds ---

void CpuExecutor::gather(const Rows& rows, const Node& node, const Slot& out) {
  int64_t width = node.op == Op::GatherAll ? node.shape.dims[1] : node.shape.numel();
  auto scattered = [&](const VertexRef& child) {
    int type = type_of(child);
    return at(slot(Pass::Forward, type, function_plan(Pass::Forward, type).scatter_value), row_of(child));
  };
  if (node.op == Op::Gather) {
    std::vector<const float*> src(size_t(rows.count));
    for (int64_t r = 0; r < rows.count; ++r)
      src[size_t(r)] = scattered({rows.vertices[r].sample, vertex(rows.vertices[r]).children[size_t(node.slot)]});
    copy_rows(width, src, at_mut(out, rows.begin), out.ld);
    local_stats().copy_bytes += rows.count * width * int64_t(sizeof(float));
    return;
  }
  size_t first = size_t(program_.signature(rows.type).fixed_arity);
  for (int64_t r = 0; r < rows.count; ++r) {
    float* dst = at_mut(out, rows.begin + r);
    std::memset(dst, 0, size_t(node.shape.numel()) * sizeof(float));
    const std::vector<int>& children = vertex(rows.vertices[r]).children;
    for (size_t k = first; k < children.size(); ++k) {
      const float* src = scattered({rows.vertices[r].sample, children[k]});
      float* row = node.op == Op::GatherAll ? dst + int64_t(k - first) * width : dst;
      for (int64_t i = 0; i < width; ++i) row[i] += src[i];
      local_stats().copy_bytes += width * int64_t(sizeof(float));
    }
  }
}

void CpuExecutor::pull(const Rows& rows, const Node& node, const Slot& out) {
  int64_t width = node.shape.numel();
  std::vector<const float*> src(size_t(rows.count));
  const float* table = node.op == Op::PullEmbedding ? program_.model().param(node.param).value.data() : nullptr;
  for (int64_t r = 0; r < rows.count; ++r) {
    const Vertex& v = vertex(rows.vertices[r]);
    src[size_t(r)] = table ? table + int64_t(v.token) * width : v.features.data();
  }
  copy_rows(width, src, at_mut(out, rows.begin), out.ld);
  local_stats().copy_bytes += rows.count * width * int64_t(sizeof(float));
}

void CpuExecutor::elementwise(Pass pass, const Rows& rows, const Node& node, const Slot& out) {
  const ir::Function& f = function(pass, rows.type);
  auto operand = [&](int i) {
    ValueId arg = node.args[size_t(i)];
    const Slot& s = slot(pass, rows.type, arg);
    const Shape& shape = f[arg].shape;
    Operand o{at(s, rows.begin), s.ld, Broadcast::Same, shape.numel()};
    if (shape != node.shape) o.mode = shape.rank == 0 ? Broadcast::Scalar : Broadcast::RowVector;
    return o;
  };
  int64_t width = node.shape.numel();
  float* dst = at_mut(out, rows.begin);
  if (node.op == Op::Dropout) {
    Operand x = operand(0);
    float keep_scale = float(1.0 / (1.0 - node.scalar));
    for (int64_t r = 0; r < rows.count; ++r) {
      const VertexRef& ref = rows.vertices[r];
      for (int64_t i = 0; i < width; ++i) {
        bool keep = !options_.training ||
                    ir::dropout_keeps(options_.seed, ref.sample, ref.vertex, node.slot, i, node.scalar);
        float scale = options_.training ? keep_scale : 1.0f;
        dst[r * out.ld + i] = keep ? x.data[r * x.ld + i] * scale : 0.0f;
      }
    }
    return;
  }
  Operand a = operand(0), b = ir::op_kind(node.op) == ir::OpKind::Binary ? operand(1) : Operand{};
  for_row_blocks(rows.count, width, [&](int64_t begin, int64_t count) {
    Operand a_block = a, b_block = b;
    a_block.data += begin * a.ld;
    b_block.data += begin * b.ld;
    if (ir::op_kind(node.op) == ir::OpKind::Unary) unary_rows(node, count, width, a_block, dst + begin * out.ld, out.ld);
    else binary_rows(node.op, count, width, a_block, b_block, dst + begin * out.ld, out.ld);
  });
}

void CpuExecutor::reshape_data(Pass pass, const Rows& rows, const Node& node, const Slot& out) {
  const ir::Function& f = function(pass, rows.type);
  int64_t width = node.shape.numel();
  auto arg_slot = [&](int i) { return slot(pass, rows.type, node.args[size_t(i)]); };
  for (int64_t r = 0; r < rows.count; ++r) {
    float* dst = at_mut(out, rows.begin + r);
    switch (node.op) {
      case Op::Concat: {
        int64_t offset = 0;
        for (size_t i = 0; i < node.args.size(); ++i) {
          int64_t part = f[node.args[i]].shape.numel();
          std::memcpy(dst + offset, at(arg_slot(int(i)), rows.begin + r), size_t(part) * sizeof(float));
          offset += part;
        }
        break;
      }
      case Op::Pad: {
        std::memset(dst, 0, size_t(width) * sizeof(float));
        int64_t part = f[node.args[0]].shape.numel();
        std::memcpy(dst + node.start, at(arg_slot(0), rows.begin + r), size_t(part) * sizeof(float));
        break;
      }
      case Op::Broadcast: {
        float value = *at(arg_slot(0), rows.begin + r);
        for (int64_t i = 0; i < width; ++i) dst[i] = value;
        break;
      }
      case Op::BroadcastRows: {
        const float* src = at(arg_slot(0), rows.begin + r);
        for (int64_t i = 0; i < width; ++i) dst[i] = src[i % node.shape.dims[1]];
        break;
      }
      case Op::Sum: {
        const float* src = at(arg_slot(0), rows.begin + r);
        float total = 0.0f;
        for (int64_t i = 0; i < f[node.args[0]].shape.numel(); ++i) total += src[i];
        dst[0] = total;
        break;
      }
      case Op::SumRows: {
        const float* src = at(arg_slot(0), rows.begin + r);
        std::memset(dst, 0, size_t(width) * sizeof(float));
        for (int64_t i = 0; i < f[node.args[0]].shape.numel(); ++i) dst[i % width] += src[i];
        break;
      }
      default: VJIT_INTERNAL_CHECK(false, "executor cannot run " << ir::to_string(f, int(&node - f.nodes.data())));
    }
  }
}

void CpuExecutor::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float beta, float* c, int64_t ldc) {
  ++local_stats().gemm_calls;
  local_stats().gemm_flops += 2.0 * double(m) * double(n) * double(k);
  if (t_on_streaming_thread) sgemm(gemm_backend_, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else parallel_sgemm(pool_, gemm_backend_, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void CpuExecutor::matmul(Pass pass, const Rows& rows, const Node& node, const Slot& out) {
  const ir::Function& f = function(pass, rows.type);
  const Shape& sa = f[node.args[0]].shape;
  const Shape& sb = f[node.args[1]].shape;
  const Slot& a = slot(pass, rows.type, node.args[0]);
  const Slot& b = slot(pass, rows.type, node.args[1]);
  float* c = at_mut(out, rows.begin);
  int64_t R = rows.count;
  // Every vertex times one parameter matrix: a single GEMM over the task's rows.
  if (a.ld == 0 && sb.rank == 1) {  // y = op(W) x  →  Y = X op(W)ᵀ
    int64_t m = node.trans_a ? sa.dims[1] : sa.dims[0], k = node.trans_a ? sa.dims[0] : sa.dims[1];
    gemm(false, !node.trans_a, R, m, k, at(b, rows.begin), b.ld, a.data, sa.dims[1], 0.0f, c, out.ld);
    return;
  }
  if (b.ld == 0 && sa.rank == 1) {  // y = xᵀ op(W)  →  Y = X op(W)
    int64_t n = node.trans_b ? sb.dims[0] : sb.dims[1], k = node.trans_b ? sb.dims[1] : sb.dims[0];
    gemm(false, node.trans_b, R, n, k, at(a, rows.begin), a.ld, b.data, sb.dims[1], 0.0f, c, out.ld);
    return;
  }
  // Per-vertex matrices (MV-RNN): one small product per row. A vector is a row
  // on the left ([1, k]) and a column on the right ([k, 1]).
  int64_t a_rows = sa.rank == 2 ? sa.dims[0] : 1, a_cols = sa.rank == 2 ? sa.dims[1] : sa.dims[0];
  int64_t b_rows = sb.rank == 2 ? sb.dims[0] : sb.dims[0], b_cols = sb.rank == 2 ? sb.dims[1] : 1;
  int64_t m = node.trans_a ? a_cols : a_rows, k = node.trans_a ? a_rows : a_cols;
  int64_t n = node.trans_b ? b_rows : b_cols;
  for (int64_t r = 0; r < R; ++r) {
    ++local_stats().gemm_calls;
    local_stats().gemm_flops += 2.0 * double(m) * double(n) * double(k);
    sgemm(gemm_backend_, node.trans_a, node.trans_b, m, n, k, 1.0f, at(a, rows.begin + r), a_cols,
          at(b, rows.begin + r), b_cols, 0.0f, at_mut(out, rows.begin + r), n);
  }
}

void CpuExecutor::outer(Pass pass, const Rows& rows, const Node& node, const Slot& out) {
  const ir::Function& f = function(pass, rows.type);
  const Slot& a = slot(pass, rows.type, node.args[0]);
  const Slot& b = slot(pass, rows.type, node.args[1]);
  int64_t m = f[node.args[0]].shape.numel(), n = f[node.args[1]].shape.numel();
  for (int64_t r = 0; r < rows.count; ++r) {
    const float* pa = at(a, rows.begin + r);
    const float* pb = at(b, rows.begin + r);
    float* dst = at_mut(out, rows.begin + r);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) dst[i * n + j] = pa[i] * pb[j];
  }
}

void CpuExecutor::softmax_ce(Pass pass, const Rows& rows, const Node& node, const Slot& out) {
  const Slot& logits = slot(pass, rows.type, node.args[0]);
  int64_t classes = function(pass, rows.type)[node.args[0]].shape.numel();
  bool gradient = node.op == Op::SoftmaxCEGrad;
  const Slot* upstream = gradient ? &slot(pass, rows.type, node.args[1]) : nullptr;
  for_row_blocks(rows.count, classes, [&](int64_t begin, int64_t count) {
    std::vector<float> p(static_cast<size_t>(classes));  // exp(x − max), then the softmax
    for (int64_t r = begin; r < begin + count; ++r) {
      int label = vertex(rows.vertices[r]).label;
      const float* x = at(logits, rows.begin + r);
      float* dst = at_mut(out, rows.begin + r);
      float max = *std::max_element(x, x + classes);
      for (int64_t i = 0; i < classes; ++i) p[size_t(i)] = x[i] - max;
      if (plan_.exp) plan_.exp(p.data(), p.data(), classes);
      else for (float& v : p) v = std::exp(v);
      float total = 0.0f;
      for (float v : p) total += v;
      if (!gradient) {
        dst[0] = label < 0 ? 0.0f : std::log(total) + max - x[label];
        continue;
      }
      float g = label < 0 ? 0.0f : *at(*upstream, rows.begin + r);
      for (int64_t i = 0; i < classes; ++i) dst[i] = (p[size_t(i)] / total - (i == label ? 1.0f : 0.0f)) * g;
    }
  });
}

void CpuExecutor::sink(Pass pass, const Rows& rows, const Node& node) {
  const Slot& x = slot(pass, rows.type, node.args[0]);
  int64_t width = function(pass, rows.type)[node.args[0]].shape.numel();
  switch (node.op) {
    case Op::Push:
      for (int64_t r = 0; r < rows.count; ++r) {
        const float* src = at(x, rows.begin + r);
        const VertexRef& ref = rows.vertices[r];
        result_->pushes[size_t(ref.sample)][size_t(ref.vertex)].emplace_back(src, src + width);
      }
      local_stats().copy_bytes += rows.count * width * int64_t(sizeof(float));
      return;
    case Op::Loss:
      for (int64_t r = 0; r < rows.count; ++r) result_->objective += double(*at(x, rows.begin + r));
      return;
    case Op::EmbeddingGrad: {
      std::vector<float>& grad = (*grads_)[size_t(node.param)];
      std::vector<int>& touched = touched_rows_[size_t(node.param)];
      for (int64_t r = 0; r < rows.count; ++r) {
        int token = vertex(rows.vertices[r]).token;
        touched.push_back(token);
        float* dst = grad.data() + int64_t(token) * width;
        const float* src = at(x, rows.begin + r);
        for (int64_t i = 0; i < width; ++i) dst[i] += src[i];
      }
      local_stats().copy_bytes += rows.count * width * int64_t(sizeof(float));
      return;
    }
    default: VJIT_INTERNAL_CHECK(false, "not a sink: " << ir::op_name(node.op));
  }
}

void CpuExecutor::param_grad(Pass pass, const Rows& rows, const Node& node) {
  const ir::Function& f = function(pass, rows.type);
  std::vector<float>& grad = (*grads_)[size_t(node.param)];
  ValueId term = node.args[0];
  if (function_plan(pass, rows.type).folded[size_t(term)]) {
    // Σ_rows a bᵀ = Aᵀ B over the rows: one GEMM accumulating into the gradient.
    const Node& o = f[term];
    const Slot& a = slot(pass, rows.type, o.args[0]);
    const Slot& b = slot(pass, rows.type, o.args[1]);
    int64_t m = f[o.args[0]].shape.numel(), n = f[o.args[1]].shape.numel();
    ++local_stats().param_grad_gemms;
    gemm(true, false, m, n, rows.count, at(a, rows.begin), a.ld, at(b, rows.begin), b.ld, 1.0f, grad.data(), n);
    return;
  }
  const Slot& x = slot(pass, rows.type, term);
  int64_t width = f[term].shape.numel();
  for (int64_t r = 0; r < rows.count; ++r) {
    const float* src = at(x, rows.begin + r);
    for (int64_t i = 0; i < width; ++i) grad[size_t(i)] += src[i];
  }
}

void CpuExecutor::gather_grad(const Rows& rows, const Node& node, const Slot& g) {
  size_t first = size_t(program_.signature(rows.type).fixed_arity);
  for (int64_t r = 0; r < rows.count; ++r) {
    const VertexRef& ref = rows.vertices[r];
    const std::vector<int>& children = vertex(ref).children;
    const float* src = at(g, rows.begin + r);
    size_t begin = node.slot >= 0 ? size_t(node.slot) : first;
    size_t end = node.slot >= 0 ? size_t(node.slot) + 1 : children.size();
    for (size_t k = begin; k < end; ++k) {
      VertexRef child{ref.sample, children[k]};
      const Slot& dst_slot = scatter_grad_[size_t(type_of(child))];
      float* dst = at_mut(dst_slot, row_of(child));
      const float* part = node.slot == -2 ? src + int64_t(k - first) * dst_slot.ld : src;
      for (int64_t i = 0; i < dst_slot.ld; ++i) dst[i] += part[i];
      local_stats().copy_bytes += dst_slot.ld * int64_t(sizeof(float));
    }
  }
}

}  // namespace vjit::runtime
