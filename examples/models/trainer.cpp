#include "examples/models/trainer.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
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
  std::string vectors_path;  // --vectors: pretrained word vectors for the embedding
  std::string best_path;  // --save-best: the checkpoint of the best epoch by dev root accuracy (needs --dev)
};

// Where the build put things (examples/CMakeLists.txt): the shipped SST and the build directory.
#ifndef VJIT_SST_DIR
#define VJIT_SST_DIR "data/sst"
#endif
#ifndef VJIT_BUILD_DIR
#define VJIT_BUILD_DIR "build"
#endif

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

// --sst: the Stanford Sentiment Treebank shipped in data/sst/ (train, dev for
// the best epoch, test) and the hyper-parameters of Tai et al. 2015's
// constituency Tree-LSTM where vjit has them: hidden 150, 300-dimensional
// randomly initialised word vectors, batch 25, dropout 0.5; Adam instead of
// their Adagrad. The other flags, wherever they stand, override these.
void use_sst(TrainFlags& f, const std::string& model_name) {
  const std::string dir = VJIT_SST_DIR;
  f.config.data_path = dir + "/train.txt.gz";
  f.config.dev_path = dir + "/dev.txt.gz";
  f.config.test_path = dir + "/test.txt.gz";
  f.config.hidden = 150;
  f.config.embed = 300;
  f.config.dropout = 0.5;
  f.batch = 25;
  f.lr = 0.002f;
  f.epochs = 5;
  f.best_path = std::string(VJIT_BUILD_DIR) + "/" + model_name + "_sst_best.safetensors";
}

TrainFlags parse_flags(std::vector<std::string> args, const std::string& model_name) {
  TrainFlags f;
  f.config.hidden = 64;
  f.config.train_samples = 2000;
  f.config.test_samples = 500;
  const auto sst = std::find(args.begin(), args.end(), "--sst");
  if (sst != args.end()) {
    args.erase(sst);
    use_sst(f, model_name);
  }
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
    else if (flag == "--dev") f.config.dev_path = value;
    else if (flag == "--save-best") f.best_path = value;
    else if (flag == "--save") f.save_path = value;
    else if (flag == "--load") f.load_path = value;
    else if (flag == "--vectors") f.vectors_path = value;
    else throw UserError("unknown flag " + flag);
  }
  if (f.epochs < 0) throw UserError("--epochs must be >= 0 (0: load with --load and evaluate)");
  if (f.batch < 1 || f.config.hidden < 1) throw UserError("--batch and --hidden must be >= 1");
  if (!f.config.dev_path.empty() && f.best_path.empty())
    f.best_path = std::string(VJIT_BUILD_DIR) + "/" + model_name + "_best.safetensors";
  if (f.config.dev_path.empty() && !f.best_path.empty())
    throw UserError("--save-best needs --dev: the best epoch is the one with the best dev root accuracy");
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
std::string describe(const Scores& scores, const char* split = "test") {
  char text[160];
  std::snprintf(text, sizeof text, "%s acc %.6f (root %.6f), %s loss %.9g", split, scores.all.value(),
                scores.root.value(), split, scores.mean_loss());
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

// Scores of `samples` (the bundle's test or dev set) by inference.
Scores evaluate(Engine& engine, const Bundle& bundle, const std::vector<Sample>& samples, int batch_size) {
  Scores scores;
  for (size_t begin = 0; begin < samples.size(); begin += size_t(batch_size)) {
    std::vector<int> indices;
    for (size_t i = begin; i < std::min(samples.size(), begin + size_t(batch_size)); ++i) indices.push_back(int(i));
    GraphBatch batch = make_batch(samples, indices);
    const Evaluation<float> out = engine.infer(batch);
    score(bundle, batch, out, scores);
    scores.loss += out.objective;
    scores.samples += int64_t(indices.size());
  }
  return scores;
}

// A checkpoint of the training so far at `path`, with the epoch and its
// scores on `split` ("test", or "dev" for the best epoch) in the metadata.
void save(const std::string& path, const char* model_name, const Engine& engine, const Optimizer& optimizer,
          int epoch, const Scores& scores, const std::string& split) {
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.9g", scores.mean_loss());
  save_checkpoint(path, engine, &optimizer,
                  {{"model", model_name},
                   {"epoch", std::to_string(epoch)},
                   {split + "_accuracy", std::to_string(scores.all.value())},
                   {split + "_root_accuracy", std::to_string(scores.root.value())},
                   {split + "_loss", loss}});
}

void save_every_epoch(const TrainFlags& flags, const char* model_name, const Engine& engine,
                      const Optimizer& optimizer, int epoch, const Scores& test) {
  save(flags.save_path, model_name, engine, optimizer, epoch, test, "test");
  std::printf("saved %s after epoch %d: %s\n", flags.save_path.c_str(), epoch, describe(test).c_str());
}

// Resumes from --load: the epoch it was saved after.
int resume(const std::string& path, Engine& engine, Optimizer& optimizer) {
  std::map<std::string, std::string> metadata = load_checkpoint(path, engine, &optimizer);
  const auto epoch = metadata.find("epoch");
  if (epoch == metadata.end())
    throw UserError("checkpoint '" + path + "' has no \"epoch\" in its metadata (not written by --save)");
  return to_int("the checkpoint's epoch", epoch->second);
}

// The best epoch by dev root accuracy (ties: the earlier epoch) and its dev scores.
struct BestEpoch {
  int epoch = 0;
  Scores dev;
};

// With --dev: after training, the best epoch's checkpoint is loaded back and
// scored on the test set.
void test_best_epoch(const TrainFlags& flags, const BestEpoch& best, Engine& engine, Optimizer& optimizer,
                     const Bundle& bundle) {
  if (best.epoch == 0) return;
  if (bundle.test.empty()) {
    std::printf("no test set (--test): the best epoch %d is not tested\n", best.epoch);
    return;
  }
  resume(flags.best_path, engine, optimizer);
  Scores test = evaluate(engine, bundle, bundle.test, flags.batch);
  std::printf("best epoch %d (dev acc %.4f, root %.4f) from %s: test acc %.4f (root %.4f)\n", best.epoch,
              best.dev.all.value(), best.dev.root.value(), flags.best_path.c_str(), test.all.value(),
              test.root.value());
}

// --vectors: the rows of the model's "embedding" of the words the file holds
// become their vectors, before the engine is built; says how many it found.
void load_pretrained_vectors(const std::string& path, Bundle& bundle) {
  if (bundle.vocab.size() == 0)
    throw UserError("--vectors: " + bundle.name + "'s data has no words (its tokens are generated ids)");
  ParamData& embedding = bundle.model->param(bundle.model->find("embedding"));
  if (embedding.shape.rows() != bundle.vocab.size())
    throw UserError("--vectors: the embedding has " + std::to_string(embedding.shape.rows()) + " rows, the vocabulary " +
                    std::to_string(bundle.vocab.size()) + " words");
  const WordVectorCounts found =
      load_word_vectors(path, bundle.vocab, std::span<float>(embedding.value), embedding.shape.cols());
  std::printf("vectors %s: %d of %d words found (%d only in lower case), %d keep their initialisation; %lld vectors "
              "in the file\n",
              path.c_str(), found.exact + found.lowercase, bundle.vocab.size(), found.lowercase, found.missing,
              static_cast<long long>(found.vectors));
}

int train(const char* model_name, int argc, char** argv) {
  Options options = Options::from_env();
  std::vector<std::string> rest = apply_flags(options, argc, argv);
  TrainFlags flags = parse_flags(rest, model_name);
  Bundle bundle = make_model(model_name, flags.config);
  const bool has_dev = !flags.config.dev_path.empty();
  if (has_dev && bundle.dev.empty())
    throw UserError("--dev '" + flags.config.dev_path + "': no dev samples (" + model_name +
                    " reads no dev set, or the file is empty)");
  if (!flags.vectors_path.empty()) load_pretrained_vectors(flags.vectors_path, bundle);
  Engine engine(*bundle.program, options);
  // Started by mpirun with several processes: data-parallel training, each
  // rank on its shard of every batch (vjit/distributed.h); rank 0 prints and
  // writes the checkpoints, the others are silent.
  std::shared_ptr<Distributed> comm;
  if (Distributed::launched_with_several_processes()) {
    comm = Distributed::world(options);
    engine.set_distributed(comm);
    if (comm->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
      throw UserError("rank " + std::to_string(comm->rank()) + ": cannot silence stdout");
    std::printf("data-parallel over %d processes (MPI): each trains on its shard of every batch of %d\n",
                comm->size(), flags.batch);
  }
  const bool rank_zero = !comm || comm->rank() == 0;  // prints, draws the progress bar, writes checkpoints
  Adam adam(flags.lr, 0.9f, 0.999f, 1e-8f, 0.0f, 5.0f);
  std::printf("%s: %zu train / %zu dev / %zu test samples, %d parameters (%lld values), hidden %d, embed %d, "
              "batch %d, lr %g, dropout %g\n%s\n",
              model_name, bundle.train.size(), bundle.dev.size(), bundle.test.size(), bundle.model->size(),
              static_cast<long long>(bundle.model->total_numel()), flags.config.hidden, flags.config.embed_size(),
              flags.batch, double(flags.lr), flags.config.dropout, options.describe().c_str());
  int done = 0;
  if (!flags.load_path.empty()) {
    done = resume(flags.load_path, engine, adam);
    std::printf("loaded %s: epoch %d\n", flags.load_path.c_str(), done);
  }
  // Each epoch is scored on the dev set when there is one (the test set is
  // kept for the best epoch), else on the test set.
  const std::vector<Sample>& held_out = has_dev ? bundle.dev : bundle.test;
  const char* held_out_name = has_dev ? "dev" : "test";
  BestEpoch best;
  Timer total;
  for (int epoch = done + 1; epoch <= done + flags.epochs; ++epoch) {
    std::vector<int> order = shuffled_indices(int(bundle.train.size()), flags.config.seed * 1000 + uint64_t(epoch));
    std::ostringstream silenced;  // ranks other than 0 draw no progress bar
    ProgressBar bar = rank_zero ? ProgressBar(int64_t(order.size()), "epoch " + std::to_string(epoch))
                                   : ProgressBar(int64_t(order.size()), "", silenced, false);
    Timer timer;
    double loss = 0;
    Scores train_scores;
    for (size_t begin = 0; begin < order.size(); begin += size_t(flags.batch)) {
      std::vector<int> indices(order.begin() + int64_t(begin),
                               order.begin() + int64_t(std::min(order.size(), begin + size_t(flags.batch))));
      GraphBatch batch = make_batch(bundle.train, indices);
      if (comm) batch = comm->shard(batch);  // the training accuracy printed is then rank 0's shard's
      loss += engine.train_step(batch, adam);
      score(bundle, batch, engine.last_result(), train_scores);
      bar.update(int64_t(begin + indices.size()), loss / double(begin + indices.size()));
    }
    bar.finish();
    double seconds = timer.seconds();
    Scores scores = evaluate(engine, bundle, held_out, flags.batch);
    std::printf("epoch %d: loss %.4f  train acc %.3f  %s acc %.3f (root %.3f)  %.1f samples/s\n", epoch,
                loss / double(order.size()), train_scores.all.value(), held_out_name, scores.all.value(),
                scores.root.value(), double(order.size()) / seconds);
    if (!flags.save_path.empty() && rank_zero) save_every_epoch(flags, model_name, engine, adam, epoch, scores);
    if (has_dev && (best.epoch == 0 || scores.root.value() > best.dev.root.value())) {
      best = {epoch, scores};
      if (rank_zero) save(flags.best_path, model_name, engine, adam, epoch, scores, "dev");
      std::printf("best dev root accuracy so far: saved %s\n", flags.best_path.c_str());
    }
    if (comm) comm->barrier();  // rank 0's checkpoints are complete before any rank reads one
    std::fflush(stdout);
  }
  if (flags.epochs > 0) std::printf("trained %d epochs in %.1f s\n", flags.epochs, total.seconds());
  if (flags.epochs == 0) {
    Scores test = evaluate(engine, bundle, bundle.test, flags.batch);
    std::printf("evaluation after epoch %d: %s\n", done, describe(test).c_str());
    if (!flags.save_path.empty() && rank_zero) save_every_epoch(flags, model_name, engine, adam, done, test);
  }
  test_best_epoch(flags, best, engine, adam, bundle);
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
