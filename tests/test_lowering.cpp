// Lowering (jit/pipeline.cpp) end to end: the pass list and what VJIT_LOG=passes
// prints of it, matmul merging's effect on the GEMMs an Engine runs, the
// VJIT_LOG=schedule and VJIT_LOG=kernels lines, and the reference kernel taking
// over a group the JIT refuses. Equality of every model with the reference
// interpreter, merging on and off, is in test_engine.cpp.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "codegen/isa.h"
#include "jit/engine_access.h"
#include "jit/kernel_cache.h"
#include "tests/engine_check.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

constexpr double kTolerance = 1e-4;

models::Config small_config() { return testing::small_config(32); }

GraphBatch first_samples(const models::Bundle& bundle, int n) {
  std::vector<int> indices;
  for (int i = 0; i < n; ++i) indices.push_back(i);
  return models::make_batch(bundle.train, indices);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What VJIT_LOG=passes printed after the pass whose header is `header`, up to
// the next header.
std::string section(const std::string& log, const std::string& header) {
  size_t begin = log.find(header + "\n");
  if (begin == std::string::npos) return "";
  begin += header.size() + 1;
  size_t end = log.find("[vjit] after ", begin);
  return log.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// --- the pass list ---

// The passes of F and ∂F in the order they run. With row tables
// (VJIT_ROW_PLACEMENT=tables, the CPU's auto) F's kernels are compiled last,
// once every type's F is planned and what its kernels forward is known;
// below that level, in their place.
std::string pass_log(vjit::Options::RowPlacement placement) {
  models::Bundle bundle = models::make_model("var_lstm_gates", small_config());
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Passes;
  options.tuning.row_placement = placement;
  ::testing::internal::CaptureStderr();
  Engine engine(*bundle.program, options);
  return ::testing::internal::GetCapturedStderr();
}

void expect_passes_in_order(const std::string& log, const std::vector<std::string>& expected) {
  size_t at = 0;
  for (const std::string& pass : expected) {
    size_t found = log.find("[vjit] after " + pass + "\n", at);
    ASSERT_NE(found, std::string::npos) << "no '" << pass << "' after offset " << at << " in\n" << log;
    at = found + 1;
  }
}

TEST(PassList, LogsTheIrAfterEachPassInOrder) {
  const std::vector<std::string> ir_passes = {
      "merge_matmuls: cell (forward)",      "simplify: cell (forward)",
      "gather_slices: cell (forward)",      "differentiate: cell (backward)",
      "join_gather_grads: cell (backward)", "simplify_slices: cell (backward)",
      "simplify: cell (backward)"};
  const std::vector<std::string> backward = {
      "fold_outer_products: cell (backward)", "classify_phases: cell (backward)",
      "sink_elementwise_into_core: cell (backward)", "find_fusion_groups: cell (backward)",
      "compile_kernels: cell (backward)",   "fold_bias_adds: cell (backward)",
      "order_steps: cell (backward)"};
  const std::vector<std::string> planned = {
      "fold_outer_products: cell (forward)", "classify_phases: cell (forward)",
      "sink_elementwise_into_core: cell (forward)", "find_fusion_groups: cell (forward)"};
  auto concat = [](std::initializer_list<std::vector<std::string>> parts) {
    std::vector<std::string> all;
    for (const std::vector<std::string>& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  const std::string in_place = pass_log(vjit::Options::RowPlacement::Slices);
  expect_passes_in_order(in_place, concat({ir_passes, planned,
                                           {"compile_kernels: cell (forward)", "fold_bias_adds: cell (forward)",
                                            "order_steps: cell (forward)"},
                                           backward}));
  const std::string last = pass_log(vjit::Options::RowPlacement::Tables);
  expect_passes_in_order(last, concat({ir_passes, planned,
                                       {"fold_bias_adds: cell (forward)", "order_steps: cell (forward)",
                                        "compile_kernels: cell (forward)"},
                                       backward}));
  // The forward function keeps Program's value ids only where nothing changed:
  // merging changed it, so its IR is printed, not "(unchanged)".
  EXPECT_EQ(section(last, "[vjit] after merge_matmuls: cell (forward)").find("(unchanged)"), std::string::npos);
}

// The four gate products W_k·x become one, and so do the four U_k·h: three
// matmuls (with W_out·h) where Program's F has nine.
TEST(MergeMatmuls, IrAfterThePassShowsOneMatmulWhereThereWereFour) {
  models::Bundle bundle = models::make_model("var_lstm_gates", small_config());
  const std::string program_ir = ir::to_string(bundle.program->forward(0));
  EXPECT_EQ(count(program_ir, "= matmul("), 9) << program_ir;
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Passes;
  ::testing::internal::CaptureStderr();
  { Engine engine(*bundle.program, options); }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string merged = section(log, "[vjit] after merge_matmuls: cell (forward)");
  EXPECT_EQ(count(merged, "= matmul("), 3) << merged;
  EXPECT_EQ(count(merged, "= concat(") - count(program_ir, "= concat("), 2) << "the stacked W and U: " << merged;
  EXPECT_EQ(count(merged, "[32,6] uniform"), 1) << "W_i..W_u stacked: " << merged;
  EXPECT_EQ(count(merged, "[32,8] uniform"), 1) << "U_i..U_u stacked: " << merged;

  options.tuning.merge_matmuls = false;
  ::testing::internal::CaptureStderr();
  { Engine engine(*bundle.program, options); }
  const std::string unmerged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(section(unmerged, "[vjit] after merge_matmuls: cell (forward)").find("off"), std::string::npos);
  EXPECT_EQ(section(unmerged, "[vjit] after simplify: cell (forward)"), "(unchanged)\n")
      << "simplify changes nothing of Program's F";
}

// Per task the four U_k·h are one GEMM; once per batch (eager) so are the four
// W_k·x. Each weight gradient stays one GEMM of its own.
TEST(MergeMatmuls, ForwardGemmsPerTaskDrop) {
  models::Bundle bundle = models::make_model("var_lstm_gates", small_config());
  GraphBatch batch = first_samples(bundle, 16);
  auto run = [&](bool merge) {
    Options options = Options::defaults();
    options.tuning.merge_matmuls = merge;
    Engine engine(*bundle.program, options);
    engine.infer(batch);
    EngineStats forward = engine.stats();
    engine.reset_stats();
    engine.forward(batch);
    engine.backward();
    return std::tuple{forward, engine.stats(), jit::internal_stats(engine)};
  };
  auto [merged, merged_train, merged_internal] = run(true);
  auto [separate, separate_train, separate_internal] = run(false);
  ASSERT_EQ(merged.tasks, separate.tasks);
  ASSERT_GT(merged.tasks, 2);
  EXPECT_EQ(separate.gemm_calls - merged.gemm_calls, 3 * merged.tasks + 3)
      << "merged " << merged.gemm_calls << ", separate " << separate.gemm_calls << ", tasks " << merged.tasks;
  EXPECT_EQ(merged_internal.param_grad_gemms, separate_internal.param_grad_gemms);
  EXPECT_LT(merged_train.gemm_calls, separate_train.gemm_calls);
}

// An engine with the GEMM epilogue on or off, and the pass log
// (VJIT_LOG=passes) its lowering printed.
std::pair<std::string, std::unique_ptr<Engine>> engine_with_pass_log(const Program& program, bool epilogue) {
  Options options = Options::defaults();
  options.tuning.epilogue = epilogue;
  options.log = vjit::Options::Log::Passes;
  ::testing::internal::CaptureStderr();
  auto engine = std::make_unique<Engine>(program, options);
  return {::testing::internal::GetCapturedStderr(), std::move(engine)};
}

// The Tree-LSTM's gate product W·[h_l; h_r] + b: the GEMM adds the bias
// itself (its rows start as b), one kernel less per task, same results (the
// engine tests check every model both ways against the reference).
TEST(GemmEpilogue, TheBiasAddFollowingAProductIsDoneByTheGemm) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  GraphBatch batch = first_samples(bundle, 16);
  auto run = [&](bool epilogue) {
    auto [log, engine] = engine_with_pass_log(*bundle.program, epilogue);
    engine->infer(batch);
    return std::pair{log, engine->stats()};
  };
  auto [on_log, on] = run(true);
  auto [off_log, off] = run(false);
  const std::string folded = section(on_log, "[vjit] after fold_bias_adds: internal (forward)");
  EXPECT_EQ(count(folded, "= matmul("), 1) << folded;
  EXPECT_NE(section(off_log, "[vjit] after fold_bias_adds: internal (forward)").find("off"), std::string::npos);
  ASSERT_EQ(on.tasks, off.tasks);
  // One step less per internal task and once for the leaves' eager product.
  EXPECT_LT(on.kernels, off.kernels);
  EXPECT_EQ(on.gemm_calls, off.gemm_calls);
}

// MV-RNN's weight gradient Σ_r G_r C_rᵀ of per-vertex matrices: the
// ParamGrad accumulates the products itself, none is written to a buffer.
TEST(FoldedProducts, PerVertexWeightGradientProductsAreAccumulatedByTheParamGrad) {
  models::Bundle bundle = models::make_model("mv_rnn", small_config());
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Passes;
  ::testing::internal::CaptureStderr();
  { Engine engine(*bundle.program, options); }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string folded = section(log, "[vjit] after fold_outer_products: internal (backward)");
  EXPECT_GE(count(folded, "= matmul("), 1) << folded;
  EXPECT_GE(count(folded, "= outer("), 1) << folded;
}

// MV-RNN's matrix gradients dA = slice(W_Mᵀ·dP) + outer(d(A·b), b): the add
// takes the outer product in its own pass (x + u·vᵀ), so the outer product is
// never written; and its rows of W_Mᵀ·dP, which it computes itself, so that
// product is never written whole either. Fewer kernels per task; the same
// training step as without the folds (and as the reference: the engine tests
// run every model with the epilogue on and off).
TEST(GemmEpilogue, AnOuterProductAddedToAMatrixIsTakenByTheAdd) {
  models::Bundle bundle = models::make_model("mv_rnn", small_config());
  GraphBatch batch = first_samples(bundle, 8);
  auto run = [&](bool epilogue) {
    auto [log, engine] = engine_with_pass_log(*bundle.program, epilogue);
    SGD sgd(0.5f);
    engine->train_step(batch, sgd);
    return std::tuple{log, engine->stats(), bundle.program->model()};
  };
  Model start = bundle.program->model();
  auto [on_log, on, on_model] = run(true);
  bundle.program->model() = start;
  auto [off_log, off, off_model] = run(false);
  const std::string folded = section(on_log, "[vjit] after fold_bias_adds: internal (backward)");
  EXPECT_EQ(count(folded, "= outer("), 2) << folded;
  EXPECT_EQ(count(folded, "= matmul("), 1) << folded;
  ASSERT_EQ(on.tasks, off.tasks);
  EXPECT_LT(on.kernels, off.kernels);
  for (int p = 0; p < start.size(); ++p) {
    const std::vector<float>& a = on_model.param(p).value;
    const std::vector<float>& b = off_model.param(p).value;
    ASSERT_EQ(a.size(), b.size());
    double moved = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      moved = std::max(moved, double(std::abs(a[i] - start.param(p).value[i])));
      diff = std::max(diff, double(std::abs(a[i] - b[i])));
    }
    EXPECT_LE(diff, 1e-5) << "parameter " << p;
    if (p == 0) {
      EXPECT_GT(moved, 0.0) << "the step changed nothing: the comparison would be empty";
    }
  }
}

// VJIT_PROFILE: when the engine goes, it names the costliest steps of the
// plans (pass, type, phase, op or fused kernel) with their time and calls.
TEST(StepProfile, NamesTheCostliestStepsOfEachPassAndType) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Options options = Options::defaults();
  options.profile = true;
  GraphBatch batch = first_samples(bundle, 8);
  ::testing::internal::CaptureStderr();
  {
    Engine engine(*bundle.program, options);
    SGD sgd(0.1f);
    engine.train_step(batch, sgd);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("top kernels by time"), std::string::npos) << log;
  EXPECT_NE(log.find("forward internal core"), std::string::npos) << log;
  EXPECT_NE(log.find("backward internal"), std::string::npos) << log;
  EXPECT_NE(log.find("MatMul"), std::string::npos) << log;
  EXPECT_NE(log.find("vjit_fused_"), std::string::npos) << "fused kernels are named: " << log;

  options.profile = false;
  ::testing::internal::CaptureStderr();
  {
    Engine engine(*bundle.program, options);
    engine.infer(batch);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// --- VJIT_LOG=schedule ---

TEST(ScheduleLog, PrintsEveryTaskWithTypeVerticesAndPolicy) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  GraphBatch batch = first_samples(bundle, 8);
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Schedule;
  options.policy = vjit::Options::Policy::Depth;
  Engine engine(*bundle.program, options);
  ::testing::internal::CaptureStderr();
  engine.forward(batch);
  const std::vector<std::string> lines = lines_of(::testing::internal::GetCapturedStderr());
  const int64_t tasks = engine.stats().tasks;
  ASSERT_EQ(int64_t(lines.size()), tasks + 1);
  EXPECT_EQ(lines[0].rfind("[vjit] schedule: policy=depth tasks=" + std::to_string(tasks), 0), 0u)
      << lines[0];
  int64_t vertices = 0;
  std::map<std::string, int> tasks_of_type;
  for (int64_t i = 0; i < tasks; ++i) {
    std::istringstream fields(lines[size_t(i + 1)]);
    std::string tag, task, index, type, times;
    int64_t n = 0;
    fields >> tag >> task >> index >> type >> times >> n;
    EXPECT_EQ(tag + " " + task + " " + index, "[vjit] task " + std::to_string(i) + ":") << lines[size_t(i + 1)];
    EXPECT_EQ(times, "x");
    EXPECT_GT(n, 0);
    vertices += n;
    ++tasks_of_type[type];
  }
  EXPECT_EQ(vertices, batch.num_vertices());
  EXPECT_EQ(tasks_of_type.size(), 2u);
  EXPECT_GT(tasks_of_type["leaf"], 0);
  EXPECT_GT(tasks_of_type["internal"], 0);
  // Nothing when the topic is off.
  Engine quiet(*bundle.program, Options::defaults());
  ::testing::internal::CaptureStderr();
  quiet.forward(batch);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// --- VJIT_LOG=kernels ---

TEST(KernelsLog, PrintsEachKernelCompiledOrFoundInTheCache) {
  models::Config config = small_config();
  config.hidden = 13;  // kernels no other test in this process has compiled
  models::Bundle bundle = models::make_model("tree_lstm", config);
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Kernels;
  auto kernel_lines = [&] {
    ::testing::internal::CaptureStderr();
    Engine engine(*bundle.program, options);
    std::vector<std::string> lines = lines_of(::testing::internal::GetCapturedStderr());
    // One kernel per group, and one more per group whose inference kernel
    // writes fewer outputs (VJIT_INFER_KERNELS; the Tree-LSTM skips none) or
    // that adds gradient parts into the children's rows
    // (VJIT_ROW_PLACEMENT=tables: dc_l and dc_r).
    const CompileInfo& info = engine.compile_info();
    EXPECT_GT(info.inference_kernels, 0);
    EXPECT_GT(info.accumulating_kernels, 0);
    EXPECT_EQ(int(lines.size()), info.fused_groups + info.inference_kernels + info.accumulating_kernels);
    return lines;
  };
  const std::string isa = codegen::isa_name(codegen::parse_isa("auto"));
  std::vector<std::string> first = kernel_lines();
  ASSERT_GT(first.size(), 1u);
  int compiled = 0;
  for (const std::string& line : first) {
    EXPECT_EQ(line.rfind("[vjit] kernel vjit_fused_" + isa + "_w", 0), 0u) << line;
    EXPECT_NE(line.find(" isa=" + isa + " code_bytes="), std::string::npos) << line;
    bool is_compiled = line.ends_with(" compiled");
    EXPECT_TRUE(is_compiled || line.ends_with(" cache hit")) << line;
    compiled += is_compiled;
    if (is_compiled && isa != "scalar") {
      EXPECT_EQ(line.find("code_bytes=0 "), std::string::npos) << line;
    }
  }
  EXPECT_GT(compiled, 0);
  for (const std::string& line : kernel_lines()) EXPECT_TRUE(line.ends_with(" cache hit")) << line;
}

// --- a group the JIT refuses ---

// Makes the global kernel cache refuse every JIT build while it lives.
class RefuseJitBuilds {
 public:
  RefuseJitBuilds() {
    jit::KernelCache::global().refuse_builds_for_testing([](const codegen::KernelSpec&) { return true; });
  }
  ~RefuseJitBuilds() { jit::KernelCache::global().refuse_builds_for_testing({}); }
};

TEST(JitRefusal, FallsBackToTheReferenceKernelLoggedOnce) {
  if (codegen::best_isa() == codegen::Isa::Scalar) GTEST_SKIP() << "no JIT ISA on this CPU: nothing to refuse";
  models::Config config = small_config();
  config.hidden = 11;  // kernels no other test in this process has compiled
  models::Bundle bundle = models::make_model("tree_lstm", config);
  GraphBatch batch = first_samples(bundle, 7);
  std::string log;
  {
    RefuseJitBuilds refuse;
    ::testing::internal::CaptureStderr();
    Engine engine(*bundle.program, Options::defaults());
    Engine again(*bundle.program, Options::defaults());  // retries the JIT: a failure is not cached
    log = ::testing::internal::GetCapturedStderr();
    ASSERT_GT(engine.compile_info().fused_groups, 1);
    testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance, "refused JIT");
    testing::expect_matches_reference(again, *bundle.program, batch, kTolerance, "refused JIT, second engine");
  }
  std::map<std::string, int> reports;
  for (const std::string& line : lines_of(log)) {
    ASSERT_EQ(line.rfind("[vjit] kernel vjit_fused_", 0), 0u) << line;
    EXPECT_NE(line.find("refused for testing"), std::string::npos) << line;
    ASSERT_TRUE(line.ends_with("; using the reference kernel")) << line;
    ++reports[line.substr(0, line.find(':'))];
  }
  EXPECT_GT(reports.size(), 1u) << log;
  for (const auto& [kernel, n] : reports) EXPECT_EQ(n, 1) << kernel << " reported " << n << " times";
  // The refused builds were not cached: now the JIT compiles them.
  Options options = Options::defaults();
  options.log = vjit::Options::Log::Kernels;
  ::testing::internal::CaptureStderr();
  Engine jit(*bundle.program, options);
  const std::string kernels = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(kernels.find("isa=scalar"), std::string::npos) << kernels;
  EXPECT_NE(kernels.find(" compiled"), std::string::npos) << kernels;
  testing::expect_matches_reference(jit, *bundle.program, batch, kTolerance, "JIT after the refusal");
}

}  // namespace
}  // namespace vjit
