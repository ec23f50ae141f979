#include "vjit/engine.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "jit/kernel_cache.h"
#include "jit/pipeline.h"
#include "runtime/cpu_executor.h"
#include "runtime/thread_pool.h"
#include "scheduler/fsm.h"
#include "scheduler/schedule.h"
#include "vjit/error.h"

namespace vjit {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

struct Engine::Impl {
  Impl(const Program& p, Options o)
      : program(p),
        options(std::move(o)),
        plan(lower_and_count(program, options, compile_info)),
        pool(options.threads),
        gemm(select_gemm_backend(options.gemm)),
        policy(parse_policy(options.policy)),
        executor(program, plan, pool, gemm, options.streaming) {
    VJIT_USER_CHECK(options.memplan == "copy", "VJIT_MEMPLAN=" << options.memplan
                                                                << " is not available yet (valid here: copy)");
    VJIT_USER_CHECK(options.device == "cpu", "VJIT_DEVICE=" << options.device
                                                            << " is not available in this build (valid here: cpu)");
    if (policy == Policy::Fsm && !options.cache_dir.empty() && std::filesystem::exists(policy_cache_path()))
      fsm = std::make_shared<FsmPolicy>(FsmPolicy::load(policy_cache_path(), program.signature_string()));
  }

  // Where the learned policy of this program lives in the cache directory,
  // named by an FNV-1a hash of its signature (stable across runs and builds).
  std::string policy_cache_path() const {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : program.signature_string()) hash = (hash ^ c) * 0x100000001b3ull;
    return options.cache_dir + "/fsm-" + std::to_string(hash) + ".json";
  }

  std::shared_ptr<const FsmPolicy> learn(const GraphBatch& batch) {
    validate_and_order(program.signatures(), batch);
    fsm = std::make_shared<FsmPolicy>(FsmPolicy::learn(batch, program.num_types()));
    if (!options.cache_dir.empty()) {
      std::filesystem::create_directories(options.cache_dir);
      fsm->save(policy_cache_path(), program.signature_string());
    }
    return fsm;
  }

  void forward(const GraphBatch& batch, const RunOptions& run) {
    auto start = std::chrono::steady_clock::now();
    validate_and_order(program.signatures(), batch);
    if (policy == Policy::Fsm && !fsm) learn(batch);
    schedule = make_schedule(batch, program.num_types(), policy, fsm.get());
    if (options.logs("schedule")) std::cerr << describe_schedule(schedule, program.signatures(), policy);
    stats.schedule_s += seconds_since(start);
    stats.batches += 1;
    stats.vertices += batch.num_vertices();
    stats.tasks += int64_t(schedule.tasks.size());
    stats.lower_bound += schedule.lower_bound;
    stats.fsm_fallbacks += schedule.fsm_fallbacks;
    result = executor.forward(batch, schedule, run);
    has_forward = run.backward;
    collect();
  }

  void backward() {
    VJIT_USER_CHECK(has_forward, "Engine::backward needs a forward() with RunOptions::backward set before it");
    executor.backward(grads);
    has_forward = false;
    collect();
  }

  // Moves the executor's counters into the engine's stats.
  void collect() {
    runtime::ExecStats& e = executor.stats();
    stats.kernels += e.kernels;
    stats.gemm_calls += e.gemm_calls;
    stats.gemm_flops += e.gemm_flops;
    stats.param_grad_gemms += e.param_grad_gemms;
    stats.copy_calls += e.copy_calls;
    stats.copy_bytes += e.copy_bytes;
    stats.copy_s += e.copy_s;
    stats.gemm_s += e.gemm_s;
    stats.elementwise_s += e.elementwise_s;
    e = {};
  }

  static runtime::ExecPlan lower_and_count(const Program& program, const Options& options, CompileInfo& info) {
    auto start = std::chrono::steady_clock::now();
    KernelCacheCounters before = KernelCache::global().counters();
    runtime::ExecPlan plan = lower_program(program, options);
    KernelCacheCounters after = KernelCache::global().counters();
    info.jit_compiles = after.compiles - before.compiles;
    info.jit_cache_hits = after.hits - before.hits;
    info.jit_compile_s = after.compile_seconds - before.compile_seconds;
    for (const runtime::TypePlan& t : plan.types) info.fused_groups += int(t.forward.fused.size() + t.backward.fused.size());
    info.lower_s = seconds_since(start);
    return plan;
  }

  const Program& program;
  Options options;
  CompileInfo compile_info;  // declared before plan, which fills it
  runtime::ExecPlan plan;
  ThreadPool pool;
  GemmBackend gemm;
  Policy policy;
  runtime::CpuExecutor executor;
  std::shared_ptr<const FsmPolicy> fsm;
  Schedule schedule;
  Evaluation<float> result;
  std::vector<std::vector<float>> grads;
  bool has_forward = false;
  uint64_t step = 0;
  EngineStats stats;
};

Engine::Engine(const Program& program, Options options) : impl_(std::make_unique<Impl>(program, std::move(options))) {}
Engine::~Engine() {
  if (!impl_->options.profile) return;
  const EngineStats& s = impl_->stats;
  std::fprintf(stderr,
               "[vjit profile] %lld batches, %lld vertices, %lld tasks (lower bound %lld), %lld kernels, %lld GEMMs "
               "(%.2f GFLOP), %lld copies (%.1f MB)\n[vjit profile] seconds: schedule %.4f copy %.4f gemm %.4f "
               "elementwise %.4f optimizer %.4f; %d fused groups, %lld JIT compiles in %.3f s\n",
               static_cast<long long>(s.batches), static_cast<long long>(s.vertices), static_cast<long long>(s.tasks),
               static_cast<long long>(s.lower_bound), static_cast<long long>(s.kernels),
               static_cast<long long>(s.gemm_calls), s.gemm_flops * 1e-9, static_cast<long long>(s.copy_calls),
               double(s.copy_bytes) * 1e-6, s.schedule_s, s.copy_s, s.gemm_s, s.elementwise_s, s.optimizer_s,
               impl_->compile_info.fused_groups, static_cast<long long>(impl_->compile_info.jit_compiles),
               impl_->compile_info.jit_compile_s);
}

double Engine::forward(const GraphBatch& batch, const RunOptions& options) {
  impl_->forward(batch, options);
  return impl_->result.objective;
}

void Engine::backward() { impl_->backward(); }

double Engine::train_step(const GraphBatch& batch, Optimizer& optimizer) {
  RunOptions run;
  run.seed = ++impl_->step;
  impl_->forward(batch, run);
  impl_->backward();
  auto start = std::chrono::steady_clock::now();
  optimizer.step(impl_->program.model(), impl_->grads);
  impl_->stats.optimizer_s += seconds_since(start);
  return impl_->result.objective;
}

Evaluation<float> Engine::infer(const GraphBatch& batch) {
  RunOptions run;
  run.training = false;
  run.backward = false;
  impl_->forward(batch, run);
  return impl_->result;
}

const Evaluation<float>& Engine::last_result() const { return impl_->result; }
const std::vector<std::vector<float>>& Engine::gradients() const { return impl_->grads; }
const EngineStats& Engine::stats() const { return impl_->stats; }
const CompileInfo& Engine::compile_info() const { return impl_->compile_info; }
void Engine::reset_stats() { impl_->stats = {}; }
const Options& Engine::options() const { return impl_->options; }
void Engine::set_fsm_policy(std::shared_ptr<const FsmPolicy> policy) { impl_->fsm = std::move(policy); }
std::shared_ptr<const FsmPolicy> Engine::fsm_policy() const { return impl_->fsm; }
std::shared_ptr<const FsmPolicy> Engine::learn_fsm_policy(const GraphBatch& batch) { return impl_->learn(batch); }

void Engine::save_fsm_policy(const std::string& path) const {
  VJIT_USER_CHECK(impl_->fsm, "Engine::save_fsm_policy: no policy was learned or loaded");
  impl_->fsm->save(path, impl_->program.signature_string());
}

void Engine::load_fsm_policy(const std::string& path) {
  impl_->fsm = std::make_shared<FsmPolicy>(FsmPolicy::load(path, impl_->program.signature_string()));
}

}  // namespace vjit
