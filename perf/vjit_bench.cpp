// vjit-bench: trains or runs inference on an example model through the Engine
// and prints one JSON object per configuration on stdout.
//
//   vjit-bench --model tree_lstm --mode train --hidden 256 --batch 64 --compare-unbatched
//   vjit-bench --model lattice_lstm --policy fsm --compare-policy agenda
//   vjit-bench --model seq2seq --mode decode --batch 64 --compare-unbatched
//
// --mode decode (seq2seq only) trains the model with teacher forcing first
// (--pretrain-steps, default 100, batch 64), then times greedy decoding, a
// graph that grows (vjit/growth.h): samples_per_s counts decoded samples;
// with --compare-unbatched, batch 1 in the same process.
// --mode latency infers --sentences N sentences (default 1,000) --batch at a
// time, each call timed alone, and reports the calls' latency (median, 99th
// percentile, mean, max): what one request waits at that batch size.
// --declared-children N (child_sum_tree_lstm) declares N children in its
// gather_all instead of the data's most (perf/fan_in.sh).
//
// Every VJIT_* variable applies, and the same options are accepted as flags
// (--policy agenda, --no-lazy, ...). --ablation runs the Cavs Fig. 10 study
// (one line per configuration, with a "config" field); --levers [--rounds N]
// turns each CPU-speed lever off in turn on the given model and data, the
// configurations taking turns N times, and prints medians and each lever's
// speedup (run_levers); --layouts [--rounds N] does the same for the memory
// layouts of issue 11 (the copy baseline, copy and pqtree) and prints each
// one's per-round speedups (run_layouts). Results are checked before they are timed:
// the first batch is compared with the reference interpreter (--no-check skips it).
// After the timed steps an engine of its own runs the same batches forward
// for the ED-Batch lower bound (--no-lower-bound skips it: perf/graph_launches.sh
// counts the driver calls of the timed steps alone).
// Each process measures its GEMM peak (measure_gemm_peak, --peak-seconds,
// default 1.5: half on one thread, half on all; in two halves around the first
// timed steps, keeping the faster) and every line reports the model's useful
// flops per second against it (roofline_ratio). On the GPU (--device cuda) the
// peak is cuBLASLt's FP32 8192³ product, timed with events; every step
// synchronises with the device before it returns, so the wall-clock timer sees
// the GPU's work. Each line says where it ran (device, and the host's cpu) and
// how long its engine took to start (engine_start_s: lowering, NVRTC compile
// or cache).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "bench_util.h"
#include "jit/engine_access.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using nlohmann::json;

struct BenchArgs {
  std::string model = "tree_lstm";
  std::string mode = "train";
  int batch = 64;
  int steps = 10;
  int warmup = 2;
  bool compare_unbatched = false;
  bool check = true;
  bool lower_bound = true;  // --no-lower-bound: no lower-bound engine after the timed steps
  bool ablation = false;
  bool levers = false;  // --levers: each CPU-speed lever off in turn (run_levers)
  bool layouts = false;  // --layouts: the copy baseline, copy and pqtree in turn (run_layouts)
  int rounds = 3;       // --rounds: how often the --levers or --layouts configurations take turns
  std::string compare_policy;  // also time this policy; report the speedup over it
  double peak_seconds = 1.5;   // the GEMM peak: half on one thread, half on all threads
  int pretrain_steps = 100;    // --mode decode: teacher-forced steps (batch 64) before decoding
  int sentences = 1000;        // --mode latency: how many sentences are inferred, --batch per call
  models::Config config;
};

// The GEMM peak of this process, measured in two halves around the first
// run()'s timed steps (one before, one after) and reported in every line:
// every run of one process uses the same back end and thread count. Each
// figure keeps the faster half, since interference only slows a GEMM down, so
// one disturbed half (another process on the shared machine) does not
// inflate every roofline ratio of the process.
std::optional<GemmPeak> g_peak;
int g_peak_halves = 0;

void measure_peak_half(const BenchArgs& args, const Options& options) {
  if (g_peak_halves >= 2) return;
  GemmPeakOptions half;
  half.seconds = args.peak_seconds / 4;  // per figure: one thread, all threads
  GemmPeak measured = measure_gemm_peak(options, half);
  if (g_peak) {
    measured.one_thread_gflops_per_s = std::max(measured.one_thread_gflops_per_s, g_peak->one_thread_gflops_per_s);
    measured.all_threads_gflops_per_s = std::max(measured.all_threads_gflops_per_s, g_peak->all_threads_gflops_per_s);
  }
  g_peak = measured;
  ++g_peak_halves;
}

const GemmPeak& peak_of(const BenchArgs& args, const Options& options) {
  if (!g_peak) measure_peak_half(args, options);
  return *g_peak;
}

BenchArgs parse(const std::vector<std::string>& args) {
  BenchArgs b;
  b.config.hidden = 256;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--compare-unbatched") { b.compare_unbatched = true; continue; }
    if (flag == "--no-check") { b.check = false; continue; }
    if (flag == "--no-lower-bound") { b.lower_bound = false; continue; }
    if (flag == "--ablation") { b.ablation = true; continue; }
    if (flag == "--levers") { b.levers = true; continue; }
    if (flag == "--layouts") { b.layouts = true; continue; }
    if (i + 1 >= args.size()) throw UserError("unknown flag or missing value: " + flag);
    const std::string& value = args[++i];
    if (flag == "--model") b.model = value;
    else if (flag == "--mode") b.mode = value;
    else if (flag == "--batch") b.batch = bench::int_flag(flag, value);
    else if (flag == "--hidden") b.config.hidden = bench::int_flag(flag, value);
    else if (flag == "--embed") b.config.embed = bench::int_flag(flag, value);
    else if (flag == "--steps") b.steps = bench::int_flag(flag, value);
    else if (flag == "--warmup") b.warmup = bench::int_flag(flag, value);
    else if (flag == "--rounds") b.rounds = bench::int_flag(flag, value);
    else if (flag == "--pretrain-steps") b.pretrain_steps = bench::int_flag(flag, value);
    else if (flag == "--sentences") b.sentences = bench::int_flag(flag, value);
    else if (flag == "--data") b.config.data_path = value;
    else if (flag == "--declared-children") b.config.declared_children = bench::int_flag(flag, value);
    else if (flag == "--seed") b.config.seed = uint64_t(bench::int_flag(flag, value));
    else if (flag == "--compare-policy") b.compare_policy = value;
    else if (flag == "--peak-seconds") b.peak_seconds = bench::seconds_flag(flag, value);
    else throw UserError("unknown flag " + flag);
  }
  if (b.mode != "train" && b.mode != "infer" && b.mode != "decode" && b.mode != "latency")
    throw UserError("--mode must be train, infer, decode or latency, got '" + b.mode + "'");
  if (b.mode == "latency") b.steps = (b.sentences + b.batch - 1) / b.batch;  // calls of --batch sentences
  if (b.mode == "decode" && b.model != "seq2seq")
    throw UserError("--mode decode (greedy decoding, a graph that grows) needs --model seq2seq, got '" + b.model + "'");
  // Enough distinct samples for every timed batch.
  b.config.train_samples = b.batch * (b.steps + b.warmup);
  if (b.mode == "decode") b.config.train_samples = std::max(b.config.train_samples, 64 * b.pretrain_steps);
  b.config.test_samples = 0;
  return b;
}

// vjit-bench's first `count` batches of `batch` samples (bench::batch_indices).
std::vector<std::vector<int>> batches_of(int num_samples, int batch, int count) {
  std::vector<std::vector<int>> out;
  for (int i = 0; i < count; ++i) out.push_back(bench::batch_indices(num_samples, batch, i));
  return out;
}

// Checks one batch against the reference interpreter (relative 1e-3 on the
// objective and the gradients: the reference runs in float here too; 5e-2,
// the stated accuracy, when the products round their operands to bf16).
void check_against_reference(Engine& engine, const Program& program, const GraphBatch& batch) {
  const double tolerance = engine.options().tuning.gemm == vjit::Options::Gemm::OneDnnBf16 ? 5e-2 : 1e-3;
  RunOptions run;
  run.seed = 1;
  double objective = engine.forward(batch, run);
  engine.backward();
  Evaluation<float> ref = reference_evaluate(program, batch, run);
  double worst = std::abs(objective - ref.objective) / std::max(1.0, std::abs(ref.objective));
  for (size_t p = 0; p < ref.param_grads.size(); ++p) {
    double diff = 0, scale = 1e-6;
    for (size_t i = 0; i < ref.param_grads[p].size(); ++i) {
      diff = std::max(diff, double(std::abs(engine.gradients()[p][i] - ref.param_grads[p][i])));
      scale = std::max(scale, double(std::abs(ref.param_grads[p][i])));
    }
    worst = std::max(worst, diff / scale);
  }
  if (worst > tolerance)
    throw InternalError("vjit-bench: batched results differ from the reference by " + std::to_string(worst));
}

struct Timing {
  double seconds = 0;
  int samples = 0;
  int exact_matches = 0;  // --mode decode: decoded outputs equal to their target
  EngineStats stats;
  jit::InternalStats internal;  // the scheduler's, memory planner's and executors' counters
  CompileInfo compile;
  std::string device;          // where the engine ran: cpu or cuda
  std::string memory_planner;  // the planner laying batches out at the end (VJIT_MEMPLAN=auto: its choice)
  std::vector<double> step_seconds;  // --mode latency: each timed call's
};

// --mode decode: the batch's encoder prompts (vjit/models.h, seq2seq_prompt).
GraphBatch decode_prompts(const Program& program, const GraphBatch& teacher_forced) {
  GraphBatch prompts;
  for (const Sample& sample : teacher_forced.samples) prompts.samples.push_back(models::seq2seq_prompt(program, sample));
  return prompts;
}

// The options of an engine that runs outside the timed steps (the reference
// check, pre-training, the lower-bound pass): no VJIT_PROFILE report and no
// VJIT_TRACE file, which the engine writes when destroyed, so that the only
// report and trace are those of the timed steps.
Options without_reports(Options options) {
  options.profile = false;
  options.trace_path.clear();
  return options;
}

// --mode decode: trains the model with teacher forcing first, so that the
// decoded lengths follow the targets' rather than all running to the limit.
void pretrain_seq2seq(const BenchArgs& args, models::Bundle& bundle, const Options& options) {
  Engine engine(*bundle.program, without_reports(options));
  Adam adam(0.01f);
  std::vector<std::vector<int>> batches = batches_of(int(bundle.train.size()), 64, args.pretrain_steps);
  for (const std::vector<int>& indices : batches) engine.train_step(models::make_batch(bundle.train, indices), adam);
}

Timing run(const BenchArgs& args, models::Bundle& bundle, const Options& options, int batch_size, int steps) {
  Engine engine(*bundle.program, options);
  Adam adam(bench::kLearningRate);
  const bool decode = args.mode == "decode";
  if (decode)
    engine.set_growth(bundle.program->type_index("decoder"), models::seq2seq_greedy_decoder(*bundle.program));
  int exact_matches = 0;
  auto step = [&](const GraphBatch& batch) {
    if (args.mode == "train") engine.train_step(batch, adam);
    else engine.infer(batch);
  };
  std::vector<std::vector<int>> batches = batches_of(int(bundle.train.size()), batch_size, steps + args.warmup);
  auto batch_at = [&](size_t i) {
    GraphBatch batch = models::make_batch(bundle.train, batches[i]);
    return decode ? decode_prompts(*bundle.program, batch) : batch;
  };
  for (int i = 0; i < args.warmup; ++i) step(batch_at(size_t(i)));
  std::vector<GraphBatch> timed;
  for (int i = 0; i < steps; ++i) timed.push_back(batch_at(size_t(args.warmup + i)));
  const bool first_run = g_peak_halves == 0;
  if (first_run) measure_peak_half(args, options);
  // Decoding: the timed loop reads each decoded output; comparing them with
  // their targets is evaluation, done after the clock stops.
  std::vector<std::vector<int>> outputs;
  engine.reset_stats();
  std::vector<double> step_seconds;
  Timer timer;
  for (size_t i = 0; i < timed.size(); ++i) {
    if (args.mode == "latency") {  // each call alone (the clock read is ~20 ns of a call's tens of µs)
      Timer call;
      step(timed[i]);
      step_seconds.push_back(call.seconds());
      continue;
    }
    step(timed[i]);
    if (!decode) continue;
    for (const Sample& decoded : engine.grown_batch().samples)
      outputs.push_back(models::seq2seq_output(*bundle.program, decoded));
  }
  const double seconds = timer.seconds();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const size_t sample = size_t(batches[size_t(args.warmup) + i / size_t(batch_size)][i % size_t(batch_size)]);
    exact_matches += outputs[i] == models::seq2seq_target(*bundle.program, bundle.train[sample]);
  }
  Timing timing{seconds,
                steps * batch_size,
                exact_matches,
                engine.stats(),
                jit::internal_stats(engine),
                engine.compile_info(),
                std::string(to_string(engine.options().device)),
                engine.memory_planner(),
                std::move(step_seconds)};
  if (first_run) measure_peak_half(args, options);
  if (decode || !args.lower_bound) return timing;  // the lower bound of a graph that grows is not defined up front
  // The ED-Batch lower bound of the same batches, outside the timed loop, in
  // an engine of its own (see without_reports).
  Engine bound(*bundle.program, without_reports(options));
  bound.track_lower_bound(true);
  RunOptions no_gradients;
  no_gradients.backward = false;
  for (const GraphBatch& batch : timed) bound.forward(batch, no_gradients);
  timing.stats.lower_bound = bound.stats().lower_bound;
  return timing;
}

// "AMD EPYC 7B13 (avx2)": the CPU's model name and its widest vector ISA,
// from /proc/cpuinfo, so that every line says which machine made it.
std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU", flags;
  while (std::getline(in, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("model name", 0) == 0 && name == "unknown CPU") name = value();
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = " " + value() + " ";
  }
  std::string isa = flags.find(" avx512f ") != std::string::npos ? "avx512"
                    : flags.find(" avx2 ") != std::string::npos  ? "avx2"
                                                                 : "no avx2";
  if (flags.find(" avx512_bf16 ") != std::string::npos) isa += ", avx512_bf16";
  if (flags.find(" amx_tile ") != std::string::npos) isa += ", amx";
  return name + " (" + isa + ")";
}

// Primitives per step by kind (those that ran), and their total.
json primitives_per_step(const vjit::PrimitiveCounts& counts, double steps) {
  json out = json::object();
  for (int k = 0; k < vjit::kPrimitiveKinds; ++k)
    if (counts.count[size_t(k)] > 0)
      out[std::string(vjit::primitive_name(vjit::Primitive(k)))] = double(counts.count[size_t(k)]) / steps;
  out["total"] = double(counts.total()) / steps;
  return out;
}

json to_json(const BenchArgs& args, const Options& options, const Timing& t) {
  const EngineStats& s = t.stats;
  const jit::InternalStats& internal = t.internal;
  double steps = double(s.batches);
  const GemmPeak& peak = peak_of(args, options);
  double useful = s.useful_flops / t.seconds * 1e-9;
  return json{{"model", args.model},
              {"data", args.config.data_path.empty() ? std::string("built-in") : args.config.data_path},
              {"mode", args.mode},
              {"policy", std::string(to_string(options.policy))},
              {"memplan", std::string(to_string(options.tuning.memplan))},
              {"memory_planner", t.memory_planner},
              {"batch", args.batch},
              {"hidden", args.config.hidden},
              {"declared_children", args.config.declared_children},
              {"samples_per_s", double(t.samples) / t.seconds},
              {"tasks", double(s.tasks) / steps},
              {"vertices", double(s.vertices) / steps},
              {"lower_bound", double(s.lower_bound) / steps},
              {"kernels", double(s.kernels) / steps},
              {"primitives", primitives_per_step(s.primitives, steps)},
              {"gemm_calls", double(s.gemm_calls) / steps},
              {"param_grad_gemms", double(internal.param_grad_gemms) / steps},
              {"copy_calls", double(s.copy_calls) / steps},
              {"copy_bytes", double(s.copy_bytes) / steps},
              {"layout_copy_bytes", double(internal.layout_copy_bytes) / steps},
              {"stacked_weight_bytes", double(internal.stacked_weight_bytes) / steps},
              {"gather_views", double(internal.gather_views) / steps},
              {"aligned_batches", double(internal.aligned_batches) / steps},
              {"aligned_satisfied", double(internal.aligned_satisfied) / steps},
              {"gemm_gflops_per_s", s.gemm_flops / t.seconds * 1e-9},
              {"useful_gflops_per_s", useful},
              {"peak_gflops_per_s", peak.all_threads_gflops_per_s},
              {"peak_gflops_per_s_one_thread", peak.one_thread_gflops_per_s},
              {"peak_gemm", {{"backend", peak.backend}, {"size", peak.size}, {"threads", peak.threads}}},
              {"roofline_ratio", useful / peak.all_threads_gflops_per_s},
              {"threads", options.threads},
              {"cpu", cpu_description()},
              {"device", t.device},
              {"engine_start_s", t.compile.lower_s},
              {"fused_groups", t.compile.fused_groups},
              {"inference_kernels", t.compile.inference_kernels},
              {"stacked_weights", t.compile.stacked_weights},
              {"stacked_in_place", t.compile.stacked_in_place},
              {"jit_compiles", t.compile.jit_compiles},
              {"jit_cache_hits", t.compile.jit_cache_hits},
              {"jit_compile_s", t.compile.jit_compile_s},
              {"time_s",
               {{"total", t.seconds / steps},
                {"schedule", s.schedule_s / steps},
                {"plan", s.plan_s / steps},
                {"copy", s.copy_s / steps},
                {"gemm", s.gemm_s / steps},
                {"elementwise", s.elementwise_s / steps},
                {"optimizer", s.optimizer_s / steps}}},
              {"options", options.describe()}};
}

// --mode latency: the timed calls' latency in seconds. The 99th percentile
// is the nearest rank (the smallest call time at or above 99% of the calls).
json latency_of(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const size_t p99 = size_t(std::ceil(0.99 * double(n))) - 1;
  double sum = 0;
  for (double s : seconds) sum += s;
  return json{{"calls", n},
              {"median", seconds[n / 2]},
              {"p99", seconds[p99]},
              {"mean", sum / double(n)},
              {"max", seconds.back()}};
}

json bench_one(const BenchArgs& args, const Options& options) {
  models::Bundle bundle = models::make_model(args.model, args.config);
  if (args.check) {
    Engine engine(*bundle.program, without_reports(options));
    std::vector<int> first = batches_of(int(bundle.train.size()), std::min(args.batch, 8), 1)[0];
    check_against_reference(engine, *bundle.program, models::make_batch(bundle.train, first));
  }
  if (args.mode == "decode") pretrain_seq2seq(args, bundle, options);
  Timing batched = run(args, bundle, options, args.batch, args.steps);
  json line = to_json(args, options, batched);
  if (args.mode == "latency") line["latency_s"] = latency_of(batched.step_seconds);
  if (args.mode == "decode") {
    line["decode_rounds"] = double(batched.stats.growth_rounds) / double(args.steps);
    line["grown_vertices"] = double(batched.stats.grown_vertices) / double(args.steps);
    line["exact_match"] = double(batched.exact_matches) / double(batched.samples);
    line["pretrain_steps"] = args.pretrain_steps;
  }
  if (args.compare_unbatched) {
    // Each sample alone, as per-sample frameworks run it. The engine still
    // batches the vertices of one sample that it can, so the speedup below is
    // a lower bound on the gain over vertex-by-vertex execution.
    Timing single = run(args, bundle, options, 1, args.steps * args.batch);
    double unbatched = double(single.samples) / single.seconds;
    line["unbatched_samples_per_s"] = unbatched;
    line["batching_speedup"] = line["samples_per_s"].get<double>() / unbatched;
    if (args.mode == "decode") line["unbatched_exact_match"] = double(single.exact_matches) / double(single.samples);
  }
  if (!args.compare_policy.empty()) {
    Options other = options;
    apply_flag(other, "policy", args.compare_policy);
    Timing t = run(args, bundle, other, args.batch, args.steps);
    line["compare_policy"] = other.policy;
    line["compare_samples_per_s"] = double(t.samples) / t.seconds;
    line["compare_tasks"] = double(t.stats.tasks) / double(t.stats.batches);
    line["speedup_vs_compare_policy"] = line["samples_per_s"].get<double>() / (double(t.samples) / t.seconds);
  }
  return line;
}

// The median of the configurations' runs (--levers, --layouts): the upper of
// the two middle values for an even count.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Cavs Fig. 10: the baseline with fusion, lazy batching and streaming off, each
// turned on alone, then all on, then vjit's defaults (all but streaming);
// Tree-LSTM and Fixed-LSTM at hidden 64, 256, 512.
void run_ablation(BenchArgs args, const Options& base) {
  struct Config {
    const char* name;
    bool fusion, lazy, streaming;
  };
  const Config configs[] = {{"baseline", false, false, false},
                            {"fusion", true, false, false},
                            {"lazy", false, true, false},
                            {"streaming", false, false, true},
                            {"all", true, true, true},
                            {"default", true, true, false}};  // vjit's defaults: streaming measured no gain
  for (const char* model : {"tree_lstm", "fixed_lstm"}) {
    for (int hidden : {64, 256, 512}) {
      for (const Config& c : configs) {
        BenchArgs a = args;
        a.model = model;
        a.config.hidden = hidden;
        a.config.embed = 0;
        Options options = base;
        options.tuning.fusion = c.fusion;
        options.tuning.lazy = c.lazy;
        options.tuning.streaming = c.streaming;
        json line = bench_one(a, options);
        line["config"] = c.name;
        std::cout << line.dump() << std::endl;
      }
    }
  }
}

// The CPU-speed levers (issue 9) side by side on one model and data: the
// configuration given (vjit's defaults unless flags changed them), then each
// lever off in turn (the row placement down to slices, then copy), one thread
// instead of all, and the one lever that is off by default turned on (bf16
// products). The configurations take turns,
// --rounds times, so that every one sees the same machine load; each line
// reports the medians, and lever_speedup = the given configuration's median
// samples/s over this one's for a lever turned off, this one's over the given
// one's for a lever turned on (> 1: the lever pays on this machine). A lever
// the machine cannot run (bf16 without AVX-512 BF16 or AMX) prints a line
// with "skipped" and the reason.
void run_levers(BenchArgs args, const Options& base) {
  struct Lever {
    const char* name;
    void (*change)(Options&);
    bool turns_on = false;  // the lever is off by default; this configuration turns it on
    const char* config = nullptr;  // the configuration's name where it is not the lever's with _off or _on
  };
  const Lever levers[] = {
      {"all_on", [](Options&) {}},
      {"fusion", [](Options& o) { o.tuning.fusion = false; }},
      {"fuse_across_phases", [](Options& o) { o.tuning.fuse_across_phases = false; }},
      {"lazy", [](Options& o) { o.tuning.lazy = false; }},
      {"merge_matmuls", [](Options& o) { o.tuning.merge_matmuls = false; }},
      {"inplace_concat", [](Options& o) { o.tuning.inplace_concat = false; }},
      {"epilogue", [](Options& o) { o.tuning.epilogue = false; }},
      {"pad_wide_rows", [](Options& o) { o.tuning.pad_wide_rows = false; }},
      {"pretranspose", [](Options& o) { o.tuning.pretranspose = vjit::Lever::Off; }},
      {"infer_kernels", [](Options& o) { o.tuning.infer_kernels = vjit::Lever::Off; }},
      {"row_placement", [](Options& o) { o.tuning.row_placement = vjit::Options::RowPlacement::Slices; }, false,
       "row_placement_slices"},
      {"row_placement", [](Options& o) { o.tuning.row_placement = vjit::Options::RowPlacement::Copy; }, false,
       "row_placement_copy"},
      {"child_rows", [](Options& o) { o.tuning.child_rows = vjit::Lever::Off; }},
      {"param_layout", [](Options& o) { o.tuning.param_layout = vjit::Lever::Off; }},
      {"vertex_gemm", [](Options& o) { o.tuning.vertex_gemm = vjit::Options::VertexGemm::Same; }},
      {"threads", [](Options& o) { o.threads = 1; }},
      // Off is the faster thread-count-dependent GEMM split: a speedup below 1
      // is what bitwise determinism across thread counts costs.
      {"deterministic", [](Options& o) { o.deterministic = vjit::Lever::Off; }},
      // Products on bf16 operands (not float-exact: never a default).
      {"bf16", [](Options& o) { o.tuning.gemm = vjit::Options::Gemm::OneDnnBf16; }, true},
  };
  const size_t n = std::size(levers);
  std::vector<std::vector<json>> lines(n);
  std::vector<std::string> skipped(n);
  args.check = false;  // checked once per configuration, in its first round
  if (args.rounds < 1) throw UserError("--rounds needs a positive integer");
  for (int round = 0; round < args.rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (!skipped[i].empty()) continue;
      Options options = base;
      levers[i].change(options);
      BenchArgs a = args;
      a.check = round == 0 && (i == 0 || levers[i].turns_on);
      try {
        lines[i].push_back(bench_one(a, options));
      } catch (const UserError& e) {
        if (!levers[i].turns_on || round > 0) throw;
        skipped[i] = e.what();  // the machine cannot run it (refused when the engine is built)
      }
    }
  }
  auto medians_of = [&](size_t i, const char* field) {
    std::vector<double> v;
    for (const json& line : lines[i]) v.push_back(line[field].get<double>());
    return median(v);
  };
  const double all_on = medians_of(0, "samples_per_s");
  for (size_t i = 0; i < n; ++i) {
    const std::string config = i == 0                 ? std::string("all_on")
                               : levers[i].config ? std::string(levers[i].config)
                                                  : std::string(levers[i].name) + (levers[i].turns_on ? "_on" : "_off");
    if (!skipped[i].empty()) {
      std::cout << json{{"config", config}, {"lever", levers[i].name}, {"mode", args.mode}, {"skipped", skipped[i]}}.dump()
                << std::endl;
      continue;
    }
    json line = lines[i][lines[i].size() / 2];  // counters and options of one run
    line["config"] = config;
    line["lever"] = levers[i].name;
    line["rounds"] = args.rounds;
    line["samples_per_s"] = medians_of(i, "samples_per_s");
    line["roofline_ratio"] = medians_of(i, "roofline_ratio");
    line["useful_gflops_per_s"] = medians_of(i, "useful_gflops_per_s");
    const double ratio = all_on / line["samples_per_s"].get<double>();
    line["lever_speedup"] = levers[i].turns_on ? 1.0 / ratio : ratio;
    std::cout << line.dump() << std::endl;
  }
}

// Issue 11's question, "does the step get faster?", asked of one model and
// data in one process: the copy baseline (every child row a vertex reads and
// every stacked weight copied: VJIT_MEMPLAN=copy with VJIT_ROW_PLACEMENT=slices
// and the parameter layout off), copy and
// pqtree (the given options otherwise) take turns, --rounds times, starting
// each round with the next one (no configuration always runs first). Each
// line has the medians of its runs, the step time of each round
// ("round_ms"), and per round the baseline's step time over this one's
// ("speedup_vs_baseline") and, for pqtree, copy's over pqtree's
// ("speedup_vs_copy"): their median, min and max, from runs at most a few
// seconds apart.
void run_layouts(BenchArgs args, const Options& base) {
  struct Layout {
    const char* name;
    void (*change)(Options&);
  };
  const Layout layouts[] = {
      {"baseline",
       [](Options& o) {
         o.tuning.memplan = vjit::Options::MemoryPlanner::Copy;
         o.tuning.row_placement = vjit::Options::RowPlacement::Slices;
         o.tuning.param_layout = vjit::Lever::Off;
       }},
      {"copy", [](Options& o) { o.tuning.memplan = vjit::Options::MemoryPlanner::Copy; }},
      {"pqtree", [](Options& o) { o.tuning.memplan = vjit::Options::MemoryPlanner::PqTree; }},
  };
  constexpr size_t n = std::size(layouts);
  if (args.rounds < 1) throw UserError("--rounds needs a positive integer");
  std::vector<std::vector<json>> lines(n);
  std::vector<std::vector<double>> ms(n);
  for (int round = 0; round < args.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (size_t(round) + k) % n;
      Options options = base;
      layouts[i].change(options);
      BenchArgs a = args;
      a.check = args.check && round == 0;
      lines[i].push_back(bench_one(a, options));
      ms[i].push_back(lines[i].back()["time_s"]["total"].get<double>() * 1e3);
    }
  }
  auto spread = [&](size_t over, size_t of) {
    std::vector<double> ratios;
    for (int r = 0; r < args.rounds; ++r) ratios.push_back(ms[over][size_t(r)] / ms[of][size_t(r)]);
    return json{{"median", median(ratios)},
                {"min", *std::min_element(ratios.begin(), ratios.end())},
                {"max", *std::max_element(ratios.begin(), ratios.end())}};
  };
  for (size_t i = 0; i < n; ++i) {
    json line = lines[i][lines[i].size() / 2];  // counters and options of one run
    line["config"] = layouts[i].name;
    line["rounds"] = args.rounds;
    line["round_ms"] = ms[i];
    line["ms_per_step"] = median(ms[i]);
    line["samples_per_s"] = double(args.batch) * 1e3 / median(ms[i]);
    line["speedup_vs_baseline"] = spread(0, i);
    if (std::string(layouts[i].name) == "pqtree") line["speedup_vs_copy"] = spread(1, i);
    std::cout << line.dump() << std::endl;
  }
}

int bench_main(int argc, char** argv) {
  Options options = Options::from_env();
  BenchArgs args = parse(apply_flags(options, argc, argv));
  if (args.ablation) run_ablation(args, options);
  else if (args.levers) run_levers(args, options);
  else if (args.layouts) run_layouts(args, options);
  else std::cout << bench_one(args, options).dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace vjit

int main(int argc, char** argv) { return vjit::bench::guarded_main("vjit-bench", vjit::bench_main, argc, argv); }
