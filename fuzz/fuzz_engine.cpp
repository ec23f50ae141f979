// Graph batches through the Engine, compared with the reference interpreter.
// The bytes decode into a GraphBatch for a tiny program of five vertex types
// (an embedding leaf, a feature leaf, a binary Tree-LSTM-like cell with
// dropout, a child-sum cell and a gather_all cell) and into one of a few
// engine configurations (policies, memory planners, optimisations on and off).
// The engine runs a training forward (and backward) or an inference; the
// double-precision reference interpreter runs the same. A UserError (a bad
// type, child, cycle, token, label or feature row) is expected, and must leave
// the engine able to run a good batch; a crash, a sanitizer report, another
// exception or a result beyond float tolerance of the reference is a finding.
//
// Decoding (fuzz/engine_seeds.py writes the seed corpus in this form):
//   byte 0: configuration, byte 1: run mode, byte 2: dropout seed,
//   byte 3: samples (1 + b % 3); per sample: vertices (1 + b % 10); per vertex:
//   a type byte, then the children the type takes (child bytes), a token, a
//   label and, for the feature leaf, kFeatures feature bytes.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "vjit/vjit.h"

namespace {

using vjit::fuzz::ByteReader;
using vjit::fuzz::finding;

constexpr int kHidden = 4;
constexpr int kVocab = 7;
constexpr int kClasses = 3;
constexpr int kFeatures = 3;
constexpr int kMaxChildren = 3;  // of the gather_all cell
// Relative error allowed against the double reference: float rounding over
// these tiny graphs stays near 1e-6.
constexpr double kTolerance = 1e-3;

enum Type { kLeaf, kFeatureLeaf, kBinary, kChildSum, kGatherAll, kNumTypes };

struct TinyProgram {
  vjit::Model model{/*seed=*/3};
  std::unique_ptr<vjit::Program> program;

  TinyProgram() {
    using vjit::Shape;
    const auto h = Shape::vec(kHidden);
    auto E = model.add("E", Shape::mat(kVocab, kHidden), vjit::Init::Uniform, 0.5f);
    auto W = model.add("W", Shape::mat(kHidden, 2 * kHidden));
    auto bias = model.add("b", h, vjit::Init::Uniform, 0.1f);
    auto U = model.add("U", Shape::mat(kHidden, kHidden));
    auto P = model.add("P", Shape::mat(kHidden, kFeatures));
    auto O = model.add("O", Shape::mat(kClasses, kHidden));
    program = std::make_unique<vjit::Program>(model);
    program->add_type("leaf", [&](vjit::Builder& f) {
      auto x = f.tanh(f.pull_embedding(E));
      f.add_loss(f.softmax_cross_entropy(f.matmul(O, x), f.label(kClasses)));
      f.scatter(x);
    });
    program->add_type("feature_leaf", [&](vjit::Builder& f) {
      auto x = f.relu(f.matmul(P, f.pull(kFeatures)));
      f.add_loss(f.squared_error(x, f.constant(h, 0.5)));
      f.push(x);
      f.scatter(x);
    });
    program->add_type("binary", [&](vjit::Builder& f) {
      auto children = f.concat({f.gather(0, h), f.gather(1, h)});
      auto gates = f.add(f.matmul(W, children), bias);
      auto x = f.dropout(f.mul(f.sigmoid(gates), f.tanh(gates)), 0.25);
      auto logits = f.matmul(O, x);
      f.add_loss(f.softmax_cross_entropy(logits, f.label(kClasses)));
      f.push(logits);
      f.scatter(x);
    });
    program->add_type("child_sum", [&](vjit::Builder& f) {
      auto sum = f.gather_sum(h);
      f.scatter(f.add(f.mul(f.sigmoid(f.matmul(U, sum)), sum), bias));
    });
    program->add_type("gather_all", [&](vjit::Builder& f) {
      auto rows = f.reshape(f.gather_all(kMaxChildren, h), Shape::vec(kMaxChildren * kHidden));
      auto x = f.tanh(f.sub(f.slice(rows, 0, kHidden), f.scale(f.slice(rows, kHidden, kHidden), 0.5)));
      f.push(f.sum_rows(f.gather_all(kMaxChildren, h)));
      f.scatter(x);
    });
  }
};

TinyProgram& tiny() {
  static TinyProgram instance;
  return instance;
}

// The engine configurations a fuzz input picks from: every policy but fsm
// (which learns on its first batch, so its results would depend on earlier
// inputs), every memory planner, each optimisation off in one of them.
vjit::Options configuration(int index) {
  vjit::Options o = vjit::Options::defaults();
  o.threads = 1;
  o.tuning.gemm = vjit::Options::Gemm::Reference;
  switch (index) {
    case 0: break;  // the defaults
    case 1: o.policy = vjit::Options::Policy::Depth; o.tuning.fusion = false; o.tuning.lazy = false; break;
    case 2: o.policy = vjit::Options::Policy::Frontier; o.tuning.memplan = vjit::Options::MemoryPlanner::PqTree; o.tuning.inplace_concat = false; o.tuning.epilogue = false; break;
    case 3: o.policy = vjit::Options::Policy::Ratio; o.tuning.memplan = vjit::Options::MemoryPlanner::Padded; o.tuning.merge_matmuls = false; o.tuning.fuse_across_phases = false; break;
    case 4: o.tuning.isa = vjit::Options::Isa::Scalar; o.tuning.pad_wide_rows = false; break;
    case 5: o.threads = 2; o.tuning.streaming = true; o.tuning.gemm = vjit::Options::Gemm::Auto; break;
    default: finding("no configuration " + std::to_string(index));
  }
  return o;
}
constexpr int kConfigurations = 6;

// One engine per configuration, built on first use: building compiles kernels,
// which costs far more than a run.
vjit::Engine& engine(int index) {
  static std::map<int, std::unique_ptr<vjit::Engine>> engines;
  auto& slot = engines[index];
  if (!slot) slot = std::make_unique<vjit::Engine>(*tiny().program, configuration(index));
  return *slot;
}

// Mostly an earlier vertex (a valid DAG); sometimes any index up to n, which
// gives forward edges, cycles, self-loops and one past the end.
int child_index(ByteReader& in, int vertex, int num_vertices) {
  const int b = in.byte();
  if (b % 8 == 7 || vertex == 0) return (b / 8) % (num_vertices + 1);
  return (b / 8) % vertex;
}

vjit::Vertex decode_vertex(ByteReader& in, int index, int num_vertices) {
  vjit::Vertex v;
  const int t = in.below(16);
  v.type = t == 15 ? kNumTypes : t % kNumTypes;  // 15: a type the program lacks
  int children = 0;
  switch (v.type) {
    case kBinary: children = 2; break;
    case kChildSum: children = in.below(4); break;
    case kGatherAll: children = in.below(kMaxChildren + 2); break;  // kMaxChildren + 1: too many
    default: children = in.below(16) == 0 ? 1 : 0;                   // a leaf with a child, now and then
  }
  for (int k = 0; k < children; ++k) v.children.push_back(child_index(in, index, num_vertices));
  v.token = in.below(kVocab + 2);  // kVocab: past the table
  if (v.token == kVocab + 1) v.token = -1;
  v.label = in.below(kClasses + 2) - 1;  // -1: none; kClasses: out of range
  if (v.type == kFeatureLeaf) {
    const int width = in.below(16) == 0 ? kFeatures - 1 : kFeatures;  // a short row now and then
    for (int k = 0; k < width; ++k) v.features.push_back(float(int(in.byte()) - 128) / 32.0f);
  }
  return v;
}

vjit::GraphBatch decode_batch(ByteReader& in) {
  vjit::GraphBatch batch;
  const int samples = 1 + in.below(3);
  for (int s = 0; s < samples; ++s) {
    vjit::Sample sample;
    const int n = 1 + in.below(10);
    for (int i = 0; i < n; ++i) sample.vertices.push_back(decode_vertex(in, i, n));
    batch.samples.push_back(std::move(sample));
  }
  return batch;
}

// ‖a − b‖∞ / max(‖b‖∞, 1e-2): relative, but absolute for tiny values.
template <typename A, typename B>
double relative_error(const A& a, const B& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 1e-2;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    if (!std::isfinite(double(a[i])) || !std::isfinite(double(b[i]))) return INFINITY;
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

void check_error(double error, const std::string& what) {
  if (!(error <= kTolerance)) finding(what + " differs from the reference (relative error " + std::to_string(error) + ")");
}

void compare(const vjit::Evaluation<float>& out, const vjit::Evaluation<double>& ref, bool gradients,
             const std::vector<std::vector<float>>* engine_gradients) {
  check_error(std::abs(out.objective - ref.objective) / std::max(1.0, std::abs(ref.objective)), "the objective");
  if (out.pushes.num_samples() != ref.pushes.num_samples()) finding("the number of samples pushed differs");
  for (int s = 0; s < ref.pushes.num_samples(); ++s) {
    if (out.pushes.num_vertices(s) != ref.pushes.num_vertices(s)) finding("the vertices pushed differ");
    for (int v = 0; v < ref.pushes.num_vertices(s); ++v) {
      if (out.pushes.count(s, v) != ref.pushes.count(s, v)) finding("the push count differs");
      for (int k = 0; k < ref.pushes.count(s, v); ++k)
        check_error(relative_error(out.pushes.at(s, v, k), ref.pushes.at(s, v, k)),
                    "push " + std::to_string(k) + " of sample " + std::to_string(s) + " vertex " + std::to_string(v));
    }
  }
  if (!gradients) return;
  if (engine_gradients->size() != ref.param_grads.size()) finding("the number of gradients differs");
  for (size_t p = 0; p < ref.param_grads.size(); ++p)
    check_error(relative_error((*engine_gradients)[p], ref.param_grads[p]),
                "the gradient of " + tiny().model.param(int(p)).name);
}

enum class Mode { kTrain, kForwardOnly, kInfer };

// Runs the batch through the engine and the reference; false when the engine
// rejected it (then the reference must reject it too).
bool run_and_compare(vjit::Engine& eng, const vjit::GraphBatch& batch, Mode mode, uint64_t seed) {
  vjit::RunOptions run;
  run.seed = seed;
  run.training = mode != Mode::kInfer;
  run.backward = mode == Mode::kTrain;
  vjit::Evaluation<float> out;
  std::string why;
  const bool accepted = vjit::fuzz::runs_or_rejects([&] {
    if (mode == Mode::kInfer) {
      out = eng.infer(batch);
    } else {
      eng.forward(batch, run);
      if (mode == Mode::kTrain) eng.backward();
      out = eng.last_result();
    }
  }, &why);
  if (vjit::fuzz::verbose())
    std::fprintf(stderr, "engine: %d samples, %lld vertices, mode %d: %s\n", int(batch.samples.size()),
                 static_cast<long long>(batch.num_vertices()), int(mode), accepted ? "accepted" : why.c_str());
  const TinyProgram& t = tiny();
  vjit::Evaluation<double> ref;
  const bool reference_accepted = vjit::fuzz::runs_or_rejects(
      [&] { ref = vjit::reference_evaluate(*t.program, vjit::parameter_values<double>(t.model), batch, run); });
  if (accepted != reference_accepted)
    finding(std::string("the ") + (accepted ? "reference" : "engine") + " rejects a batch the other accepts");
  if (accepted) compare(out, ref, mode == Mode::kTrain, mode == Mode::kTrain ? &eng.gradients() : nullptr);
  return accepted;
}

// A batch every configuration accepts: after a rejected batch the engine must
// still run it and match the reference (a UserError leaves the state unchanged).
const vjit::GraphBatch& good_batch() {
  static const vjit::GraphBatch batch = [] {
    vjit::GraphBatch b;
    vjit::Sample s;
    int a = s.add_vertex(kLeaf, {}, 1, 0);
    vjit::Vertex feature{kFeatureLeaf, {}, -1, -1, {0.5f, -1.0f, 2.0f}};
    s.vertices.push_back(feature);
    int f = int(s.vertices.size()) - 1;
    int c = s.add_vertex(kBinary, {a, f}, -1, 2);
    int d = s.add_vertex(kChildSum, {a, c, f});
    s.add_vertex(kGatherAll, {d, c});
    b.samples.push_back(s);
    return b;
  }();
  return batch;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  vjit::Engine& eng = engine(in.below(kConfigurations));
  const Mode mode = Mode(in.below(3));
  const uint64_t seed = in.byte();
  const vjit::GraphBatch batch = decode_batch(in);
  if (!run_and_compare(eng, batch, mode, seed) && !run_and_compare(eng, good_batch(), Mode::kTrain, 1))
    finding("after rejecting a batch the engine rejects a good one");
  return 0;
}
