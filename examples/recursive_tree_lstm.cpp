// Models written as recursion (vjit/recursive.h) over the user's own structs:
//   1. the binary Tree-LSTM over `struct Tree { int word, label; unique_ptr<Tree> left, right; }`,
//      checked against the model zoo's hand-written tree_lstm (same seed, same
//      parameter names) and the reference interpreter, then trained with Adam;
//   2. the Child-Sum Tree-LSTM over `struct Phrase { int word, label; vector<unique_ptr<Phrase>> children; }`
//      (1-5 children per node, call_all, one forget gate per child), checked
//      likewise against the zoo's child_sum_tree_lstm and the reference, then trained;
//   3. a child-sum tree RNN over `struct NaryTree { ...; vector<NaryTree*> children; }`
//      (any number of children, call_sum), checked against a hand-written
//      vertex function, on trees and on DAGs whose nodes share children.
// Exits with 1 when a result differs or the loss does not go down (ctest runs it).
// Flags: --hidden N (default 32), --steps N (Adam steps, default 30).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "examples/models/recursive_models.h"

namespace {

using namespace vjit;
using vjit::examples::NaryForest;
using vjit::examples::NaryTree;
using vjit::examples::Phrase;
using vjit::examples::Tree;

int failures = 0;

// ‖a − b‖∞ / max(‖b‖∞, 1e-6).
template <typename A, typename B>
double relative_error(const A& a, const B& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

void check(bool ok, const std::string& what) {
  std::printf("  %-72s %s\n", what.c_str(), ok ? "ok" : "DIFFERS");
  if (!ok) ++failures;
}

// Objective, pushes and gradients of two runs over batches with the same vertices.
template <typename T>
void compare(const char* what, const Evaluation<float>& a, const std::vector<std::vector<float>>& grads_a,
             const Evaluation<T>& b, const std::vector<std::vector<T>>& grads_b, double tolerance) {
  double pushes = relative_error(a.pushes.values(), b.pushes.values());
  double grads = 0;
  for (size_t p = 0; p < grads_b.size(); ++p) grads = std::max(grads, relative_error(grads_a.at(p), grads_b[p]));
  double objective = std::abs(a.objective - b.objective) / std::max(1.0, std::abs(b.objective));
  char line[200];
  std::snprintf(line, sizeof line, "%s: loss %.6f vs %.6f, outputs %.1e, gradients %.1e", what, a.objective,
                double(b.objective), pushes, grads);
  check(objective <= tolerance && pushes <= tolerance && grads <= tolerance && grads_a.size() == grads_b.size(),
        line);
}

// One forward and backward; returns the engine's result and gradients.
std::pair<Evaluation<float>, std::vector<std::vector<float>>> run(Engine& engine, const GraphBatch& batch) {
  RunOptions options;
  options.training = false;  // same results on every path: no dropout
  engine.forward(batch, options);
  engine.backward();
  return {engine.last_result(), engine.gradients()};
}

bool same_vertices(const GraphBatch& a, const GraphBatch& b) {
  if (a.samples.size() != b.samples.size()) return false;
  for (size_t s = 0; s < a.samples.size(); ++s) {
    const auto &va = a.samples[s].vertices, &vb = b.samples[s].vertices;
    if (va.size() != vb.size()) return false;
    for (size_t v = 0; v < va.size(); ++v)
      if (va[v].type != vb[v].type || va[v].children != vb[v].children || va[v].token != vb[v].token ||
          va[v].label != vb[v].label)
        return false;
  }
  return true;
}

// Checks a recursive model against the zoo's hand-written one: the same
// parameters, graphs, loss, outputs and gradients, the same as the reference
// interpreter's; then trains it with Adam over batches of 32 trees.
template <typename Node>
void check_against_zoo(const models::Bundle& zoo, const Model& model, Program& program,
                       const Recursive<Node>& recursion, const std::vector<std::unique_ptr<Node>>& trees,
                       const std::string& zoo_name, uint64_t seed, int steps) {
  bool same_parameters = model.size() == zoo.model->size();
  for (int p = 0; same_parameters && p < model.size(); ++p)
    same_parameters = model.param(p).name == zoo.model->param(p).name && model.param(p).value == zoo.model->param(p).value;
  check(same_parameters, "same parameters as the zoo's " + zoo_name + " (seed " + std::to_string(seed) + ")");

  std::vector<const Node*> roots;
  for (int i = 0; i < 32; ++i) roots.push_back(trees[size_t(i)].get());
  GraphBatch batch = recursion.batch(roots);
  std::vector<int> indices(32);
  for (int i = 0; i < 32; ++i) indices[size_t(i)] = i;
  GraphBatch zoo_batch = models::make_batch(zoo.train, indices);
  check(same_vertices(batch, zoo_batch), "the walk makes the zoo's graphs: same vertices, children, tokens, labels");

  Engine engine(program), zoo_engine(*zoo.program);
  auto [result, grads] = run(engine, batch);
  auto [zoo_result, zoo_grads] = run(zoo_engine, zoo_batch);
  compare("recursive vs hand-written", result, grads, zoo_result, zoo_grads, 1e-5);
  RunOptions reference_options;
  reference_options.training = false;
  Evaluation<double> reference = reference_evaluate(program, parameter_values<double>(model), batch, reference_options);
  compare("recursive vs reference", result, grads, reference, reference.param_grads, 1e-4);

  Adam adam(0.01f);
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<const Node*> step_roots;
    for (int i = 0; i < 32; ++i) step_roots.push_back(trees[size_t((step * 32 + i) % trees.size())].get());
    double loss = engine.train_step(recursion.batch(step_roots), adam);
    if (step % 8 == 0 || step == steps - 1) std::printf("  step %2d: loss %.4f\n", step, loss);
    if (step < 8) first += loss;
    if (step >= steps - 8) last += loss;
  }
  check(last < first, "training: the loss of the last 8 steps is below the first 8's");
}

models::Config zoo_config(int hidden) {
  models::Config config;
  config.hidden = hidden;
  config.train_samples = 256;
  config.test_samples = 0;
  return config;
}

int vocab_of(const models::Bundle& zoo) { return zoo.model->param(zoo.model->find("embedding")).shape.dims[0]; }

void tree_lstm(int hidden, int steps) {
  std::printf("Tree-LSTM over struct Tree (hidden %d)\n", hidden);
  models::Config config = zoo_config(hidden);
  models::Bundle zoo = models::make_model("tree_lstm", config);  // the hand-written vertex functions
  std::vector<std::unique_ptr<Tree>> trees;
  for (const Sample& sample : zoo.train) trees.push_back(examples::tree_from_sample(sample));
  Model model(config.seed);
  examples::RecursiveTreeLstm recursive(model, vocab_of(zoo), hidden, config.embed_size());
  check_against_zoo(zoo, model, recursive.program, recursive.recursion, trees, "tree_lstm", config.seed, steps);
}

void child_sum_tree_lstm(int hidden, int steps) {
  std::printf("Child-Sum Tree-LSTM over struct Phrase, 1-5 children per node (hidden %d)\n", hidden);
  models::Config config = zoo_config(hidden);
  models::Bundle zoo = models::make_model("child_sum_tree_lstm", config);
  std::vector<std::unique_ptr<Phrase>> phrases;
  std::vector<const Phrase*> roots;
  for (const Sample& sample : zoo.train) {
    phrases.push_back(examples::phrase_from_sample(sample));
    roots.push_back(phrases.back().get());
  }
  const int max_children = examples::max_fan_in(roots);
  std::printf("  at most %d children per node\n", max_children);
  Model model(config.seed);
  examples::RecursiveChildSumTreeLstm recursive(model, vocab_of(zoo), hidden, config.embed_size(), max_children);
  check_against_zoo(zoo, model, recursive.program, recursive.recursion, phrases, "child_sum_tree_lstm", config.seed,
                    steps);
}

void child_sum_rnn(int hidden, const char* what, double share) {
  std::printf("child-sum tree RNN over struct NaryTree, %s (hidden %d)\n", what, hidden);
  const int features = 6, classes = 3;
  NaryForest forest = examples::random_nary_forest(16, 12, 4, features, classes, share, 7);
  Model model(3);
  examples::RecursiveChildSumRnn recursive(model, features, hidden, classes);
  GraphBatch batch = recursive.recursion.batch(forest.roots);

  // The hand-written vertex function on the same parameters.
  Program program(model);
  int node = program.add_type("node", [&](Builder& f) {
    f.scatter(recursive.rnn.cell(f, f.gather_sum(Shape::vec(hidden))));
  });
  GraphBatch hand_batch = vjit::examples::hand_built_batch(forest.roots, node);
  check(same_vertices(batch, hand_batch), "the walk makes one vertex per distinct node, children first");
  int64_t shared = 0;
  for (const Sample& s : batch.samples) {
    std::vector<int> parents(s.vertices.size());
    for (const Vertex& v : s.vertices)
      for (int c : v.children) ++parents[size_t(c)];
    for (int p : parents) shared += p > 1;
  }
  std::printf("  %lld vertices, %lld with several parents\n", (long long)batch.num_vertices(), (long long)shared);
  if (share > 0) check(shared > 0, "the DAG has nodes shared by several parents");

  Engine engine(recursive.program), hand_engine(program);
  auto [result, grads] = run(engine, batch);
  auto [hand_result, hand_grads] = run(hand_engine, hand_batch);
  compare("recursive vs hand-written", result, grads, hand_result, hand_grads, 1e-5);
  RunOptions reference_options;
  reference_options.training = false;
  Evaluation<double> reference =
      reference_evaluate(recursive.program, parameter_values<double>(model), batch, reference_options);
  compare("recursive vs reference", result, grads, reference, reference.param_grads, 1e-4);

  Adam adam(0.02f);
  double first = engine.train_step(batch, adam), last = first;
  for (int step = 1; step < 20; ++step) last = engine.train_step(batch, adam);
  std::printf("  loss %.4f -> %.4f over 20 Adam steps\n", first, last);
  check(last < first, "training: the loss goes down");
}

}  // namespace

int main(int argc, char** argv) {
  int hidden = 32, steps = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--hidden")) hidden = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "recursive_tree_lstm: unknown flag %s (flags: --hidden N, --steps N)\n", argv[i]);
      return 2;
    }
  }
  if (hidden < 1 || steps < 8) {
    std::fprintf(stderr, "recursive_tree_lstm: --hidden must be >= 1 and --steps >= 8\n");
    return 2;
  }
  try {
    tree_lstm(hidden, steps);
    child_sum_tree_lstm(hidden, steps);
    child_sum_rnn(hidden, "trees", 0.0);
    child_sum_rnn(hidden, "DAGs with shared children", 0.3);
  } catch (const vjit::Error& e) {
    std::fprintf(stderr, "recursive_tree_lstm: %s\n", e.what());
    return 1;
  }
  std::printf(failures ? "%d checks failed\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}
