// peers-export: writes what the PyTorch peers (perf/peers/peers.py) need to do
// exactly vjit-bench's work: the model's initial parameters and the samples
// of the batches vjit-bench runs, plus vjit's own objective on the first batch
// (the equal-work check) and on the second batch after one Adam step on the
// first (the same check through one training step).
//
//   peers-export --model tree_lstm --hidden 256 --batch 64 --steps 10 [--warmup 2]
//                [--data ../shared/data/sst/train.txt] --out DIR
//
// The model is built exactly as vjit-bench builds it from the same flags (same
// Config, seed and data, so the same vocabulary and token ids), and its
// batches are vjit-bench's: batch i holds samples i·batch … i·batch + batch − 1
// (modulo the number of samples). DIR receives:
//   params.safetensors  every parameter, PyTorch layout (vjit::save_parameters)
//   samples.json        {"model", "hidden", "embed", "batch", "warmup", "steps",
//                        "lr", "vjit_first_loss", "vjit_second_loss",
//                        "types": [names], "samples": [{"type": [...],
//                        "children": [[...]...], "token": [...], "label": [...]}]}
// Every VJIT_* variable applies to the engine that computes the two losses.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "bench_util.h"
#include "vjit/models.h"
#include "vjit/checkpoint.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using nlohmann::json;

struct ExportArgs {
  std::string model = "tree_lstm";
  int batch = 64;
  int steps = 10;
  int warmup = 2;
  std::string out;
  models::Config config;
};

ExportArgs parse(int argc, char** argv) {
  ExportArgs a;
  a.config.hidden = 256;  // vjit-bench's default
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw UserError("unknown flag or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--model") a.model = value;
    else if (flag == "--hidden") a.config.hidden = bench::int_flag(flag, value);
    else if (flag == "--embed") a.config.embed = bench::int_flag(flag, value);
    else if (flag == "--batch") a.batch = bench::int_flag(flag, value);
    else if (flag == "--steps") a.steps = bench::int_flag(flag, value);
    else if (flag == "--warmup") a.warmup = bench::int_flag(flag, value);
    else if (flag == "--data") a.config.data_path = value;
    else if (flag == "--out") a.out = value;
    else throw UserError("unknown flag " + flag);
  }
  if (a.out.empty()) throw UserError("--out DIR is required");
  // As vjit-bench: enough built-in samples for every batch it runs.
  a.config.train_samples = a.batch * (a.steps + a.warmup);
  a.config.test_samples = 0;
  return a;
}

json sample_json(const Sample& sample) {
  json type = json::array(), children = json::array(), token = json::array(), label = json::array();
  for (const Vertex& v : sample.vertices) {
    type.push_back(v.type);
    children.push_back(v.children);
    token.push_back(v.token);
    label.push_back(v.label);
  }
  return {{"name", sample.name}, {"type", type}, {"children", children}, {"token", token}, {"label", label}};
}

int export_main(int argc, char** argv) {
  const ExportArgs args = parse(argc, argv);
  models::Bundle bundle = models::make_model(args.model, args.config);
  const int num_samples = int(bundle.train.size());
  if (num_samples == 0) throw UserError("model " + args.model + " has no training samples");
  std::filesystem::create_directories(args.out);
  // The parameters before any step: what both vjit-bench and the peers start from.
  save_parameters(args.out + "/params.safetensors", *bundle.model);

  Engine engine(*bundle.program, Options::from_env());
  const GraphBatch first = models::make_batch(bundle.train, bench::batch_indices(num_samples, args.batch, 0));
  const GraphBatch second = models::make_batch(bundle.train, bench::batch_indices(num_samples, args.batch, 1));
  RunOptions no_gradients;
  no_gradients.backward = false;
  const double first_loss = engine.forward(first, no_gradients);
  Adam adam(bench::kLearningRate);
  engine.train_step(first, adam);
  const double second_loss = engine.forward(second, no_gradients);

  json types = json::array();
  for (int t = 0; t < bundle.program->num_types(); ++t) types.push_back(bundle.program->type_name(t));
  json samples = json::array();
  const int total = args.batch * (args.steps + args.warmup);
  for (int i = 0; i < total; ++i) samples.push_back(sample_json(bundle.train[size_t(i % num_samples)]));
  json out{{"model", args.model},
           {"data", args.config.data_path.empty() ? std::string("built-in") : args.config.data_path},
           {"hidden", args.config.hidden},
           {"embed", args.config.embed_size()},
           {"batch", args.batch},
           {"warmup", args.warmup},
           {"steps", args.steps},
           {"lr", bench::kLearningRate},
           {"vjit_first_loss", first_loss},
           {"vjit_second_loss", second_loss},
           {"types", types},
           {"samples", samples}};
  std::ofstream file(args.out + "/samples.json");
  file << out.dump() << "\n";
  if (!file) throw UserError("cannot write " + args.out + "/samples.json");
  std::cout << "peers-export: " << args.model << ", " << total << " samples, first loss " << first_loss << " -> "
            << args.out << "\n";
  return 0;
}

}  // namespace
}  // namespace vjit

int main(int argc, char** argv) { return vjit::bench::guarded_main("peers-export", vjit::export_main, argc, argv); }
