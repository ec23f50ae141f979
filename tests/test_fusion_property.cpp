// Fusion, end to end: random elementwise expression DAGs written as vjit
// Programs, run by the Engine with fusion on for every ISA this CPU has
// (avx512, avx2, neon, scalar), must equal the double-precision reference
// interpreter — objective, pushed values and every parameter gradient within
// 1e-4 relative (tests/engine_check.h).
//
// Each case (fixed seed) is a two-type program over vectors of a random width
// W in 1..40:
//   leaf: x = pull(W) + P_leaf, then 0–4 random ops; scatters it.
//   node: gathers two children (leaves or nodes), applies a random DAG of
//         5–30 elementwise ops whose operands are earlier values, parameter
//         vectors [W], a scalar constant, or a per-vertex scalar (a sum);
//         pushes the result, adds sum(out · out) to the objective and scatters
//         tanh(out) to its parent.
// The ops are every elementwise op the Builder has; log and sqrt read
// x·x + 0.5 and div divides by y·y + 0.5, so no case divides by zero, and exp
// reads tanh(x), so nothing overflows. Samples are random binary trees.
//
// A random DAG can be ill-conditioned in float whatever the kernels do
// (cancellation); a case where the float reference interpreter itself is
// further than kTolerance / 10 from the double one is skipped and counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "jit/kernel_cache.h"
#include "tests/engine_check.h"

namespace vjit {
namespace {

constexpr double kTolerance = 1e-4;
constexpr int kCases = 240;

struct DagCase {
  std::unique_ptr<Model> model;
  std::unique_ptr<Program> program;
  GraphBatch batch;
  int width = 0;
  int node_ops = 0;
};

// The random expression DAG: `ops` ops over `values` (the DAG's values so far;
// each op appends its result), reading parameters too. Returns the last value.
Value random_dag(Builder& b, std::mt19937_64& rng, std::vector<Value> values, int ops,
                 const std::vector<Param>& vectors) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto real = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto pick = [&] {  // mostly one of the last few values
    const int n = int(values.size());
    return values[size_t(uniform(0, 9) < 7 ? std::max(0, n - 1 - uniform(0, 3)) : uniform(0, n - 1))];
  };
  auto positive = [&](Value x) { return b.add_scalar(b.mul(x, x), 0.5); };  // >= 0.5
  auto second = [&]() -> Arg {  // the other operand of a binary op
    switch (uniform(0, 7)) {
      case 0: return vectors[size_t(uniform(0, int(vectors.size()) - 1))];
      case 1: return b.constant(Shape::scalar(), real(-1, 1));
      case 2: return b.scale(b.sum(pick()), 0.1);  // one float per vertex
      default: return pick();
    }
  };
  for (int k = 0; k < ops; ++k) {
    Value x = pick();
    Value y;
    switch (uniform(0, 12)) {
      case 0: y = b.neg(x); break;
      case 1: y = b.sigmoid(x); break;
      case 2: y = b.tanh(x); break;
      case 3: y = b.relu(x); break;
      case 4: y = b.exp(b.tanh(x)); break;
      case 5: y = b.log(positive(x)); break;
      case 6: y = b.sqrt(positive(x)); break;
      case 7: y = b.scale(x, real(-1.5, 1.5)); break;
      case 8: y = b.add_scalar(x, real(-1, 1)); break;
      case 9: y = b.add(x, second()); break;
      case 10: y = b.sub(second(), x); break;
      case 11: y = b.mul(x, second()); break;
      default: {
        Arg numerator = second();
        y = b.div(numerator, positive(pick()));
        break;
      }
    }
    values.push_back(y);
  }
  return values.back();
}

DagCase make_case(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  DagCase c;
  c.width = uniform(1, 40);
  c.node_ops = uniform(5, 30);
  const int leaf_ops = uniform(0, 4);
  const int w = c.width;
  c.model = std::make_unique<Model>(seed + 1);
  Param p_leaf = c.model->add("P_leaf", Shape::vec(w), Init::Uniform, 0.5f);
  std::vector<Param> vectors;
  for (int i = 0; i < 3; ++i)
    vectors.push_back(c.model->add("P" + std::to_string(i), Shape::vec(w), Init::Uniform, 0.8f));
  c.program = std::make_unique<Program>(*c.model);
  // Both bodies draw from their own generator, seeded here, so building the
  // program does not depend on when the Program calls them.
  const uint64_t leaf_seed = rng(), node_seed = rng();
  const int leaf = c.program->add_type("leaf", [&](Builder& b) {
    std::mt19937_64 body_rng(leaf_seed);
    Value x = b.add(b.pull(w), p_leaf);
    b.scatter(leaf_ops > 0 ? b.tanh(random_dag(b, body_rng, {x}, leaf_ops, vectors)) : x);
  });
  const int node = c.program->add_type("node", [&](Builder& b) {
    std::mt19937_64 body_rng(node_seed);
    Value out = random_dag(b, body_rng, {b.gather(0, Shape::vec(w)), b.gather(1, Shape::vec(w))}, c.node_ops,
                           vectors);
    b.push(out);
    b.add_loss(b.sum(b.mul(out, out)));
    b.scatter(b.tanh(out));
  });
  const int samples = uniform(1, 4);
  for (int s = 0; s < samples; ++s) {
    Sample sample;
    std::vector<int> roots;
    const int leaves = uniform(2, 6);
    for (int l = 0; l < leaves; ++l) {
      const int v = sample.add_vertex(leaf);
      for (int i = 0; i < w; ++i)
        sample.vertices[size_t(v)].features.push_back(std::uniform_real_distribution<float>(-1, 1)(rng));
      roots.push_back(v);
    }
    while (roots.size() > 1) {  // join two random roots under a new node
      const size_t i = size_t(uniform(0, int(roots.size()) - 1));
      const int left = roots[i];
      roots.erase(roots.begin() + std::ptrdiff_t(i));
      const size_t j = size_t(uniform(0, int(roots.size()) - 1));
      const int right = roots[j];
      roots.erase(roots.begin() + std::ptrdiff_t(j));
      roots.push_back(sample.add_vertex(node, {left, right}));
    }
    c.batch.samples.push_back(std::move(sample));
  }
  return c;
}

RunOptions run_options() {
  RunOptions run;
  run.seed = 5;  // as expect_matches_reference runs it
  return run;
}

// The largest relative error of a float evaluation against the double one:
// objective, pushed values, parameter gradients (as engine_check.h measures).
double evaluation_error(const Evaluation<float>& got, const std::vector<std::vector<float>>& grads,
                        const Evaluation<double>& want) {
  double error = std::abs(got.objective - want.objective) / std::max(1.0, std::abs(want.objective));
  for (int s = 0; s < want.pushes.num_samples(); ++s)
    for (int v = 0; v < want.pushes.num_vertices(s); ++v)
      for (int k = 0; k < want.pushes.count(s, v); ++k)
        error = std::max(error, testing::tensor_error(got.pushes.at(s, v, k), want.pushes.at(s, v, k)));
  for (size_t p = 0; p < want.param_grads.size(); ++p)
    error = std::max(error, testing::tensor_error(grads[p], want.param_grads[p]));
  return error;
}

std::vector<std::string> isas_to_test() {
  std::vector<std::string> isas;
  for (codegen::Isa isa : {codegen::Isa::Avx512, codegen::Isa::Avx2, codegen::Isa::Neon, codegen::Isa::Scalar})
    if (codegen::cpu_has(isa)) isas.push_back(codegen::isa_name(isa));
  return isas;
}

TEST(FusionProperty, RandomDagsMatchTheReferenceOnEveryIsa) {
  const std::vector<std::string> isas = isas_to_test();
  for (const char* missing : {"avx512", "avx2"})
    if (std::find(isas.begin(), isas.end(), missing) == isas.end())
      std::printf("[fusion property] this CPU lacks %s: not tested\n", missing);
  int checked = 0, ill_conditioned = 0;
  int64_t kernels_requested = 0, jit_kernels = 0;
  std::vector<double> worst_error(isas.size(), 0.0);
  for (int n = 0; n < kCases; ++n) {
    DagCase c = make_case(1000 + uint64_t(n));
    const std::string what = "case " + std::to_string(n) + " (width " + std::to_string(c.width) + ", " +
                             std::to_string(c.node_ops) + " node ops)";
    const Evaluation<double> want =
        reference_evaluate(*c.program, parameter_values<double>(*c.model), c.batch, run_options());
    const Evaluation<float> in_float =
        reference_evaluate(*c.program, parameter_values<float>(*c.model), c.batch, run_options());
    if (evaluation_error(in_float, in_float.param_grads, want) > kTolerance / 10) {
      ++ill_conditioned;
      continue;
    }
    ++checked;
    for (const std::string& isa : isas) {
      Options options = Options::defaults();
      options.tuning.fusion = true;
      apply_flag(options, "isa", isa);
      options.threads = 1;
      const jit::KernelCacheCounters before = jit::KernelCache::global().counters();
      Engine engine(*c.program, options);
      const jit::KernelCacheCounters after = jit::KernelCache::global().counters();
      const int64_t requested = after.compiles + after.hits - before.compiles - before.hits;
      kernels_requested += requested;
      if (isa != "scalar") jit_kernels += requested;
      testing::expect_matches_reference(engine, *c.program, c.batch, kTolerance, what + " isa " + isa);
      double& worst = worst_error[size_t(&isa - isas.data())];
      worst = std::max(worst, evaluation_error(engine.last_result(), engine.gradients(), want));
    }
    if (HasFailure()) break;
  }
  std::printf("[fusion property] %d cases checked on %zu ISAs, %d skipped as ill-conditioned in float; "
              "%lld fused kernels requested from the cache (%lld JIT)\n",
              checked, isas.size(), ill_conditioned, static_cast<long long>(kernels_requested),
              static_cast<long long>(jit_kernels));
  for (size_t i = 0; i < isas.size(); ++i)
    std::printf("[fusion property] %s: largest relative error %.3g (tolerance %.0e)\n", isas[i].c_str(),
                worst_error[i], kTolerance);
  EXPECT_LT(ill_conditioned, kCases / 10);
  EXPECT_GE(checked, kCases - kCases / 10);
}

}  // namespace
}  // namespace vjit
