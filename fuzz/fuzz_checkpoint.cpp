// The checkpoint loader (vjit::load_checkpoint, vjit::load_parameters,
// include/vjit/checkpoint.h, over jit/safetensors.cpp): the input is written
// to a file in this process's scratch directory and loaded three ways into one
// fixed engine of a tiny program that has taken an Adam step (so it holds
// optimizer state): as a checkpoint with an Adam optimizer, as a checkpoint
// without one, and as parameters only. Each load either succeeds or throws a
// UserError; after a UserError the model's values, the engine's optimizer
// state and step count and the optimizer are bitwise as before (compared with
// a snapshot). Any other exception, a crash or a sanitizer report is a
// finding. After a load that succeeds, the engine is put back to its starting
// state, so that every input starts from the same one.
//
// The seed corpus (fuzz/corpus/checkpoint/) holds real files of this program
// and a few damaged ones; they are written by
//   VJIT_FUZZ_WRITE_SEEDS=fuzz/corpus/checkpoint build-fuzz/fuzz/fuzz_checkpoint
// (which writes them and exits).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "vjit/checkpoint.h"
#include "vjit/vjit.h"

namespace {

using vjit::fuzz::finding;

constexpr int kHidden = 2;
constexpr int kVocab = 5;
constexpr int kClasses = 3;

// Two vertex types over four small parameters (a few hundred bytes of data per file).
struct TinyProgram {
  vjit::Model model{/*seed=*/5};
  std::unique_ptr<vjit::Program> program;

  TinyProgram() {
    using vjit::Shape;
    auto E = model.add("E", Shape::mat(kVocab, kHidden), vjit::Init::Uniform, 0.5f);
    auto W = model.add("W", Shape::mat(kHidden, 2 * kHidden));
    auto bias = model.add("b", Shape::vec(kHidden), vjit::Init::Uniform, 0.1f);
    auto O = model.add("O", Shape::mat(kClasses, kHidden));
    program = std::make_unique<vjit::Program>(model);
    program->add_type("leaf", [&](vjit::Builder& f) {
      auto x = f.tanh(f.pull_embedding(E));
      f.add_loss(f.softmax_cross_entropy(f.matmul(O, x), f.label(kClasses)));
      f.scatter(x);
    });
    program->add_type("node", [&](vjit::Builder& f) {
      auto children = f.concat({f.gather(0, Shape::vec(kHidden)), f.gather(1, Shape::vec(kHidden))});
      auto x = f.tanh(f.add(f.matmul(W, children), bias));
      f.add_loss(f.softmax_cross_entropy(f.matmul(O, x), f.label(kClasses)));
      f.scatter(x);
    });
  }
};

vjit::GraphBatch training_batch() {
  vjit::GraphBatch batch;
  for (int s = 0; s < 2; ++s) {
    vjit::Sample sample;
    const int a = sample.add_vertex(0, {}, /*token=*/s + 1, /*label=*/s);
    const int b = sample.add_vertex(0, {}, /*token=*/3, /*label=*/2);
    sample.add_vertex(1, {a, b}, /*token=*/-1, /*label=*/1 - s);
    batch.samples.push_back(sample);
  }
  return batch;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Everything a load may change: the model's values, the engine's optimizer
// state and step count, and the optimizer's own step count.
struct Snapshot {
  std::vector<std::vector<float>> values;
  vjit::OptimizerState state;
  uint64_t train_steps = 0;
  int64_t optimizer_steps = 0;

  // What differs from `o`, or "" when nothing does.
  std::string difference(const Snapshot& o) const {
    if (values.size() != o.values.size()) return "the number of parameters";
    for (size_t p = 0; p < values.size(); ++p)
      if (!same_bits(values[p], o.values[p])) return "the values of parameter " + std::to_string(p);
    if (state.shapes != o.state.shapes || state.slots.size() != o.state.slots.size())
      return "the optimizer state's layout";
    for (size_t p = 0; p < state.slots.size(); ++p) {
      if (state.slots[p].size() != o.state.slots[p].size()) return "the optimizer state's slots";
      for (size_t k = 0; k < state.slots[p].size(); ++k)
        if (!same_bits(state.slots[p][k], o.state.slots[p][k]))
          return "optimizer slot " + std::to_string(k) + " of parameter " + std::to_string(p);
    }
    if (state.steps != o.state.steps) return "the optimizer state's step count";
    if (state.owner != o.state.owner || state.generation != o.state.generation) return "the optimizer state's owner";
    if (train_steps != o.train_steps) return "the engine's train_steps()";
    if (optimizer_steps != o.optimizer_steps) return "the optimizer's steps()";
    return "";
  }
};

struct Fixture {
  TinyProgram tiny;
  std::unique_ptr<vjit::Engine> engine;
  vjit::Adam adam{0.01f};
  Snapshot start;

  Fixture() {
    vjit::Options options = vjit::Options::defaults();
    options.threads = 1;
    engine = std::make_unique<vjit::Engine>(*tiny.program, options);
    engine->train_step(training_batch(), adam);
    start = snapshot();
  }

  Snapshot snapshot() const {
    Snapshot s;
    const vjit::Model& model = tiny.program->model();
    for (int p = 0; p < model.size(); ++p) s.values.push_back(model.param(p).value);
    s.state = engine->optimizer_state();
    s.train_steps = engine->train_steps();
    s.optimizer_steps = adam.steps();
    return s;
  }

  // Back to the state after construction (after a load that succeeded).
  void restore() {
    vjit::Model& model = tiny.program->model();
    for (int p = 0; p < model.size(); ++p) model.param(p).value = start.values[size_t(p)];
    engine->upload_parameters();
    engine->set_optimizer_state(start.state);
    engine->set_train_steps(start.train_steps);
  }
};

Fixture& fixture() {
  static Fixture instance;
  return instance;
}

const vjit::fuzz::ScratchDir& scratch() {
  static const vjit::fuzz::ScratchDir dir;
  return dir;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) finding("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs one load; a rejection must leave everything as it was, a success is undone.
template <typename Load>
void load_one_way(const char* how, Load&& load) {
  Fixture& f = fixture();
  const Snapshot before = f.snapshot();
  std::string why;
  const bool loaded = vjit::fuzz::runs_or_rejects(load, &why);
  if (vjit::fuzz::verbose()) std::fprintf(stderr, "%s: %s\n", how, loaded ? "loaded" : why.c_str());
  if (loaded) {
    f.restore();
    const std::string left = f.snapshot().difference(f.start);
    if (!left.empty()) finding(std::string("restoring the fixture after ") + how + " left " + left + " changed");
    return;
  }
  const std::string changed = f.snapshot().difference(before);
  if (!changed.empty()) finding(std::string(how) + " threw a UserError but changed " + changed + ": " + why);
}

// The seed corpus: real files of the fixture's program, then damaged copies.
void write_seeds(const std::string& folder) {
  Fixture& f = fixture();
  std::filesystem::create_directories(folder);
  const auto at = [&](const char* name) { return (std::filesystem::path(folder) / name).string(); };
  vjit::save_checkpoint(at("adam.safetensors"), *f.engine, &f.adam, {{"epoch", "3"}});
  vjit::save_checkpoint(at("no-optimizer.safetensors"), *f.engine);
  vjit::SGD sgd(0.1f, 0.9f);
  vjit::save_checkpoint(at("sgd-momentum.safetensors"), *f.engine, &sgd);
  vjit::save_parameters(at("parameters.safetensors"), f.tiny.program->model(), {{"source", "pytorch"}});

  const std::string whole = read_file(at("adam.safetensors"));
  write_file(at("truncated.safetensors"), whole.substr(0, whole.size() - 5));
  std::string wrong_version = whole;
  const size_t version = wrong_version.find("\"vjit.version\":\"1\"");
  if (version == std::string::npos) finding("the checkpoint's header has no \"vjit.version\":\"1\"");
  wrong_version[version + std::strlen("\"vjit.version\":\"")] = '2';
  write_file(at("version-2.safetensors"), wrong_version);
  std::string other_program = whole;  // the signature's first character changed: another program's
  const size_t signature = other_program.find("\"vjit.signature\":\"");
  if (signature == std::string::npos) finding("the checkpoint's header has no \"vjit.signature\"");
  char& first = other_program[signature + std::strlen("\"vjit.signature\":\"")];
  first = first == 'X' ? 'Y' : 'X';
  write_file(at("other-program.safetensors"), other_program);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* folder = std::getenv("VJIT_FUZZ_WRITE_SEEDS")) {
    write_seeds(folder);
    std::fprintf(stderr, "wrote the seed corpus to %s\n", folder);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  const std::string path = scratch().file("input.safetensors");
  write_file(path, vjit::fuzz::as_text(data, size));
  load_one_way("load_checkpoint with Adam", [&] { vjit::load_checkpoint(path, *f.engine, &f.adam); });
  load_one_way("load_checkpoint without an optimizer", [&] { vjit::load_checkpoint(path, *f.engine); });
  load_one_way("load_parameters", [&] { vjit::load_parameters(path, f.tiny.program->model()); });
  return 0;
}
