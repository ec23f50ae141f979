#include "examples/models/trainer.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit::models {

namespace {

struct TrainFlags {
  Config config;
  int epochs = 5;
  int batch = 32;
  float lr = 0.01f;
  std::string save_path;  // --save: a checkpoint after every epoch
  std::string load_path;  // --load: resume from a checkpoint of --save
};

int to_int(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    int v = std::stoi(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw UserError(flag + " needs an integer, got '" + value + "'");
}

double to_double(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    double v = std::stod(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw UserError(flag + " needs a number, got '" + value + "'");
}

TrainFlags parse_flags(const std::vector<std::string>& args) {
  TrainFlags f;
  f.config.hidden = 64;
  f.config.train_samples = 2000;
  f.config.test_samples = 500;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) throw UserError("unknown flag or missing value: " + flag);
    const std::string& value = args[++i];
    if (flag == "--epochs") f.epochs = to_int(flag, value);
    else if (flag == "--batch") f.batch = to_int(flag, value);
    else if (flag == "--hidden") f.config.hidden = to_int(flag, value);
    else if (flag == "--embed") f.config.embed = to_int(flag, value);
    else if (flag == "--lr") f.lr = float(to_double(flag, value));
    else if (flag == "--dropout") f.config.dropout = to_double(flag, value);
    else if (flag == "--seed") f.config.seed = uint64_t(to_int(flag, value));
    else if (flag == "--train-samples") f.config.train_samples = to_int(flag, value);
    else if (flag == "--test-samples") f.config.test_samples = to_int(flag, value);
    else if (flag == "--data") f.config.data_path = value;
    else if (flag == "--test") f.config.test_path = value;
    else if (flag == "--save") f.save_path = value;
    else if (flag == "--load") f.load_path = value;
    else throw UserError("unknown flag " + flag);
  }
  if (f.epochs < 0) throw UserError("--epochs must be >= 0 (0: load with --load and evaluate)");
  if (f.batch < 1 || f.config.hidden < 1) throw UserError("--batch and --hidden must be >= 1");
  return f;
}

// Accuracy of the classifier pushes: over every labelled vertex, and over the
// root (last vertex) of each sample when it is labelled; and the objective
// summed over the samples scored (for the test set, the mean loss per sample).
struct Scores {
  Accuracy all, root;
  double loss = 0;
  int64_t samples = 0;
  double mean_loss() const { return samples > 0 ? loss / double(samples) : 0.0; }
};

// The evaluation, precise enough that two runs can be compared by it.
std::string describe(const Scores& test) {
  char text[128];
  std::snprintf(text, sizeof text, "test acc %.6f (root %.6f), test loss %.9g", test.all.value(), test.root.value(),
                test.mean_loss());
  return text;
}

void score(const Bundle& bundle, const GraphBatch& batch, const Evaluation<float>& out, Scores& scores) {
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const std::vector<Vertex>& vertices = batch.samples[s].vertices;
    for (size_t v = 0; v < vertices.size(); ++v) {
      const Vertex& vertex = vertices[v];
      bool classifies = std::find(bundle.classifier_types.begin(), bundle.classifier_types.end(), vertex.type) !=
                        bundle.classifier_types.end();
      if (!classifies || vertex.label < 0 || out.pushes.count(int(s), int(v)) == 0) continue;
      std::span<const float> logits = out.pushes.at(int(s), int(v), 0);
      bool hit = argmax(logits.data(), int(logits.size())) == vertex.label;
      scores.all.add(hit);
      if (v + 1 == vertices.size()) scores.root.add(hit);
    }
  }
}

Scores evaluate(Engine& engine, const Bundle& bundle, int batch_size) {
  Scores scores;
  for (size_t begin = 0; begin < bundle.test.size(); begin += size_t(batch_size)) {
    std::vector<int> indices;
    for (size_t i = begin; i < std::min(bundle.test.size(), begin + size_t(batch_size)); ++i) indices.push_back(int(i));
    GraphBatch batch = make_batch(bundle.test, indices);
    const Evaluation<float> out = engine.infer(batch);
    score(bundle, batch, out, scores);
    scores.loss += out.objective;
    scores.samples += int64_t(indices.size());
  }
  return scores;
}

// A checkpoint of the training so far, with the epoch and its test scores.
void save(const TrainFlags& flags, const char* model_name, const Engine& engine, const Optimizer& optimizer, int epoch,
          const Scores& test) {
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.9g", test.mean_loss());
  save_checkpoint(flags.save_path, engine, &optimizer,
                  {{"model", model_name},
                   {"epoch", std::to_string(epoch)},
                   {"test_accuracy", std::to_string(test.all.value())},
                   {"test_root_accuracy", std::to_string(test.root.value())},
                   {"test_loss", loss}});
  std::printf("saved %s after epoch %d: %s\n", flags.save_path.c_str(), epoch, describe(test).c_str());
}

// Resumes from --load: the epoch it was saved after.
int resume(const TrainFlags& flags, Engine& engine, Optimizer& optimizer) {
  std::map<std::string, std::string> metadata = load_checkpoint(flags.load_path, engine, &optimizer);
  const auto epoch = metadata.find("epoch");
  if (epoch == metadata.end())
    throw UserError("checkpoint '" + flags.load_path + "' has no \"epoch\" in its metadata (not written by --save)");
  const int saved_epoch = to_int("the checkpoint's epoch", epoch->second);
  std::printf("loaded %s: epoch %d\n", flags.load_path.c_str(), saved_epoch);
  return saved_epoch;
}

int train(const char* model_name, int argc, char** argv) {
  Options options = Options::from_env();
  std::vector<std::string> rest = apply_flags(options, argc, argv);
  TrainFlags flags = parse_flags(rest);
  Bundle bundle = make_model(model_name, flags.config);
  Engine engine(*bundle.program, options);
  Adam adam(flags.lr, 0.9f, 0.999f, 1e-8f, 0.0f, 5.0f);
  std::printf("%s: %zu train / %zu test samples, %d parameters (%lld values), hidden %d, batch %d\n%s\n", model_name,
              bundle.train.size(), bundle.test.size(), bundle.model->size(),
              static_cast<long long>(bundle.model->total_numel()), flags.config.hidden, flags.batch,
              options.describe().c_str());
  const int done = flags.load_path.empty() ? 0 : resume(flags, engine, adam);
  for (int epoch = done + 1; epoch <= done + flags.epochs; ++epoch) {
    std::vector<int> order = shuffled_indices(int(bundle.train.size()), flags.config.seed * 1000 + uint64_t(epoch));
    ProgressBar bar(int64_t(order.size()), "epoch " + std::to_string(epoch));
    Timer timer;
    double loss = 0;
    Scores train_scores;
    for (size_t begin = 0; begin < order.size(); begin += size_t(flags.batch)) {
      std::vector<int> indices(order.begin() + int64_t(begin),
                               order.begin() + int64_t(std::min(order.size(), begin + size_t(flags.batch))));
      GraphBatch batch = make_batch(bundle.train, indices);
      loss += engine.train_step(batch, adam);
      score(bundle, batch, engine.last_result(), train_scores);
      bar.update(int64_t(begin + indices.size()), loss / double(begin + indices.size()));
    }
    bar.finish();
    double seconds = timer.seconds();
    Scores test = evaluate(engine, bundle, flags.batch);
    std::printf("epoch %d: loss %.4f  train acc %.3f  test acc %.3f (root %.3f)  %.1f samples/s\n", epoch,
                loss / double(order.size()), train_scores.all.value(), test.all.value(), test.root.value(),
                double(order.size()) / seconds);
    if (!flags.save_path.empty()) save(flags, model_name, engine, adam, epoch, test);
    std::fflush(stdout);
  }
  if (flags.epochs == 0) {
    Scores test = evaluate(engine, bundle, flags.batch);
    std::printf("evaluation after epoch %d: %s\n", done, describe(test).c_str());
    if (!flags.save_path.empty()) save(flags, model_name, engine, adam, done, test);
  }
  return 0;
}

}  // namespace

int train_main(const char* model_name, int argc, char** argv) {
  try {
    return train(model_name, argc, argv);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace vjit::models
