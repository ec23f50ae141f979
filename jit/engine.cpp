#include "vjit/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

#include "ir/flops.h"
#include "jit/engine_access.h"
#include "jit/gradient_exchange.h"
#include "jit/growth.h"
#include "jit/kernel_cache.h"
#include "jit/pipeline.h"
#include "runtime/cpu_executor.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_executor.h"
#include "runtime/memplan.h"
#include "runtime/nccl.h"
#include "runtime/param_layout.h"
#include "runtime/thread_pool.h"
#include "runtime/trace.h"
#include "scheduler/fsm.h"
#include "scheduler/schedule.h"
#include "vjit/distributed.h"
#include "vjit/error.h"
#include "vjit/validate.h"

namespace vjit {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
// An unnamed sample that runs in a batch other than the caller's (a growth
// round, a group) is named by its index in the caller's batch, so that errors
// name it as the caller knows it. False when it has a name of its own.
bool name_by_index(Sample& sample, size_t index_in_caller_batch) {
  if (!sample.name.empty()) return false;
  sample.name = std::to_string(index_in_caller_batch);
  return true;
}

// VJIT_VERTEX_GEMM: the back end of the products run one per vertex. auto:
// libxsmm's JIT kernels where built and VJIT_GEMM left to vjit (MV-RNN's
// 64×64 products: 3% of a training step on a Zen 4, README), else VJIT_GEMM's.
runtime::GemmBackend select_vertex_gemm(const Options::Tuning& tuning, runtime::GemmBackend gemm) {
  using VertexGemm = Options::VertexGemm;
  if (tuning.vertex_gemm == VertexGemm::Same) return gemm;
  if (tuning.vertex_gemm == VertexGemm::Auto)
    return tuning.gemm == Options::Gemm::Auto && runtime::gemm_backend_available(runtime::GemmBackend::Libxsmm)
               ? runtime::GemmBackend::Libxsmm
               : gemm;
  return runtime::select_gemm_backend(to_string(tuning.vertex_gemm), "VJIT_VERTEX_GEMM");
}

}  // namespace

struct Engine::Impl {
  Impl(const Program& p, Options o)
      : program(p),
        options(with_device(std::move(o))),
        signatures(program.signatures()),
        num_params(program.model().size()),
        plan(lower_and_count(program, options, compile_info)),
        gemm(runtime::select_gemm_backend(to_string(options.tuning.gemm))),
        vertex_gemm(select_vertex_gemm(options.tuning, gemm)),
        policy(scheduler::parse_policy(std::string(to_string(options.policy)))) {
    using MemoryPlanner = Options::MemoryPlanner;
    VJIT_USER_CHECK(options.tuning.memplan != MemoryPlanner::PqTree || on_cpu(),
                    "VJIT_MEMPLAN=pqtree runs on the CPU executor only (VJIT_DEVICE=cpu); the CUDA executor "
                    "follows the copy and padded layouts");
    VJIT_USER_CHECK(options.tuning.memplan != MemoryPlanner::Auto || !on_cpu() || !is_on(options.deterministic),
                    "VJIT_MEMPLAN=auto chooses between copy and pqtree by timing them, and the two sum weight "
                    "gradients in different orders, so results could change in the last bits from one run to the "
                    "next: it needs VJIT_DETERMINISTIC=0 (or choose VJIT_MEMPLAN=copy or pqtree)");
    VJIT_USER_CHECK(options.tuning.dist_nccl != Lever::On || runtime::nccl_built(),
                    "VJIT_DIST_NCCL=on: this vjit was built without NCCL; leave it auto or off");
    for (int t = 0; t < program.num_types(); ++t) {
      forward_flops.push_back(double(ir::flops_per_vertex(program.forward(t))));
      backward_flops.push_back(double(ir::flops_per_vertex(program.backward(t))));
    }
    if (!options.trace_path.empty()) trace = make_trace_recorder(program, options.trace_path);
    planner = runtime::make_planner(planner_name(), plan, signatures,
                                    planner_options());
    if (on_cpu())
      executor =
          std::make_unique<runtime::CpuExecutor>(program, plan, cpu_config(options.tuning.streaming, trace.get()));
    else
      executor = std::make_unique<runtime::CudaExecutor>(
          program, plan,
          runtime::CudaExecutor::Config{options.threads, options.profile, is_on(options.tuning.tf32),
                                        options.tuning.streaming, is_on(options.tuning.cuda_graphs),
                                        is_on(options.tuning.cuda_resident_params)});
    executor->record_primitives(options.logs(Options::Log::Primitives));
    if (policy == scheduler::Policy::Fsm && !options.cache_dir.empty()) fsm = load_cached_policy();
    if (fsm) ++policy_cache_hits;
    growth.callbacks.resize(size_t(program.num_types()));
  }

  bool on_cpu() const { return options.device == Options::Device::Cpu; }

  // VJIT_MEMPLAN, with auto meaning copy on the GPU (pqtree is CPU only).
  std::string planner_name() const {
    const Options::MemoryPlanner memplan = options.tuning.memplan;
    return std::string(to_string(memplan == Options::MemoryPlanner::Auto && !on_cpu() ? Options::MemoryPlanner::Copy
                                                                                       : memplan));
  }

  // The planner's part of the (resolved) options.
  runtime::PlannerOptions planner_options() const {
    return {options.tuning.inplace_concat, options.tuning.pad_wide_rows, gathers_slices(options.tuning.row_placement),
            on_cpu()};
  }

  // The CPU executor's part of the (resolved) options.
  runtime::CpuExecutor::Config cpu_config(bool streaming, runtime::TraceRecorder* trace_recorder) const {
    return {options.threads, gemm,          streaming, options.profile, options.max_memory, options.check_finite,
            is_on(options.deterministic), trace_recorder, is_on(options.tuning.pretranspose), vertex_gemm,
            is_on(options.tuning.param_layout)};
  }

  // VJIT_TRACE: the recorder writes an empty trace at `path` now, so a path
  // that cannot be written is a UserError here rather than a trace lost at exit.
  static std::unique_ptr<runtime::TraceRecorder> make_trace_recorder(const Program& program, const std::string& path) {
    std::vector<std::string> type_names;
    for (int t = 0; t < program.num_types(); ++t) type_names.push_back(program.type_name(t));
    return std::make_unique<runtime::TraceRecorder>(path, std::move(type_names));
  }

  // A public call: its time goes to stats.call_s (the wall time VJIT_PROFILE
  // compares the phases with) and, with VJIT_TRACE, it is an event of its own
  // on the calling thread's track.
  class CallScope {
   public:
    CallScope(Impl& impl, std::string_view name)
        : impl_(impl), name_(name), start_(std::chrono::steady_clock::now()), trace_(name_caller(impl), name, runtime::TraceCategory::Call) {}
    ~CallScope() {
      impl_.stats.call_s += seconds_since(start_);
      if (impl_.options.logs(Options::Log::Primitives)) impl_.log_primitives(name_);
    }

   private:
    static runtime::TraceRecorder* name_caller(Impl& impl) {
      if (impl.trace) impl.trace->name_this_thread("vjit caller");
      return impl.trace.get();
    }
    Impl& impl_;
    std::string_view name_;
    std::chrono::steady_clock::time_point start_;
    runtime::TraceScope trace_;
  };

  // VJIT_LOG=primitives: the call's primitives, a line each, after a line
  // that counts them by kind. Never throws (a CallScope's destructor calls it).
  void log_primitives(std::string_view call) noexcept {
    try {
      std::vector<runtime::PrimitiveRecord> log = executor->take_primitive_log();
      if (kept_program) {
        std::vector<runtime::PrimitiveRecord> kept = kept_program->executor->take_primitive_log();
        log.insert(log.end(), kept.begin(), kept.end());
      }
      std::cerr << describe_primitives(call, log);
    } catch (...) {  // a log line lost, nothing else
    }
  }

  std::string describe_primitives(std::string_view call, const std::vector<runtime::PrimitiveRecord>& log) const {
    PrimitiveCounts counts;
    for (const runtime::PrimitiveRecord& r : log) counts.add(r.kind);
    std::ostringstream out;
    out << "[vjit primitives] " << call << ": " << log.size();
    for (int k = 0; k < kPrimitiveKinds; ++k)
      if (counts.count[size_t(k)] > 0)
        out << ", " << primitive_name(Primitive(k)) << " " << counts.count[size_t(k)];
    out << "\n";
    for (size_t i = 0; i < log.size(); ++i) {
      const runtime::PrimitiveRecord& r = log[i];
      out << "[vjit primitives]   " << i + 1 << " " << (r.pass == runtime::Pass::Forward ? "forward " : "backward ")
          << primitive_name(r.kind);
      if (r.type >= 0 && r.type < program.num_types()) out << " type " << program.type_name(r.type);
      if (r.task >= 0) out << " task " << r.task;
      if (r.rows > 0) out << " rows " << r.rows;
      out << ": " << r.what << "\n";
    }
    return out.str();
  }

  // The policy saved in the cache for this program, or null. A file that does
  // not load (corrupt, truncated, another format or program) must not block
  // every later engine: it is reported, moved aside to "<file>.rejected" for
  // whoever wants to look at it, and the policy is learned again.
  std::shared_ptr<const FsmPolicy> load_cached_policy() const {
    const std::string path = policy_cache_path();
    if (!std::filesystem::exists(path)) return nullptr;
    try {
      auto policy = std::make_shared<FsmPolicy>(FsmPolicy::load(path, program.signature_string()));
      check_policy_fits(*policy, "'" + path + "'");
      return policy;
    } catch (const UserError& e) {
      const std::string aside = path + ".rejected";
      std::error_code error;
      std::filesystem::rename(path, aside, error);
      report_cache_problem(path, std::string("cannot use the cached FSM policy (") + e.what() + "); " +
                                     (error ? "could not move it aside (" + error.message() + ")"
                                            : "moved it to '" + aside + "'") +
                                     "; learning the policy again");
      return nullptr;
    }
  }

  // A learned policy schedules the vertex types it was learned for: with
  // another count every batch would fail, so it is refused where it is set.
  void check_policy_fits(const FsmPolicy& policy, const std::string& what) const {
    const int types = scheduler::FsmPolicyAccess::table(policy).num_types();
    VJIT_USER_CHECK(types == program.num_types(), what << ": the policy was learned for " << types
                                                       << " vertex types, the program has " << program.num_types());
  }

  // Saves a learned policy in the cache. The cache only saves time: failing
  // to write it is reported, not an error of the batch being run.
  void save_to_cache(const FsmPolicy& policy) const {
    const std::string path = policy_cache_path();
    try {
      std::filesystem::create_directories(options.cache_dir);
      policy.save(path, program.signature_string());
    } catch (const std::exception& e) {
      report_cache_problem(path, std::string("cannot save the learned FSM policy in the cache: ") + e.what());
    }
  }

  // Says `what` on stderr, once per process for each cache file.
  static void report_cache_problem(const std::string& path, const std::string& what) {
    static std::mutex mutex;
    static std::set<std::string> reported;
    std::lock_guard<std::mutex> lock(mutex);
    if (reported.insert(path).second) std::cerr << "[vjit] VJIT_CACHE_DIR: " << what << "\n";
  }

  // VJIT_DEVICE: cuda runs on a GPU or fails saying why; auto runs on the GPU
  // when one is usable (NVRTC included), else on the CPU and says why, once
  // per process. The options keep the device chosen: "cpu" or "cuda".
  // The options come back resolved for that device (Options::resolve): a
  // lever it cannot honour is refused here, before anything is built.
  static Options with_device(Options options) {
    if (options.device == Options::Device::Cpu) return options.resolve();
    const runtime::CudaProbe& probe = runtime::probe_cuda();
    std::string why = !probe.ok ? "no usable CUDA device: " + probe.reason : jit::nvrtc_unavailable_reason();
    if (why.empty()) {
      options.device = Options::Device::Cuda;
      return options.resolve();
    }
    VJIT_USER_CHECK(options.device != Options::Device::Cuda,
                    "VJIT_DEVICE=cuda: " << why << " (VJIT_DEVICE=auto runs on the CPU instead)");
    static std::once_flag said;
    std::call_once(said, [&] { std::cerr << "[vjit] VJIT_DEVICE=auto: " << why << "; running on the CPU\n"; });
    options.device = Options::Device::Cpu;
    return options.resolve();
  }

  // Where the learned policy of this program lives in the cache directory,
  // named by an FNV-1a hash of its signature (stable across runs and builds).
  std::string policy_cache_path() const {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : program.signature_string()) hash = (hash ^ c) * 0x100000001b3ull;
    return options.cache_dir + "/fsm-" + std::to_string(hash) + ".json";
  }

  std::shared_ptr<const FsmPolicy> learn(const GraphBatch& batch) {
    check_program_unchanged();
    validate_and_order(signatures, batch);
    fsm = std::make_shared<FsmPolicy>(FsmPolicy::learn(batch, program.num_types()));
    ++policies_learned;
    if (!options.cache_dir.empty()) save_to_cache(*fsm);
    return fsm;
  }

  // The plans were lowered for the program and model as they were when the
  // engine was built; running anything else would read past them.
  void check_program_unchanged() const {
    VJIT_USER_CHECK(program.num_types() == int(signatures.size()),
                    "the Program has " << program.num_types() << " vertex types but had " << signatures.size()
                                       << " when this Engine was built; build a new Engine after add_type()");
    const Model& model = program.model();
    VJIT_USER_CHECK(model.size() == num_params, "the Model has " << model.size() << " parameters but had "
                                                                 << num_params
                                                                 << " when this Engine was built; build a new Engine");
  }

  // Runs F over the batch; with growing types (vjit/growth.h), in rounds over
  // a copy that the callbacks grow, until a round adds nothing. A round runs
  // the samples still growing (those the last round added to), each as a
  // whole graph again; when some sample sat out the last round, a final round
  // runs every sample, so the result is an ordinary forward of the final
  // graph, which backward() then differentiates.
  void forward(const GraphBatch& batch, const RunOptions& run) {
    has_grown = false;
    if (!growth.any()) {
      forward_round(batch, run);
      return;
    }
    grown = batch;
    first_new.assign(grown.samples.size(), 0);
    growing.resize(grown.samples.size());
    for (size_t s = 0; s < growing.size(); ++s) growing[s] = int(s);
    const int64_t initial = grown.num_vertices();
    try {
      if (keeps_values(run)) {
        grow_keeping_values(run);
      } else {
        bool last_round_had_every_sample = true;
        while (!growing.empty()) {
          last_round_had_every_sample = growing.size() == grown.samples.size();
          growth_round(run);
        }
        if (!last_round_had_every_sample) forward_round(grown, run);
      }
    } catch (...) {  // a failed round leaves no forward to read or differentiate
      has_forward = has_result = false;
      throw;
    }
    stats.grown_vertices += grown.num_vertices() - initial;
    has_grown = true;
  }

  // A train_step that failed (on a non-finite gradient, say) after a forward
  // pass whose objective is not finite: the failure names what the NaN
  // spoiled, not where it came from. Runs the forward pass again checking
  // every value it writes, as VJIT_CHECK_FINITE=1 does on every pass (only
  // now, so that a good step costs nothing), and says what that found.
  [[noreturn]] void throw_naming_the_first_non_finite(const GraphBatch& batch, const RunOptions& run,
                                                      const UserError& failure) {
    const std::string objective = std::to_string(result.objective);
    // Called while `failure` is handled: it stays nested, with whatever it nests.
    std::throw_with_nested(UserError(std::string(failure.what()) + "; the batch's objective is " + objective +
                                     ", and " + first_non_finite_value(batch, run)));
  }

  std::string first_non_finite_value(const GraphBatch& batch, const RunOptions& run) {
    auto* cpu = dynamic_cast<runtime::CpuExecutor*>(executor.get());
    if (!cpu || growth.any())  // no check on the GPU; growth callbacks must not run twice
      return "VJIT_DEVICE=cpu with VJIT_CHECK_FINITE=1 names the first non-finite value of its forward pass";
    std::string found = "its forward pass, run again checking every value, found none non-finite";
    cpu->set_check_finite(true);
    try {
      forward_round(batch, run);
    } catch (const UserError& e) {
      constexpr std::string_view prefix = "VJIT_CHECK_FINITE: ";
      std::string_view what = e.what();
      if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
      found = "its forward pass, run again checking every value, found: " + std::string(what);
    }
    cpu->set_check_finite(options.check_finite);
    return found;
  }

  // Runs the samples in `growing` (moved into a batch of their own unless it
  // is every sample), calls the callbacks of their new vertices and leaves in
  // `growing` the samples that grew.
  void growth_round(const RunOptions& run) {
    ++stats.growth_rounds;
    if (growing.size() == grown.samples.size()) {
      forward_round(grown, run);
      jit::grow_round(program, growth, result.pushes, sample_pointers(grown, growing, false), growing, first_new);
      return;
    }
    // Unnamed samples are named while they run in the smaller batch
    // (name_by_index); ran[i] < 0 marks one that keeps a name of its own.
    ran = growing;  // grow_round rewrites `growing`
    round_batch.samples.resize(ran.size());
    for (size_t i = 0; i < ran.size(); ++i) {
      Sample& sample = grown.samples[size_t(ran[i])];
      if (!name_by_index(sample, size_t(ran[i]))) ran[i] = ~ran[i];
      round_batch.samples[i] = std::move(sample);
    }
    auto move_back = [&] {
      for (size_t i = 0; i < ran.size(); ++i) {
        Sample& sample = grown.samples[size_t(ran[i] < 0 ? ~ran[i] : ran[i])];
        sample = std::move(round_batch.samples[i]);
        if (ran[i] >= 0) sample.name.clear();
      }
    };
    try {
      forward_round(round_batch, run);
      jit::grow_round(program, growth, result.pushes, sample_pointers(round_batch, growing, false), growing,
                      first_new);
    } catch (...) {
      move_back();
      throw;
    }
    move_back();
  }

  // Pointers to the samples of `batch` a round ran: with `by_index`, sample
  // indices[i] of it, else sample i (the round's own batch).
  std::span<Sample* const> sample_pointers(GraphBatch& batch, const std::vector<int>& indices, bool by_index) {
    round_samples.resize(indices.size());
    for (size_t i = 0; i < indices.size(); ++i)
      round_samples[i] = &batch.samples[by_index ? size_t(indices[i]) : i];
    return round_samples;
  }

  // Rounds of growth that keep the values of earlier rounds: inference (no
  // gradients, no dropout) on the CPU executor, with a policy that needs no
  // table learned for the program's own types.
  bool keeps_values(const RunOptions& run) const {
    return !run.backward && !run.training && on_cpu() && policy != scheduler::Policy::Fsm;
  }

  // The program's types followed by one stand-in type per shape a type
  // scatters: a stand-in pulls a stored row from its features and scatters
  // it. A round runs, for each growing sample, its new vertices and, for each
  // vertex of an earlier round they read, a stand-in holding what that vertex
  // scattered, so that only the new vertices compute, and their values are
  // those of the whole graph run at once. On the CPU its executor reads the
  // Model's own parameters: nothing to upload after a train_step.
  struct KeptValueProgram {
    explicit KeptValueProgram(const Program& original) : program(original) {}
    Program program;
    std::vector<int> stand_in;  // per type of the original program
    std::vector<TypeSignature> signatures;
    runtime::ExecPlan plan;
    std::unique_ptr<runtime::Planner> planner;
    std::unique_ptr<runtime::CpuExecutor> executor;
    std::vector<double> forward_flops;
  };

  KeptValueProgram& kept_value_program() {
    if (kept_program) return *kept_program;
    auto kept = std::make_unique<KeptValueProgram>(program);
    std::vector<std::pair<Shape, int>> stand_ins;  // scatter shape → stand-in type
    for (int t = 0; t < program.num_types(); ++t) {
      const TypeSignature& signature = program.signature(t);
      const Shape shape = signature.scatters ? signature.scatter_shape : Shape::vec(1);
      auto found = std::find_if(stand_ins.begin(), stand_ins.end(), [&](const auto& s) { return s.first == shape; });
      if (found == stand_ins.end()) {
        const int width = int(shape.numel());
        const int type = kept->program.add_type("vjit_kept_value_" + std::to_string(stand_ins.size()), [&](Builder& b) {
          Value row = b.pull(width);
          b.scatter(shape == Shape::vec(width) ? row : b.reshape(row, shape));
        });
        found = stand_ins.insert(stand_ins.end(), {shape, type});
      }
      kept->stand_in.push_back(found->second);
    }
    kept->signatures = kept->program.signatures();
    kept->plan = jit::lower_program(kept->program, options);
    kept->planner = runtime::make_planner(planner_name(), kept->plan, kept->signatures, planner_options());
    // Not streaming: the scattered rows are read back after the forward.
    kept->executor = std::make_unique<runtime::CpuExecutor>(kept->program, kept->plan, cpu_config(false, nullptr));
    kept->executor->record_primitives(options.logs(Options::Log::Primitives));
    for (int t = 0; t < kept->program.num_types(); ++t)
      kept->forward_flops.push_back(t < program.num_types() ? forward_flops[size_t(t)] : 0.0);
    kept_program = std::move(kept);
    return *kept_program;
  }

  // The growth rounds of an inference: each runs the samples still growing,
  // their earlier vertices as stand-ins (KeptValueProgram), keeps what the
  // new vertices scattered and pushed, and calls the callbacks. The result is
  // then assembled from the kept pushes; the objective is the sum of the
  // rounds' (each vertex's loss is counted in the round that evaluated it).
  void grow_keeping_values(const RunOptions& run) {
    KeptValueProgram& kept = kept_value_program();
    kept_values.resize(grown.samples.size());
    for (std::vector<KeptVertex>& values : kept_values) values.clear();
    kept_scatters.clear();
    kept_pushes.clear();
    kept_push_values.clear();
    double objective = 0;
    while (!growing.empty()) {
      ++stats.growth_rounds;
      build_kept_round(kept);
      try {
        run_round(round_batch, run, Runner{kept.signatures, *kept.planner, *kept.executor, kept.forward_flops,
                                           round_result});
      } catch (const UserError&) {
        explain_kept_round_error();
        throw;
      }
      objective += round_result.objective;
      keep_new_values(kept);
      jit::grow_round(program, growth, round_result.pushes, sample_pointers(grown, growing, true), growing,
                      first_new, push_shift);
    }
    assemble_kept_result(objective);
  }

  // round_batch: for each sample in `growing`, a stand-in for each vertex of
  // an earlier round that a new vertex reads, then the new vertices (vertex v
  // at v + push_shift[i]). Unnamed samples are named (name_by_index).
  void build_kept_round(const KeptValueProgram& kept) {
    round_batch.samples.resize(growing.size());
    push_shift.resize(growing.size());
    for (size_t i = 0; i < growing.size(); ++i) {
      const size_t s = size_t(growing[i]);
      const Sample& sample = grown.samples[s];
      Sample& out = round_batch.samples[i];
      out.name = sample.name;
      name_by_index(out, s);
      const int evaluated = first_new[s];
      // The stand-ins, in the order the new vertices first read them.
      stand_in_of.assign(size_t(evaluated), -1);
      int stand_ins = 0;
      for (size_t v = size_t(evaluated); v < sample.vertices.size(); ++v)
        for (int child : sample.vertices[v].children)
          if (child >= 0 && child < evaluated && stand_in_of[size_t(child)] < 0) stand_in_of[size_t(child)] = stand_ins++;
      out.vertices.resize(size_t(stand_ins) + sample.vertices.size() - size_t(evaluated));
      for (int old = 0; old < evaluated; ++old) {
        if (stand_in_of[size_t(old)] < 0) continue;
        Vertex& stand_in = out.vertices[size_t(stand_in_of[size_t(old)])];
        stand_in.type = kept.stand_in[size_t(sample.vertices[size_t(old)].type)];
        stand_in.children.clear();
        stand_in.token = stand_in.label = -1;
        const KeptRange scatter = kept_values[s][size_t(old)].scatter;
        stand_in.features.assign(kept_scatters.begin() + scatter.begin,
                                 kept_scatters.begin() + scatter.begin + scatter.size);
      }
      const int shift = stand_ins - evaluated;
      push_shift[i] = shift;
      for (size_t v = size_t(evaluated); v < sample.vertices.size(); ++v) {
        Vertex& vertex = out.vertices[v + size_t(shift)];
        vertex = sample.vertices[v];
        for (int& child : vertex.children)
          if (child >= 0 && child < int(sample.vertices.size()))  // else the graph check names it
            child = child < evaluated ? stand_in_of[size_t(child)] : child + shift;
      }
    }
  }

  // A round whose check failed: the check again on the grown samples, whose
  // vertex numbers are the caller's (a round renumbers them), so that the
  // error names the vertex the caller knows.
  void explain_kept_round_error() const {
    GraphBatch samples;
    for (int s : growing) {
      samples.samples.push_back(grown.samples[size_t(s)]);
      name_by_index(samples.samples.back(), size_t(s));
    }
    validate_and_order(signatures, samples);
  }

  // Stores what the round's new vertices scattered and pushed.
  void keep_new_values(KeptValueProgram& kept) {
    for (size_t i = 0; i < growing.size(); ++i) {
      const size_t s = size_t(growing[i]);
      const Sample& sample = grown.samples[s];
      kept_values[s].resize(sample.vertices.size());
      for (int v = first_new[s]; v < int(sample.vertices.size()); ++v) {
        KeptVertex& values = kept_values[s][size_t(v)];
        const int type = sample.vertices[size_t(v)].type;
        const int in_round = v + push_shift[i];
        values.scatter.begin = int64_t(kept_scatters.size());
        if (signatures[size_t(type)].scatters) {
          const int row = layout.vertex_row[size_t(graph.id({int(i), in_round}))];
          std::span<const float> scattered = kept.executor->scattered_row(type, row);
          kept_scatters.insert(kept_scatters.end(), scattered.begin(), scattered.end());
        } else {
          kept_scatters.push_back(0.0f);  // the vec(1) stand-in's row
        }
        values.scatter.size = int64_t(kept_scatters.size()) - values.scatter.begin;
        values.first_push = int(kept_pushes.size());
        values.num_pushes = round_result.pushes.count(int(i), in_round);
        for (int k = 0; k < values.num_pushes; ++k) {
          std::span<const float> pushed = round_result.pushes.at(int(i), in_round, k);
          kept_pushes.push_back({int64_t(kept_push_values.size()), int64_t(pushed.size())});
          kept_push_values.insert(kept_push_values.end(), pushed.begin(), pushed.end());
        }
      }
    }
  }

  // result: the objective and every vertex's pushes, over the grown batch.
  void assemble_kept_result(double objective) {
    result.objective = objective;
    PushedValues<float>& pushes = result.pushes;
    pushes.reset(int(grown.samples.size()), [&](int s) { return int(grown.samples[size_t(s)].vertices.size()); });
    std::vector<int64_t> widths;
    for (const std::vector<KeptVertex>& sample : kept_values)
      for (const KeptVertex& vertex : sample) {
        widths.clear();
        for (int k = 0; k < vertex.num_pushes; ++k) widths.push_back(kept_pushes[size_t(vertex.first_push + k)].size);
        pushes.add_vertex(widths);
      }
    pushes.allocate();
    int flat = 0;
    for (const std::vector<KeptVertex>& sample : kept_values)
      for (const KeptVertex& vertex : sample) {
        for (int k = 0; k < vertex.num_pushes; ++k) {
          const KeptRange pushed = kept_pushes[size_t(vertex.first_push + k)];
          std::copy_n(kept_push_values.begin() + pushed.begin, pushed.size,
                      pushes.data() + pushes.value_offset(flat, k));
        }
        ++flat;
      }
  }

  // --- VJIT_INFER_SHARDS: infer() on groups of samples at once ---
  //
  // A batch of at least two samples is split into groups of consecutive
  // samples; each group is inferred by an engine of its own (one thread, the
  // same Program and Model, the same options otherwise) on a thread of a
  // pool, and the groups' results are put back together in sample order. What
  // this buys: every serial part of a call (scheduling, planning, small
  // kernels and copies, growth bookkeeping) runs on every core at once, where
  // one engine splits only its larger kernels over its threads. Each group's
  // result is that of its samples inferred alone as one batch.
  struct InferShards {
    std::vector<std::unique_ptr<Engine>> engines;  // per group
    std::unique_ptr<runtime::ThreadPool> pool;
    std::vector<GraphBatch> batches;               // per group, reused
  };

  int infer_groups(const GraphBatch& batch) const {
    if (!on_cpu()) return 1;  // resolve() refuses infer_shards > 1 on the GPU
    return int(std::min<size_t>(size_t(options.tuning.infer_shards), batch.samples.size()));
  }

  InferShards& infer_shards_for(int groups) {
    if (!shards) shards = std::make_unique<InferShards>();
    InferShards& s = *shards;
    Options group_options = options;
    group_options.threads = 1;
    group_options.tuning.infer_shards = 1;
    group_options.profile = false;  // the groups' counters are added to this engine's
    group_options.trace_path.clear();
    while (int(s.engines.size()) < groups) s.engines.push_back(std::make_unique<Engine>(program, group_options));
    const int threads = std::min(groups, options.threads);
    if (!s.pool || s.pool->size() != threads) s.pool = std::make_unique<runtime::ThreadPool>(threads);
    s.batches.resize(size_t(groups));
    return s;
  }

  // Group g holds samples [n·g/G, n·(g+1)/G) of the caller's batch; unnamed
  // ones are named (name_by_index; the names are taken off again when the
  // grown samples come back).
  void split_into_groups(const GraphBatch& batch, InferShards& s) {
    const size_t n = batch.samples.size(), groups = s.batches.size();
    for (size_t g = 0; g < groups; ++g) {
      const size_t first = n * g / groups, end = n * (g + 1) / groups;
      GraphBatch& group = s.batches[g];
      group.first_sample = batch.first_sample + int(first);
      group.samples.assign(batch.samples.begin() + ptrdiff_t(first), batch.samples.begin() + ptrdiff_t(end));
      for (size_t i = first; i < end; ++i) name_by_index(group.samples[i - first], i);
    }
  }

  // The group engine's growth: this engine's callbacks, called through (not
  // copied, so that a callback's own state is shared), with the sample
  // indices of the caller's batch.
  jit::GrowthRules group_growth(int first_sample) const {
    jit::GrowthRules rules;
    rules.max_vertices = growth.max_vertices;
    rules.first_sample_index = first_sample;
    for (const GrowthCallback& callback : growth.callbacks)
      rules.callbacks.push_back(callback ? GrowthCallback([&callback](GrowthStep& step) { callback(step); })
                                         : GrowthCallback());
    return rules;
  }

  void infer_in_groups(const GraphBatch& batch, int groups) {
    check_program_unchanged();
    has_forward = has_result = has_grown = false;
    if (policy == scheduler::Policy::Fsm && !fsm) learn(batch);  // one policy for every group
    InferShards& s = infer_shards_for(groups);
    split_into_groups(batch, s);
    RunOptions run;
    run.training = false;
    run.backward = false;
    s.pool->parallel_for(groups, [&](int64_t g) {
      Impl& group = *s.engines[size_t(g)]->impl_;
      group.growth = group_growth(s.batches[size_t(g)].first_sample - batch.first_sample);
      group.lower_bound_tracked = lower_bound_tracked;
      if (policy == scheduler::Policy::Fsm) group.fsm = fsm;
      group.forward(s.batches[size_t(g)], run);
    });
    result.objective = 0;
    result.pushes.reset(0, [](int) { return 0; });
    result.param_grads.clear();
    grown.samples.clear();
    for (int g = 0; g < groups; ++g) {
      Impl& group = *s.engines[size_t(g)]->impl_;
      result.objective += group.result.objective;
      result.pushes.append(group.result.pushes);
      add_counts(stats, internal, group.stats, group.internal);
      group.stats = EngineStats{};
      group.internal = jit::InternalStats{};
      if (group.has_grown)
        for (Sample& sample : group.grown.samples) grown.samples.push_back(std::move(sample));
    }
    if (growth.any()) {
      grown.first_sample = batch.first_sample;
      for (size_t i = 0; i < grown.samples.size(); ++i)
        if (batch.samples[i].name.empty()) grown.samples[i].name.clear();
      has_grown = true;
    }
    has_result = true;
  }

  // A group's counters added to this engine's (their times are thread-
  // seconds: groups run at once). Not call_s (this engine times its own
  // call) nor the dist_* counters (no group trains).
  static void add_counts(EngineStats& into, jit::InternalStats& internal_into, const EngineStats& from,
                         const jit::InternalStats& internal_from) {
    static_assert(sizeof(EngineStats) == 21 * sizeof(int64_t) + sizeof(PrimitiveCounts),
                  "EngineStats changed: sum the new field here (or say above why not), then update the count");
    static_assert(sizeof(jit::InternalStats) == 10 * sizeof(int64_t),
                  "InternalStats changed: sum the new field here (or say above why not), then update the count");
    into.batches += from.batches;
    into.vertices += from.vertices;
    into.tasks += from.tasks;
    into.lower_bound += from.lower_bound;
    into.kernels += from.kernels;
    into.gemm_calls += from.gemm_calls;
    into.gemm_flops += from.gemm_flops;
    into.useful_flops += from.useful_flops;
    into.copy_calls += from.copy_calls;
    into.copy_bytes += from.copy_bytes;
    into.schedule_s += from.schedule_s;
    into.plan_s += from.plan_s;
    into.copy_s += from.copy_s;
    into.gemm_s += from.gemm_s;
    into.elementwise_s += from.elementwise_s;
    into.optimizer_s += from.optimizer_s;
    into.forward_s += from.forward_s;
    into.backward_s += from.backward_s;
    into.growth_rounds += from.growth_rounds;
    into.grown_vertices += from.grown_vertices;
    into.primitives += from.primitives;
    internal_into.fsm_fallbacks += internal_from.fsm_fallbacks;
    internal_into.param_grad_gemms += internal_from.param_grad_gemms;
    internal_into.layout_copy_bytes += internal_from.layout_copy_bytes;
    internal_into.stacked_weight_bytes += internal_from.stacked_weight_bytes;
    internal_into.gather_views += internal_from.gather_views;
    internal_into.pretransposed_weights += internal_from.pretransposed_weights;
    internal_into.aligned_batches += internal_from.aligned_batches;
    internal_into.aligned_satisfied += internal_from.aligned_satisfied;
  }


  // What runs a round: the program's own plans, or those of the program that
  // keeps values (KeptValueProgram), with the evaluation it writes.
  struct Runner {
    const std::vector<TypeSignature>& signatures;
    runtime::Planner& planner;
    runtime::Executor& executor;
    const std::vector<double>& forward_flops;
    Evaluation<float>& result;
  };

  void forward_round(const GraphBatch& batch, const RunOptions& run) {
    run_round(batch, run, Runner{signatures, *planner, *executor, forward_flops, result});
  }

  void run_round(const GraphBatch& batch, const RunOptions& run, const Runner& runner) {
    check_program_unchanged();
    has_forward = false;
    auto start = std::chrono::steady_clock::now();
    {
      runtime::TraceScope schedule_event(trace.get(), "schedule", runtime::TraceCategory::Engine);
      schedule_batch(batch, runner.signatures);
    }
    stats.schedule_s += seconds_since(start);
    if (lower_bound_tracked) stats.lower_bound += scheduler::lower_bound(graph, schedule.vertices);
    start = std::chrono::steady_clock::now();
    {
      runtime::TraceScope plan_event(trace.get(), "plan", runtime::TraceCategory::Engine);
      runner.planner.plan({&graph, &schedule, run.backward}, layout);
    }
    const double plan_s = seconds_since(start);
    stats.plan_s += plan_s;
    check_memory_bound(batch, run);
    internal.aligned_batches += layout.aligned_batches;
    internal.aligned_satisfied += layout.aligned_satisfied;
    stats.batches += 1;
    stats.vertices += graph.num_vertices();
    stats.tasks += schedule.num_tasks();
    internal.fsm_fallbacks += schedule.fsm_fallbacks;
    stats.useful_flops += schedule_flops(runner.forward_flops);
    has_result = false;
    start = std::chrono::steady_clock::now();
    {
      runtime::TraceArgs args;
      args.rows = graph.num_vertices();
      runtime::TraceScope forward_event(trace.get(), "forward pass", runtime::TraceCategory::Engine, args);
      runner.executor.forward({&graph, &schedule, &layout}, run, runner.result);
    }
    const double forward_s = seconds_since(start);
    stats.forward_s += forward_s;
    // The layout's cost, for VJIT_MEMPLAN=auto: planning and the forward, and
    // the backward when one follows (backward() reports it then).
    laid_out_batch_s = plan_s + forward_s;
    if (!run.backward) runner.planner.batch_done(laid_out_batch_s, graph.num_vertices());
    has_result = true;
    has_forward = run.backward;
    collect(runner.executor);
  }

  // The learned policy's table, or null without one.
  const scheduler::FsmPolicy* fsm_table() const { return fsm ? &scheduler::FsmPolicyAccess::table(*fsm) : nullptr; }

  // Validates and flattens the batch (learning the FSM policy on the first
  // batch that needs it) and chooses its tasks.
  void schedule_batch(const GraphBatch& batch, const std::vector<TypeSignature>& types) {
    bool heights = policy == scheduler::Policy::Fsm && fsm && scheduler::encoding_uses_heights(fsm_table()->encoding());
    scheduler::validate_and_flatten(types, batch, heights, graph, order, scratch);
    if (policy == scheduler::Policy::Fsm && !fsm) {
      learn(batch);
      if (scheduler::encoding_uses_heights(fsm_table()->encoding())) graph.assign(batch, int(signatures.size()), true);
    }
    scheduler.run(graph, policy, fsm_table(), schedule);
    if (options.logs(Options::Log::Schedule)) std::cerr << scheduler::describe_schedule(schedule, signatures, policy);
  }

  // VJIT_MAX_MEMORY: a batch whose buffers (the vertex values, and their
  // gradients when it trains) would not fit is refused before anything runs.
  void check_memory_bound(const GraphBatch& batch, const RunOptions& run) const {
    if (options.max_memory == 0) return;
    const int64_t forward_bytes = layout.arena_floats[0] * int64_t(sizeof(float));
    const int64_t backward_bytes = run.backward ? layout.arena_floats[1] * int64_t(sizeof(float)) : 0;
    VJIT_USER_CHECK(forward_bytes + backward_bytes <= options.max_memory,
                    "a batch of " << batch.samples.size() << " samples (" << graph.num_vertices() << " vertices) needs "
                                  << forward_bytes + backward_bytes << " bytes of buffers (values " << forward_bytes
                                  << ", gradients " << backward_bytes << "), more than VJIT_MAX_MEMORY="
                                  << options.max_memory << " bytes; run smaller batches or raise the bound");
  }

  void backward() {
    VJIT_USER_CHECK(has_forward, "Engine::backward needs a forward() with RunOptions::backward set before it");
    has_forward = false;
    const auto start = std::chrono::steady_clock::now();
    {
      runtime::TraceArgs args;
      args.rows = graph.num_vertices();
      runtime::TraceScope backward_event(trace.get(), "backward pass", runtime::TraceCategory::Engine, args);
      executor->backward();
    }
    const double backward_s = seconds_since(start);
    stats.backward_s += backward_s;
    planner->batch_done(laid_out_batch_s + backward_s, graph.num_vertices());
    stats.useful_flops += schedule_flops(backward_flops);
    has_gradients = true;
    collect(*executor);
  }

  // The backward of train_step; with a communicator (data-parallel training),
  // the gradients then summed over the ranks, their sums started during the
  // backward where Options::Tuning::dist_overlap asks and the executor can tell when
  // gradients are final (jit/gradient_exchange.h).
  void backward_summing_over_ranks() {
    if (!distributed) return backward();
    const ExchangeStats before = exchange->stats();
    runtime::ParameterStore& store = executor->parameters();
    const bool overlap = is_on(options.tuning.dist_overlap) &&
                         exchange->begin_backward(*distributed, program.model(), store,
                                                  executor->gradient_final_points());
    if (overlap) executor->set_backward_observer(exchange.get());
    try {
      backward();
    } catch (...) {
      executor->set_backward_observer(nullptr);
      throw;
    }
    executor->set_backward_observer(nullptr);
    exchange->sum_over_ranks(*distributed, program.model(), store);
    internal.dist_buckets += exchange->stats().buckets - before.buckets;
    internal.dist_buckets_overlapped += exchange->stats().started_in_backward - before.started_in_backward;
  }

  // Σ over the schedule's tasks of (vertices × the per-vertex flops of the task's type).
  double schedule_flops(const std::vector<double>& per_vertex) const {
    double total = 0;
    for (int t = 0; t < schedule.num_tasks(); ++t)
      total += double(schedule.task_begin[size_t(t) + 1] - schedule.task_begin[size_t(t)]) *
               per_vertex[size_t(schedule.task_type[size_t(t)])];
    return total;
  }

  // Moves the executor's counters into the engine's stats.
  void collect(runtime::Executor& from) {
    runtime::ExecStats e = from.take_stats();
    stats.kernels += e.kernels;
    stats.gemm_calls += e.gemm_calls;
    stats.gemm_flops += e.gemm_flops;
    internal.param_grad_gemms += e.param_grad_gemms;
    stats.copy_calls += e.copy_calls;
    stats.copy_bytes += e.copy_bytes;
    internal.layout_copy_bytes += e.layout_copy_bytes;
    internal.stacked_weight_bytes += e.stacked_weight_bytes;
    internal.gather_views += e.gather_views;
    internal.pretransposed_weights += e.pretransposed_weights;
    stats.copy_s += e.copy_s;
    stats.gemm_s += e.gemm_s;
    stats.elementwise_s += e.elementwise_s;
    stats.primitives += e.primitives;
  }

  // VJIT_PROFILE's summary: counts, phase totals against the wall time of the
  // engine's calls, tasks against the lower bound, cache hits, the costliest steps.
  std::string profile_report() const {
    const EngineStats& s = stats;
    std::string out;
    char line[512];
    auto say = [&](const char* format, auto... values) {
      std::snprintf(line, sizeof line, format, values...);
      out += "[vjit profile] ";
      out += line;
      out += "\n";
    };
    const double wall = s.call_s;
    auto percent = [&](double seconds) { return wall > 0 ? 100.0 * seconds / wall : 0.0; };
    say("%lld batches, %lld vertices, %lld kernels, %lld GEMMs (%.2f GFLOP), %lld copies (%.1f MB); %d fused groups",
        static_cast<long long>(s.batches), static_cast<long long>(s.vertices), static_cast<long long>(s.kernels),
        static_cast<long long>(s.gemm_calls), s.gemm_flops * 1e-9, static_cast<long long>(s.copy_calls),
        double(s.copy_bytes) * 1e-6, compile_info.fused_groups);
    say("wall %.3f ms inside the engine's calls (forward, backward, train_step, infer); phases:", wall * 1e3);
    auto phase = [&](const char* name, double seconds, const char* note) {
      say("phase %-14s %12.3f ms %6.1f%%  %s", name, seconds * 1e3, percent(seconds), note);
    };
    phase("schedule+plan", s.schedule_s + s.plan_s, "validating, flattening, scheduling and laying out batches");
    phase("forward", s.forward_s, "running the forward tasks");
    phase("backward", s.backward_s, "running the backward");
    phase("optimizer", s.optimizer_s, "parameter updates");
    phase("gemm", s.gemm_s, "part of forward+backward");
    phase("elementwise", s.elementwise_s, "part of forward+backward: fused and other kernels");
    phase("copy", s.copy_s, "part of forward+backward: gathers, pulls, pushes, scattered gradients");
    if (s.lower_bound > 0)
      say("tasks %lld issued, lower bound %lld: %.3fx the bound", static_cast<long long>(s.tasks),
          static_cast<long long>(s.lower_bound), double(s.tasks) / double(s.lower_bound));
    else
      say("tasks %lld issued, lower bound not computed (reset_stats or track_lower_bound(false))",
          static_cast<long long>(s.tasks));
    say("kernel cache: %lld hits, %lld compiled in %.3f s; FSM policy cache: %lld loaded, %lld learned",
        static_cast<long long>(compile_info.jit_cache_hits), static_cast<long long>(compile_info.jit_compiles),
        compile_info.jit_compile_s, static_cast<long long>(policy_cache_hits), static_cast<long long>(policies_learned));
    // The costliest steps, to see which op of which vertex function a change should target.
    std::vector<runtime::StepTime> steps = executor->step_profile();
    if (kept_program) {  // the rounds of growth that kept values ran there
      for (runtime::StepTime& step : kept_program->executor->step_profile()) {
        step.label = "(kept-values rounds) " + step.label;
        steps.push_back(std::move(step));
      }
      std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    }
    constexpr size_t kShown = 20;
    if (!steps.empty()) say("top kernels by time (of %zu steps):", steps.size());
    else if (!on_cpu() && is_on(options.tuning.cuda_graphs))
      say("%s", "steps not timed: VJIT_CUDA_GRAPHS runs each pass as a graph after its steps are issued");
    if (!steps.empty()) say("%12s %8s %10s %9s  %s", "total ms", "calls", "rows/call", "% of wall", "step");
    for (size_t i = 0; i < std::min(steps.size(), kShown); ++i)
      say("%12.3f %8lld %10.1f %8.1f%%  %s", steps[i].seconds * 1e3, static_cast<long long>(steps[i].calls),
          double(steps[i].rows) / double(std::max<int64_t>(1, steps[i].calls)), percent(steps[i].seconds),
          steps[i].label.c_str());
    return out;
  }

  static runtime::ExecPlan lower_and_count(const Program& program, const Options& options, CompileInfo& info) {
    auto start = std::chrono::steady_clock::now();
    jit::KernelCacheCounters before = jit::KernelCache::global().counters();
    jit::NvrtcCounters nvrtc_before = jit::nvrtc_counters();  // the CUDA module (VJIT_DEVICE=cuda)
    runtime::ExecPlan plan = jit::lower_program(program, options);
    jit::KernelCacheCounters after = jit::KernelCache::global().counters();
    jit::NvrtcCounters nvrtc_after = jit::nvrtc_counters();
    info.jit_compiles = after.compiles - before.compiles + nvrtc_after.compiles - nvrtc_before.compiles;
    info.jit_cache_hits = after.hits - before.hits + nvrtc_after.memory_hits - nvrtc_before.memory_hits +
                          nvrtc_after.disk_hits - nvrtc_before.disk_hits;
    info.jit_compile_s = after.compile_seconds - before.compile_seconds + nvrtc_after.compile_seconds -
                         nvrtc_before.compile_seconds;
    for (const runtime::TypePlan& t : plan.types) {
      info.fused_groups += int(t.forward.fused.size() + t.backward.fused.size());
      for (size_t g = 0; g < t.forward.fused.size(); ++g) info.inference_kernels += t.forward.inference_differs(g);
      for (const runtime::FusedStep& step : t.backward.fused) info.accumulating_kernels += step.accumulating.entry != nullptr;
    }
    // Building an engine may move the Model's values within its block: no
    // other engine of this Model may be running meanwhile (engine.h).
    if (is_on(options.tuning.param_layout)) {
      const runtime::ParamLayout laid = runtime::lay_out_parameters(plan, program.model());
      info.stacked_weights = laid.stacked;
      info.stacked_in_place = laid.in_place;
    } else {
      info.stacked_weights = int(runtime::stacked_weights(plan).size());
    }
    info.lower_s = seconds_since(start);
    return plan;
  }

  const Program& program;
  Options options;
  std::vector<TypeSignature> signatures;  // as the program was when the engine was built
  int num_params;
  CompileInfo compile_info;  // declared before plan, which fills it
  runtime::ExecPlan plan;
  runtime::GemmBackend gemm;
  runtime::GemmBackend vertex_gemm;  // VJIT_VERTEX_GEMM
  scheduler::Policy policy;
  // VJIT_TRACE (null when off); before the executor, which records into it.
  std::unique_ptr<runtime::TraceRecorder> trace;
  std::unique_ptr<runtime::Planner> planner;
  std::unique_ptr<runtime::Executor> executor;
  std::shared_ptr<const FsmPolicy> fsm;
  // Useful flops of one vertex of each type, F and ∂F (ir/flops.h).
  std::vector<double> forward_flops, backward_flops;

  // The batch being run, reused from batch to batch.
  scheduler::FlatBatch graph;
  std::vector<int> order, scratch;
  scheduler::Scheduler scheduler;
  scheduler::FlatSchedule schedule;
  runtime::BatchLayout layout;
  double laid_out_batch_s = 0;  // the last batch's planning and forward, for the planner (batch_done)
  Evaluation<float> result;

  // Growing types, and the batch the last forward grew (when it did).
  jit::GrowthRules growth;
  GraphBatch grown;
  std::vector<int> first_new;  // per sample: its first vertex no callback has seen yet
  std::vector<int> growing;    // the samples the next round runs: those the last one added to
  GraphBatch round_batch;      // those samples, when not every one
  std::vector<int> ran;        // their indices (~index: a sample with a name of its own)
  std::vector<Sample*> round_samples;  // the samples a round's callbacks grow
  bool has_grown = false;
  // Inference growth keeps values across rounds (grow_keeping_values), in
  // flat arenas that keep their capacity from batch to batch: no allocation
  // per vertex. A vertex's values are ranges of them.
  struct KeptRange {
    int64_t begin = 0, size = 0;
  };
  struct KeptVertex {
    KeptRange scatter;  // in kept_scatters: what it scattered (one 0 for a type that does not)
    int first_push = 0, num_pushes = 0;  // in kept_pushes
  };
  std::unique_ptr<KeptValueProgram> kept_program;  // built by the first such round
  std::vector<std::vector<KeptVertex>> kept_values;  // per sample of the caller's batch, per evaluated vertex
  std::vector<float> kept_scatters;    // every kept vertex's scatter
  std::vector<KeptRange> kept_pushes;  // every kept push: its values in kept_push_values
  std::vector<float> kept_push_values;
  Evaluation<float> round_result;
  std::vector<int> push_shift;   // per sample of a round: where its new vertices moved (build_kept_round)
  std::vector<int> stand_in_of;  // scratch of build_kept_round

  std::unique_ptr<InferShards> shards;  // VJIT_INFER_SHARDS: made by the first infer() in groups

  bool has_forward = false, has_result = false, has_gradients = false;
  bool lower_bound_tracked = options.profile;  // VJIT_PROFILE reports tasks against the bound
  int64_t policy_cache_hits = 0, policies_learned = 0;  // FSM policies loaded from VJIT_CACHE_DIR, learned
  uint64_t step = 0;
  std::shared_ptr<Distributed> distributed;  // Engine::set_distributed; null: one process
  std::unique_ptr<GradientExchange> exchange;  // made by set_distributed
  EngineStats stats;
  jit::InternalStats internal;  // the counters beside stats (jit/engine_access.h)
  // Every public call holds it: one call runs at a time (engine.h, "Threads").
  mutable std::mutex call_mutex;
};

Engine::Engine(const Program& program, Options options) : impl_(std::make_unique<Impl>(program, std::move(options))) {}
Engine::~Engine() {
  if (impl_->trace) {
    try {
      impl_->trace->write();
    } catch (const std::exception& e) {  // a destructor must not throw: say it instead
      std::fprintf(stderr, "[vjit] VJIT_TRACE: %s\n", e.what());
    }
  }
  if (impl_->options.profile) std::fputs(impl_->profile_report().c_str(), stderr);
  try {
    // The Model outlives the engine: it keeps the trained values. On the CPU
    // they are the Model's memory already, so nothing (not even the Program,
    // which may be gone) is touched.
    if (!impl_->on_cpu()) download_parameters();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[vjit] the parameters could not be copied back into the Model: %s\n", e.what());
  }
}

void Engine::flush_trace() {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(impl_->trace, "Engine::flush_trace: tracing is off (set VJIT_TRACE=file.json or Options::trace_path)");
  impl_->trace->write();
}

double Engine::forward(const GraphBatch& batch, const RunOptions& options) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  Impl::CallScope call(*impl_, "Engine::forward");
  impl_->forward(batch, options);
  return impl_->result.objective;
}

void Engine::backward() {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  Impl::CallScope call(*impl_, "Engine::backward");
  impl_->backward();
}

double Engine::train_step(const GraphBatch& batch, Optimizer& optimizer) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  Impl::CallScope call(*impl_, "Engine::train_step");
  RunOptions run;
  run.seed = ++impl_->step;
  impl_->forward(batch, run);
  impl_->backward_summing_over_ranks();
  double objective = impl_->result.objective;
  if (impl_->distributed) objective = impl_->distributed->allreduce_sum(objective);
  auto start = std::chrono::steady_clock::now();
  try {
    impl_->executor->update(optimizer);
  } catch (const UserError& failure) {
    if (std::isfinite(impl_->result.objective)) throw;
    impl_->throw_naming_the_first_non_finite(batch, run, failure);
  }
  impl_->stats.optimizer_s += seconds_since(start);
  impl_->collect(*impl_->executor);  // the update's primitives belong to this step
  return objective;
}

void Engine::set_distributed(std::shared_ptr<Distributed> comm) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  // A new communicator needs a new NCCL communicator too (made on its first exchange).
  impl_->exchange = std::make_unique<GradientExchange>(is_on(impl_->options.tuning.dist_nccl),
                                                       double(impl_->options.dist_timeout));
  impl_->distributed = std::move(comm);
}

std::shared_ptr<Distributed> Engine::distributed() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  return impl_->distributed;
}

Evaluation<float> Engine::infer(const GraphBatch& batch) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  Impl::CallScope call(*impl_, "Engine::infer");
  if (const int groups = impl_->infer_groups(batch); groups > 1) {
    impl_->infer_in_groups(batch, groups);
    return impl_->result;
  }
  RunOptions run;
  run.training = false;
  run.backward = false;
  impl_->forward(batch, run);
  return impl_->result;  // a copy, made before another call may reuse the buffers
}

void Engine::set_growth(int type, GrowthCallback callback) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(type >= 0 && type < int(impl_->growth.callbacks.size()),
                  "Engine::set_growth: vertex type " << type << " is not one of the program's "
                                                     << impl_->growth.callbacks.size() << " types");
  impl_->growth.callbacks[size_t(type)] = std::move(callback);
}

void Engine::set_growth_limit(int max_vertices_per_sample) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(max_vertices_per_sample > 0,
                  "Engine::set_growth_limit: the limit must be positive, not " << max_vertices_per_sample);
  impl_->growth.max_vertices = max_vertices_per_sample;
}

const GraphBatch& Engine::grown_batch() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(impl_->has_grown,
                  "Engine::grown_batch: the last forward did not grow (no type has a growth callback, or it failed)");
  return impl_->grown;
}

const Evaluation<float>& Engine::last_result() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(impl_->has_result, "Engine::last_result: no forward() has completed yet");
  return impl_->result;
}

const std::vector<std::vector<float>>& Engine::gradients() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(impl_->has_gradients, "Engine::gradients: no backward() has run yet");
  return impl_->executor->parameters().gradients();
}

const std::vector<GradientRows>& Engine::gradient_rows() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(impl_->has_gradients, "Engine::gradient_rows: no backward() has run yet");
  return impl_->executor->parameters().gradient_rows();
}

void Engine::track_lower_bound(bool on) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  impl_->lower_bound_tracked = on;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  return impl_->stats;
}

std::string Engine::memory_planner() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  return impl_->planner->in_use();
}

void Engine::reset_stats() {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  impl_->stats = {};
  impl_->internal = {};
  impl_->executor->reset_step_profile();  // its times are compared with the stats' wall time
  if (impl_->kept_program) impl_->kept_program->executor->reset_step_profile();
}

namespace jit {

EngineAccess::EngineAccess(const Engine& engine) : impl_(*engine.impl_), lock_(impl_.call_mutex) {}
OptimizerState EngineAccess::optimizer_state() const { return impl_.executor->optimizer_state(); }
uint64_t EngineAccess::train_steps() const { return impl_.step; }
InternalStats EngineAccess::internal_stats() const { return impl_.internal; }
void EngineAccess::set_optimizer_state(OptimizerState state) { impl_.executor->set_optimizer_state(std::move(state)); }
void EngineAccess::set_train_steps(uint64_t steps) { impl_.step = steps; }
void EngineAccess::upload_parameters() { impl_.executor->parameters().upload(impl_.program.model()); }
void EngineAccess::download_parameters() const { impl_.executor->parameters().download(impl_.program.model()); }

}  // namespace jit

OptimizerState Engine::optimizer_state() const { return jit::EngineAccess(*this).optimizer_state(); }
void Engine::set_optimizer_state(OptimizerState state) { jit::EngineAccess(*this).set_optimizer_state(std::move(state)); }
uint64_t Engine::train_steps() const { return jit::EngineAccess(*this).train_steps(); }
void Engine::set_train_steps(uint64_t steps) { jit::EngineAccess(*this).set_train_steps(steps); }
void Engine::upload_parameters() { jit::EngineAccess(*this).upload_parameters(); }
void Engine::download_parameters() const { jit::EngineAccess(*this).download_parameters(); }

// Set when the engine is built, never changed: no lock needed.
const Program& Engine::program() const { return impl_->program; }
const CompileInfo& Engine::compile_info() const { return impl_->compile_info; }
const Options& Engine::options() const { return impl_->options; }

void Engine::set_fsm_policy(std::shared_ptr<const FsmPolicy> policy) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  if (policy) impl_->check_policy_fits(*policy, "Engine::set_fsm_policy");
  impl_->fsm = std::move(policy);
}

std::shared_ptr<const FsmPolicy> Engine::fsm_policy() const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  return impl_->fsm;
}

std::shared_ptr<const FsmPolicy> Engine::learn_fsm_policy(const GraphBatch& batch) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  return impl_->learn(batch);
}

void Engine::save_fsm_policy(const std::string& path) const {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  VJIT_USER_CHECK(impl_->fsm, "Engine::save_fsm_policy: no policy was learned or loaded");
  impl_->fsm->save(path, impl_->program.signature_string());
}

void Engine::load_fsm_policy(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->call_mutex);
  auto policy = std::make_shared<FsmPolicy>(FsmPolicy::load(path, impl_->program.signature_string()));
  impl_->check_policy_fits(*policy, "Engine::load_fsm_policy: '" + path + "'");
  impl_->fsm = std::move(policy);
}

}  // namespace vjit
