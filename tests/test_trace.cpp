// Looking inside a run: the Chrome trace of VJIT_TRACE (loaded back and
// checked field by field), the perf map of VJIT_PERF_MAP for an engine's
// kernels, the summary table of VJIT_PROFILE, and the primitives a step
// issues (EngineStats::primitives, VJIT_LOG=primitives).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "codegen/isa.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using nlohmann::json;

std::vector<int> range(int begin, int end) {
  std::vector<int> out;
  for (int i = begin; i < end; ++i) out.push_back(i);
  return out;
}

// Large enough that some steps split their rows over the pool's two threads.
models::Bundle traced_model() {
  models::Config config;
  config.hidden = 32;
  config.embed = 16;
  config.train_samples = 32;
  config.test_samples = 0;
  config.dropout = 0.1;
  return models::make_model("tree_lstm", config);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / (std::to_string(::getpid()) + "_" + name)).string();
}

json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << " was not written";
  return json::parse(in);  // throws (failing the test) on invalid JSON
}

// Two training steps and an inference with VJIT_TRACE set; the trace the
// engine wrote when it was destroyed.
struct TracedRun {
  json trace;
  std::set<std::string> type_names;
};

TracedRun traced_run(const std::string& path) {
  models::Bundle bundle = traced_model();
  Options options = Options::defaults();
  options.trace_path = path;
  options.threads = 2;
  TracedRun run;
  for (int t = 0; t < bundle.program->num_types(); ++t) run.type_names.insert(bundle.program->type_name(t));
  {
    Engine engine(*bundle.program, options);
    Adam adam(1e-3f);
    engine.train_step(models::make_batch(bundle.train, range(0, 16)), adam);
    engine.train_step(models::make_batch(bundle.train, range(16, 32)), adam);
    engine.infer(models::make_batch(bundle.train, range(0, 8)));
  }
  run.trace = load_json(path);
  std::filesystem::remove(path);
  return run;
}

bool within(const json& inner, const json& outer) {
  constexpr double kRounding = 0.0015;  // microseconds: the file has nanoseconds
  const double begin = inner["ts"].get<double>(), end = begin + inner["dur"].get<double>();
  const double outer_begin = outer["ts"].get<double>(), outer_end = outer_begin + outer["dur"].get<double>();
  return begin >= outer_begin - kRounding && end <= outer_end + kRounding;
}

int64_t arg(const json& event, const char* name) {
  const json& args = event["args"];
  EXPECT_TRUE(args.contains(name)) << event.dump();
  return args.contains(name) ? args[name].get<int64_t>() : -1;
}

TEST(Trace, TrainingStepsWriteEveryKindOfEvent) {
  const TracedRun run = traced_run(temp_path("trace.json"));
  const json& trace = run.trace;
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["otherData"]["dropped_events"], 0);

  std::map<int, std::string> thread_names;
  std::vector<json> events;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      ASSERT_EQ(e["name"], "thread_name") << e.dump();
      thread_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    events.push_back(e);
  }
  std::map<std::string, int> per_category;
  std::multiset<std::string> calls;
  std::vector<json> call_events, task_events;
  for (const json& e : events) {
    ASSERT_TRUE(e["name"].is_string() && !e["name"].get<std::string>().empty()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0.0) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
    EXPECT_EQ(e["pid"].get<int>(), ::getpid());
    EXPECT_TRUE(thread_names.count(e["tid"].get<int>())) << "no thread_name for " << e.dump();
    const std::string category = e["cat"];
    ++per_category[category];
    if (category == "call") {
      calls.insert(e["name"].get<std::string>());
      call_events.push_back(e);
    }
    if (category == "task") task_events.push_back(e);
  }
  for (const char* category : {"call", "engine", "task", "gemm", "fused", "copy", "kernel", "optimizer"})
    EXPECT_GT(per_category[category], 0) << "no event of category " << category;
  EXPECT_EQ(calls.count("Engine::train_step"), 2u);
  EXPECT_EQ(calls.count("Engine::infer"), 1u);
  EXPECT_EQ(per_category["optimizer"], 2);

  for (const json& e : events) {
    const std::string category = e["cat"];
    if (category == "call") continue;
    // Inside one of the engine's calls (on whichever thread ran it).
    EXPECT_TRUE(std::any_of(call_events.begin(), call_events.end(), [&](const json& c) { return within(e, c); }))
        << "outside every call: " << e.dump();
    if (category == "engine" || category == "block") continue;
    EXPECT_GT(arg(e, "rows"), 0) << e.dump();
    if (category != "task") {
      EXPECT_GT(arg(e, "bytes"), 0) << e.dump();
    }
    if (category == "optimizer") continue;
    ASSERT_TRUE(e["args"].contains("vertex_type")) << e.dump();
    EXPECT_TRUE(run.type_names.count(e["args"]["vertex_type"].get<std::string>())) << e.dump();
    // A step of a task runs inside that task's event, on its thread.
    const int64_t task = e["args"].value("task", int64_t(-1));
    if (category != "task" && task >= 0) {
      EXPECT_TRUE(std::any_of(task_events.begin(), task_events.end(),
                              [&](const json& t) {
                                return t["args"]["task"] == task && t["tid"] == e["tid"] && within(e, t);
                              }))
          << "not inside task " << task << ": " << e.dump();
    }
    const int64_t rows = arg(e, "rows");
    if (category == "gemm") {
      const int64_t m = arg(e, "M"), n = arg(e, "N"), k = arg(e, "K"), products = arg(e, "products");
      EXPECT_GT(m, 0);
      EXPECT_GT(n, 0);
      EXPECT_GT(k, 0);
      EXPECT_GE(products, 1);
      EXPECT_EQ(arg(e, "bytes"), (m * k + k * n + m * n) * 4 * products) << e.dump();
    }
    if (category == "copy" && (e["name"] == "Gather" || e["name"] == "Pull" || e["name"] == "PullEmbedding")) {
      EXPECT_EQ(arg(e, "bytes"), rows * arg(e, "cols") * 4) << e.dump();
    }
    if (category == "fused" || category == "kernel") {
      const int64_t row_bytes = rows * arg(e, "cols") * 4;
      ASSERT_GT(row_bytes, 0) << e.dump();
      EXPECT_EQ(arg(e, "bytes") % row_bytes, 0) << e.dump();
    }
  }
  EXPECT_TRUE(std::any_of(thread_names.begin(), thread_names.end(),
                          [](const auto& entry) { return entry.second == "vjit caller"; }));
}

TEST(Trace, FlushWritesTheEventsSoFar) {
  const std::string path = temp_path("flush.json");
  models::Bundle bundle = traced_model();
  Options options = Options::defaults();
  options.trace_path = path;
  Engine engine(*bundle.program, options);
  EXPECT_EQ(load_json(path)["traceEvents"].size(), 0u);  // written at construction: the path is checked
  Adam adam(1e-3f);
  engine.train_step(models::make_batch(bundle.train, range(0, 4)), adam);
  engine.flush_trace();
  int steps = 0;
  const json flushed = load_json(path);
  for (const json& e : flushed["traceEvents"]) steps += e["name"] == "Engine::train_step";
  EXPECT_EQ(steps, 1);
  std::filesystem::remove(path);
}

TEST(Trace, FlushWithoutATraceIsAUserError) {
  models::Bundle bundle = traced_model();
  Engine engine(*bundle.program, Options::defaults());
  EXPECT_NE(test_util::user_error_of([&] { engine.flush_trace(); }).find("tracing is off"), std::string::npos);
}

// A path that cannot be written fails when the engine is built, naming the
// file, instead of losing the trace when the engine is destroyed.
TEST(Trace, UnwritablePathIsAUserErrorAtConstruction) {
  models::Bundle bundle = traced_model();
  Options options = Options::defaults();
  options.trace_path = "/nonexistent-vjit-dir/sub/trace.json";
  const std::string message = test_util::user_error_of([&] { Engine engine(*bundle.program, options); });
  EXPECT_NE(message.find("/nonexistent-vjit-dir/sub/trace.json"), std::string::npos) << message;
  EXPECT_NE(message.find("VJIT_TRACE"), std::string::npos) << message;
}

TEST(Trace, OptionComesFromTheEnvironment) {
  setenv("VJIT_TRACE", "/tmp/from-env.json", 1);
  const Options options = Options::from_env();
  unsetenv("VJIT_TRACE");
  EXPECT_EQ(options.trace_path, "/tmp/from-env.json");
  EXPECT_NE(options.describe().find("trace=/tmp/from-env.json"), std::string::npos);
}

// VJIT_PERF_MAP: after a training step every JIT kernel the engine runs is a
// line "<start hex> <size hex> vjit_<name>" of /tmp/perf-<pid>.map, kernels
// built earlier in the process without the option included.
TEST(PerfMap, EngineNamesEveryKernelItRuns) {
  if (!codegen::cpu_has(codegen::Isa::Avx2))
    GTEST_SKIP() << "this CPU lacks avx2: the fused kernels are scalar reference code, not JIT code to name";
  models::Bundle bundle = traced_model();
  {
    Engine warm(*bundle.program, Options::defaults());  // builds (and caches) kernels without the map
    warm.infer(models::make_batch(bundle.train, range(0, 4)));
  }
  const std::string map_path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::filesystem::remove(map_path);
  const std::string trace_path = temp_path("perf_map_trace.json");
  Options options = Options::defaults();
  options.perf_map = true;
  options.trace_path = trace_path;
  {
    Engine engine(*bundle.program, options);
    Adam adam(1e-3f);
    engine.train_step(models::make_batch(bundle.train, range(0, 16)), adam);
  }
  std::set<std::string> fused_names;
  const json trace = load_json(trace_path);
  for (const json& e : trace["traceEvents"])
    if (e.value("cat", "") == "fused") fused_names.insert(e["name"].get<std::string>());
  std::filesystem::remove(trace_path);
  ASSERT_FALSE(fused_names.empty());

  std::ifstream in(map_path);
  ASSERT_TRUE(in.good()) << map_path << " was not written";
  const std::regex line_format("([0-9a-f]+) ([0-9a-f]+) (vjit_[A-Za-z0-9_.]+)");
  std::set<uint64_t> starts;
  std::set<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, line_format)) << "malformed line: " << line;
    EXPECT_TRUE(starts.insert(std::stoull(match[1], nullptr, 16)).second) << "address named twice: " << line;
    EXPECT_GT(std::stoull(match[2], nullptr, 16), 0u) << line;
    names.insert(match[3]);
  }
  std::filesystem::remove(map_path);
  for (const std::string& name : fused_names) EXPECT_TRUE(names.count(name)) << name << " is not in the perf map";
}

// VJIT_PROFILE: the table at destruction, with phase totals that add up.
TEST(Profile, SummaryTableAtDestruction) {
  models::Bundle bundle = traced_model();
  Options options = Options::defaults();
  options.profile = true;
  EngineStats stats;
  ::testing::internal::CaptureStderr();
  {
    Engine engine(*bundle.program, options);
    Adam adam(1e-3f);
    for (int step = 0; step < 3; ++step) engine.train_step(models::make_batch(bundle.train, range(0, 16)), adam);
    engine.infer(models::make_batch(bundle.train, range(16, 24)));
    stats = engine.stats();
  }
  const std::string table = ::testing::internal::GetCapturedStderr();

  // The engine's own counters: every phase non-negative, the phases within the wall time.
  for (double seconds : {stats.schedule_s, stats.plan_s, stats.forward_s, stats.backward_s, stats.optimizer_s,
                         stats.gemm_s, stats.elementwise_s, stats.copy_s})
    EXPECT_GE(seconds, 0.0);
  EXPECT_GT(stats.call_s, 0.0);
  EXPECT_LE(stats.schedule_s + stats.plan_s + stats.forward_s + stats.backward_s + stats.optimizer_s, stats.call_s);
  EXPECT_LE(stats.gemm_s + stats.elementwise_s + stats.copy_s, stats.forward_s + stats.backward_s);
  EXPECT_GE(stats.tasks, stats.lower_bound);
  EXPECT_GT(stats.lower_bound, 0);  // VJIT_PROFILE tracks it

  // The printed table says the same.
  for (const char* part : {"phases:", "top kernels by time", "lower bound", "kernel cache:", "FSM policy cache:"})
    EXPECT_NE(table.find(part), std::string::npos) << "no '" << part << "' in:\n" << table;
  std::map<std::string, double> phase_ms;
  double wall_ms = -1;
  std::istringstream lines(table);
  std::string line;
  const std::regex phase_line(R"(\[vjit profile\] phase (\S+) +([0-9.]+) ms +([0-9.]+)%.*)");
  const std::regex wall_line(R"(\[vjit profile\] wall ([0-9.]+) ms .*)");
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, phase_line)) phase_ms[match[1]] = std::stod(match[2]);
    if (std::regex_match(line, match, wall_line)) wall_ms = std::stod(match[1]);
  }
  ASSERT_GT(wall_ms, 0) << table;
  for (const char* phase : {"schedule+plan", "forward", "backward", "optimizer", "gemm", "elementwise", "copy"})
    ASSERT_TRUE(phase_ms.count(phase)) << "no phase " << phase << " in:\n" << table;
  constexpr double kPrinted = 0.005;  // three decimals per printed value
  EXPECT_LE(phase_ms["schedule+plan"] + phase_ms["forward"] + phase_ms["backward"] + phase_ms["optimizer"],
            wall_ms + kPrinted);
  EXPECT_LE(phase_ms["gemm"] + phase_ms["elementwise"] + phase_ms["copy"],
            phase_ms["forward"] + phase_ms["backward"] + kPrinted);
}

TEST(Profile, NothingPrintedWhenOff) {
  models::Bundle bundle = traced_model();
  ::testing::internal::CaptureStderr();
  {
    Engine engine(*bundle.program, Options::defaults());
    engine.infer(models::make_batch(bundle.train, range(0, 4)));
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("[vjit profile]"), std::string::npos);
}

TEST(Primitives, EveryKindHasANameOfItsOwn) {
  std::set<std::string_view> names;
  for (int k = 0; k < kPrimitiveKinds; ++k) {
    const std::string_view name = primitive_name(Primitive(k));
    EXPECT_NE(name, "?") << "kind " << k;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
  }
}

// What VJIT_LOG=primitives printed: per call, the count its first line gave
// and the lines listed under it.
struct LoggedCall {
  std::string call;
  int64_t said = 0, listed = 0;
  std::map<std::string, int64_t> listed_by_kind;
};

std::vector<LoggedCall> parse_primitive_log(const std::string& text) {
  std::vector<LoggedCall> calls;
  const std::regex header(R"(\[vjit primitives\] (Engine::\w+): (\d+)(, .*)?)");
  const std::regex entry(R"(\[vjit primitives\]   \d+ (forward|backward) (\w+)( type \S+)?( task \d+)?( rows \d+)?: .+)");
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, header)) {
      calls.push_back({match[1], std::stoll(match[2]), 0, {}});
    } else if (std::regex_match(line, match, entry)) {
      EXPECT_FALSE(calls.empty()) << "an entry before any call: " << line;
      if (calls.empty()) continue;
      ++calls.back().listed;
      ++calls.back().listed_by_kind[match[2]];
    } else {
      ADD_FAILURE() << "not a line of the primitive log: " << line;
    }
  }
  return calls;
}

TEST(Primitives, EachCallListsWhatTheStatsCount) {
  models::Bundle bundle = traced_model();
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Primitives;
  options.threads = 2;
  EngineStats stats;
  ::testing::internal::CaptureStderr();
  {
    Engine engine(*bundle.program, options);
    Adam adam(1e-3f);
    for (int step = 0; step < 2; ++step) engine.train_step(models::make_batch(bundle.train, range(0, 16)), adam);
    engine.infer(models::make_batch(bundle.train, range(16, 24)));
    stats = engine.stats();
  }
  const std::vector<LoggedCall> calls = parse_primitive_log(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].call, "Engine::train_step");
  EXPECT_EQ(calls[2].call, "Engine::infer");
  int64_t total = 0;
  std::map<std::string, int64_t> by_kind;
  for (const LoggedCall& c : calls) {
    EXPECT_EQ(c.said, c.listed) << c.call;
    total += c.listed;
    for (const auto& [kind, n] : c.listed_by_kind) by_kind[kind] += n;
  }
  EXPECT_EQ(total, stats.primitives.total());
  for (int k = 0; k < kPrimitiveKinds; ++k)
    EXPECT_EQ(by_kind[std::string(primitive_name(Primitive(k)))], stats.primitives.count[size_t(k)])
        << primitive_name(Primitive(k));
  // The same batch, the same primitives: the two training steps agree.
  EXPECT_EQ(calls[0].listed_by_kind, calls[1].listed_by_kind);
  // Every GEMM the executor counts is a primitive or in one batched with
  // another (the Tree-LSTM has no per-vertex products; its batched GEMMs are
  // pairs: U_f1·h1 and U_f2·h2, and the children's dh).
  EXPECT_GT(stats.primitives[Primitive::GemmBatched], 0);
  EXPECT_EQ(stats.primitives[Primitive::Gemm] + 2 * stats.primitives[Primitive::GemmBatched], stats.gemm_calls);
  EXPECT_EQ(stats.primitives[Primitive::OptimizerStep], 2);
  EXPECT_EQ(calls[2].listed_by_kind.count("optimizer_step"), 0u);
  EXPECT_GT(stats.primitives[Primitive::Fused], 0);
  EXPECT_GT(stats.primitives[Primitive::SoftmaxCE], 0);
}

// Per task of the Tree-LSTM's internal cell (a tree level), the kinds of
// the primitives listed for it, forward and backward.
using TaskKinds = std::map<std::pair<std::string, int>, std::map<std::string, int>>;
TaskKinds internal_task_kinds(const std::string& log) {
  const std::regex entry(R"(\[vjit primitives\]   \d+ (forward|backward) (\w+) type internal task (\d+) rows \d+: .+)");
  TaskKinds kinds;
  std::istringstream lines(log);
  std::string line;
  std::smatch match;
  while (std::getline(lines, line))
    if (std::regex_match(line, match, entry)) ++kinds[{match[1], std::stoi(match[3])}][match[2]];
  return kinds;
}

// A level of the Tree-LSTM is six primitives, from the plan's structure:
// forward one batched GEMM (U_f1·h1 and U_f2·h2), U_iou·[h1; h2] + b_iou,
// the fused kernel; backward the fused kernel, U_iouᵀ·diou, and one batched
// GEMM writing each child's dh = U_fᵀ·df + its columns of U_iouᵀ·diou (the
// add is the GEMMs' epilogue, written through the children's row table).
// Without batching the same GEMMs run one primitive each, in the same order,
// so the loss and gradients are the same bit for bit.
TEST(Primitives, TreeLstmLevelIsSixPrimitives) {
  models::Bundle bundle = traced_model();
  const GraphBatch batch = models::make_batch(bundle.train, range(0, 16));
  struct Run {
    TaskKinds kinds;
    double loss = 0;
    std::vector<std::vector<float>> gradients;
  };
  auto run = [&](bool batch_gemms) {
    Options options = Options::defaults();
    options.log = vjit::Options::Log::Primitives;
    options.tuning.batch_gemms = vjit::to_lever(batch_gemms);
    options.tuning.pretranspose = vjit::Lever::Off;  // no weight copy at a pass's first product
    Engine engine(*bundle.program, options);
    Run r;
    ::testing::internal::CaptureStderr();
    r.loss = engine.forward(batch);
    engine.backward();
    r.kinds = internal_task_kinds(::testing::internal::GetCapturedStderr());
    r.gradients = engine.gradients();
    return r;
  };
  const Run batched = run(true), alone = run(false);
  ASSERT_GT(batched.kinds.size(), 4u);
  const std::map<std::string, int> forward{{"gemm_batched", 1}, {"gemm", 1}, {"fused", 1}};
  const std::map<std::string, int> backward{{"fused", 1}, {"gemm", 1}, {"gemm_batched", 1}};
  for (const auto& [task, kinds] : batched.kinds)
    EXPECT_EQ(kinds, task.first == "forward" ? forward : backward) << task.first << " task " << task.second;
  ASSERT_EQ(alone.kinds.size(), batched.kinds.size());
  for (const auto& [task, kinds] : alone.kinds)
    EXPECT_EQ(kinds, (std::map<std::string, int>{{"gemm", 3}, {"fused", 1}}))
        << task.first << " task " << task.second;
  EXPECT_EQ(batched.loss, alone.loss);
  EXPECT_EQ(batched.gradients, alone.gradients);
}

// A gather the layout reads in place, or through row pointers, runs no
// primitive; copied, it is one.
TEST(Primitives, GathersReadInPlaceRunNone) {
  models::Bundle bundle = traced_model();
  auto move_rows = [&](bool in_place) {
    Options options = Options::defaults();
    options.tuning.row_placement = in_place ? Options::RowPlacement::Tables : Options::RowPlacement::Copy;
    Engine engine(*bundle.program, options);
    Adam adam(1e-3f);
    engine.train_step(models::make_batch(bundle.train, range(0, 16)), adam);
    return engine.stats().primitives[Primitive::MoveRows] + engine.stats().primitives[Primitive::AddRows];
  };
  EXPECT_LT(move_rows(true), move_rows(false));
}

// MV-RNN multiplies a matrix per vertex: those products are their own kind.
TEST(Primitives, PerVertexProductsAreTheirOwnKind) {
  models::Config config;
  config.hidden = 8;
  config.train_samples = 8;
  config.test_samples = 0;
  models::Bundle bundle = models::make_model("mv_rnn", config);
  Engine engine(*bundle.program, Options::defaults());
  Adam adam(1e-3f);
  engine.train_step(models::make_batch(bundle.train, range(0, 8)), adam);
  EXPECT_GT(engine.stats().primitives[Primitive::VertexProducts], 0);
  EXPECT_GT(engine.stats().primitives[Primitive::Gemm], 0);
}

}  // namespace
}  // namespace vjit
