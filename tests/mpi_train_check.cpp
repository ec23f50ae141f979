// Data-parallel training checks, run under mpirun by ctest (tests/CMakeLists.txt,
// tests/mpi_check.sh):
//   mpi_train_check train DIR       every rank's parameters after K Adam steps on
//                                   shards of the same global batches equal
//                                   (a) rank 0's, bitwise; (b) one process that sums
//                                   the shards' gradients in rank order, bitwise
//                                   (VJIT_DETERMINISTIC on) or within 1e-6; (c) one
//                                   process training on the whole global batches,
//                                   within a tolerance (other float rounding);
//   mpi_train_check checkpoint DIR  rank 0 saves a checkpoint after K1 steps, every
//                                   rank resumes from it: after K2 more steps the
//                                   parameters equal the uninterrupted run's, bitwise;
//   mpi_train_check fault DIR       rank 1 kills itself (SIGKILL) at step 3; the
//                                   others must fail, not hang (mpi_check.sh times it);
//   mpi_train_check hang DIR        rank 1 stops answering (sleeps) at step 3: the
//                                   others must throw DistributedError at their deadline;
//   mpi_train_check compare A B     (no MPI) the parameters of two checkpoints of the
//                                   example tree_lstm as mpi_check.sh trains it agree
//                                   within 1e-4 (a run under mpirun against one alone).
// Exit 0 on success, 1 with a message on a failure. Tree-LSTM, hidden 16, no
// dropout, one thread per rank.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "jit/engine_access.h"
#include "vjit/vjit.h"

namespace {

constexpr int kGlobalBatch = 12;  // divisible by 1, 2, 3 and 4: every shard non-empty
constexpr int kSteps = 4;

vjit::models::Bundle make_bundle() {
  vjit::models::Config config;
  config.hidden = 16;
  config.dropout = 0.0;
  config.train_samples = kGlobalBatch * kSteps;
  config.test_samples = 4;
  config.seed = 7;
  return vjit::models::make_model("tree_lstm", config);
}

vjit::Options options() {
  vjit::Options o = vjit::Options::from_env();
  o.threads = 1;
  return o;
}

vjit::GraphBatch global_batch(const vjit::models::Bundle& bundle, int step) {
  std::vector<int> indices;
  for (int i = 0; i < kGlobalBatch; ++i) indices.push_back((step * kGlobalBatch + i) % int(bundle.train.size()));
  return vjit::models::make_batch(bundle.train, indices);
}

std::vector<float> flatten(const vjit::Model& model) {
  std::vector<float> all;
  for (int p = 0; p < model.size(); ++p)
    all.insert(all.end(), model.param(p).value.begin(), model.param(p).value.end());
  return all;
}

int failures = 0;

void report(vjit::Distributed& comm, bool ok, const std::string& what) {
  std::printf("rank %d/%d: %s: %s\n", comm.rank(), comm.size(), ok ? "ok" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

// Largest |a - b| / max(1, |b|).
double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

std::string format(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// K distributed steps on this rank's shards (the engine's internal counters to `stats`).
std::vector<float> train_distributed(const std::shared_ptr<vjit::Distributed>& comm, int steps,
                                     vjit::jit::InternalStats* stats = nullptr) {
  vjit::models::Bundle bundle = make_bundle();
  vjit::Engine engine(*bundle.program, options());
  engine.set_distributed(comm);
  vjit::Adam adam(1e-2f);
  for (int step = 0; step < steps; ++step) engine.train_step(comm->shard(global_batch(bundle, step)), adam);
  if (stats) *stats = vjit::jit::internal_stats(engine);
  return flatten(bundle.program->model());
}

// One process: per step, the gradients of each rank's shard summed in rank
// order (as the deterministic exchange sums them), then one Adam step.
std::vector<float> train_shards_summed(int ranks, int steps) {
  vjit::models::Bundle bundle = make_bundle();
  vjit::Model& model = bundle.program->model();
  vjit::Engine engine(*bundle.program, options());
  vjit::Adam adam(1e-2f);
  for (int step = 0; step < steps; ++step) {
    const vjit::GraphBatch global = global_batch(bundle, step);
    std::vector<std::vector<float>> sum(size_t(model.size()));
    std::vector<vjit::GradientRows> rows(size_t(model.size()));
    for (int p = 0; p < model.size(); ++p) sum[size_t(p)].assign(model.param(p).value.size(), 0.0f);
    for (int r = 0; r < ranks; ++r) {
      vjit::GraphBatch shard;
      const size_t n = global.samples.size();
      shard.samples.assign(global.samples.begin() + int64_t(size_t(r) * n / size_t(ranks)),
                           global.samples.begin() + int64_t(size_t(r + 1) * n / size_t(ranks)));
      vjit::RunOptions run;
      run.seed = uint64_t(step + 1);
      engine.forward(shard, run);
      engine.backward();
      for (int p = 0; p < model.size(); ++p) {
        const std::vector<float>& g = engine.gradients()[size_t(p)];
        const vjit::GradientRows& touched = engine.gradient_rows()[size_t(p)];
        std::vector<float>& s = sum[size_t(p)];
        if (touched.all) {
          for (size_t i = 0; i < g.size(); ++i) s[i] += g[i];
          continue;
        }
        rows[size_t(p)].all = false;
        const size_t cols = size_t(model.param(p).shape.cols());
        for (int32_t row : touched.rows) {
          for (size_t c = 0; c < cols; ++c) s[size_t(row) * cols + c] += g[size_t(row) * cols + c];
          rows[size_t(p)].rows.push_back(row);
        }
      }
    }
    for (vjit::GradientRows& r : rows) {
      std::sort(r.rows.begin(), r.rows.end());
      r.rows.erase(std::unique(r.rows.begin(), r.rows.end()), r.rows.end());
    }
    adam.step(model, sum, rows);
  }
  return flatten(model);
}

std::vector<float> train_alone(int steps) {
  vjit::models::Bundle bundle = make_bundle();
  vjit::Engine engine(*bundle.program, options());
  vjit::Adam adam(1e-2f);
  for (int step = 0; step < steps; ++step) engine.train_step(global_batch(bundle, step), adam);
  return flatten(bundle.program->model());
}

void check_train(const std::shared_ptr<vjit::Distributed>& comm) {
  vjit::jit::InternalStats stats;
  const std::vector<float> mine = train_distributed(comm, kSteps, &stats);
  // VJIT_DIST_OVERLAP: every bucket's sum started during the backward (the
  // executor told the exchange when its gradients were final); off: none.
  const bool overlap = is_on(options().resolve().tuning.dist_overlap);
  const int64_t expected_overlapped = overlap ? stats.dist_buckets : 0;
  report(*comm, stats.dist_buckets > 0 && stats.dist_buckets_overlapped == expected_overlapped,
         std::to_string(stats.dist_buckets_overlapped) + " of " + std::to_string(stats.dist_buckets) +
             " buckets started during the backward (VJIT_DIST_OVERLAP " + (overlap ? "on" : "off") +
             ")");
  std::vector<float> rank0 = mine;
  comm->broadcast(rank0, 0);
  report(*comm, bitwise_equal(mine, rank0), "parameters bitwise equal to rank 0's");

  const std::vector<float> summed = train_shards_summed(comm->size(), kSteps);
  const double d_summed = max_difference(mine, summed);
  if (comm->deterministic())
    report(*comm, bitwise_equal(mine, summed),
           "bitwise equal to one process summing the shards' gradients in rank order (max diff " +
               format(d_summed) + ")");
  else
    report(*comm, d_summed <= 1e-6, "within 1e-6 of one process summing the shards' gradients (max diff " +
                                        format(d_summed) + ")");

  // The whole batch at once adds the samples' gradients in another order: the
  // same sums up to float rounding, which Adam's normalised steps carry into
  // the weights. The tolerance is far below one step (lr 1e-2).
  const std::vector<float> alone = train_alone(kSteps);
  const double d_alone = max_difference(mine, alone);
  report(*comm, d_alone <= 1e-4,
         "within 1e-4 of one process training on the whole global batches (max diff " + format(d_alone) + ")");
}

void check_checkpoint(const std::shared_ptr<vjit::Distributed>& comm, const std::string& dir) {
  const int first = 2, second = kSteps - first;
  const std::vector<float> uninterrupted = train_distributed(comm, kSteps);
  const std::string path = dir + "/mpi_checkpoint.safetensors";
  {
    vjit::models::Bundle bundle = make_bundle();
    vjit::Engine engine(*bundle.program, options());
    engine.set_distributed(comm);
    vjit::Adam adam(1e-2f);
    for (int step = 0; step < first; ++step) engine.train_step(comm->shard(global_batch(bundle, step)), adam);
    if (comm->rank() == 0) vjit::save_checkpoint(path, engine, &adam, {{"step", std::to_string(first)}});
    comm->barrier();  // the file is complete (written atomically) before anyone reads it
  }
  vjit::models::Bundle bundle = make_bundle();
  vjit::Engine engine(*bundle.program, options());
  engine.set_distributed(comm);
  vjit::Adam adam(1e-2f);
  const auto metadata = vjit::load_checkpoint(path, engine, &adam);
  const int resumed = std::stoi(metadata.at("step"));
  for (int step = resumed; step < resumed + second; ++step)
    engine.train_step(comm->shard(global_batch(bundle, step)), adam);
  report(*comm, bitwise_equal(flatten(bundle.program->model()), uninterrupted),
         "resumed from rank 0's checkpoint after step " + std::to_string(resumed) +
             ": bitwise equal to the uninterrupted run");
}

// die: rank 1 raises SIGKILL at step 3 (mpirun usually ends the job);
// hang: rank 1 stops answering at step 3 (sleeps, alive), so only the
// deadline of the others' collectives (VJIT_DIST_TIMEOUT) can end the job.
void check_fault(const std::shared_ptr<vjit::Distributed>& comm, bool hang) {
  vjit::models::Bundle bundle = make_bundle();
  vjit::Engine engine(*bundle.program, options());
  engine.set_distributed(comm);
  vjit::Adam adam(1e-2f);
  for (int step = 0; step < 1000; ++step) {
    if (step == 3 && comm->rank() == 1) {
      std::printf("rank 1: %s at step %d\n", hang ? "stops answering" : "raising SIGKILL", step);
      std::fflush(stdout);
      if (!hang) std::raise(SIGKILL);
      sleep(600);
    }
    engine.train_step(comm->shard(global_batch(bundle, step % kSteps)), adam);
  }
  report(*comm, false, "training went on for 1000 steps after rank 1 died");
}

// The checkpoints mpi_check.sh's trainer mode writes: tree_lstm, hidden 16,
// 96 train and 24 test samples (the model's vocabulary depends on the data).
int compare_checkpoints(const std::string& a, const std::string& b) {
  vjit::models::Config config;
  config.hidden = 16;
  config.train_samples = 96;
  config.test_samples = 24;
  vjit::models::Bundle first = vjit::models::make_model("tree_lstm", config);
  vjit::models::Bundle second = vjit::models::make_model("tree_lstm", config);
  vjit::load_parameters(a, *first.model);
  vjit::load_parameters(b, *second.model);
  const double difference = max_difference(flatten(*first.model), flatten(*second.model));
  const bool ok = difference <= 1e-4;
  std::printf("%s: the parameters of %s and %s agree within 1e-4 (max relative difference %.3g)\n",
              ok ? "ok" : "FAIL", a.c_str(), b.c_str(), difference);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: mpi_train_check train|checkpoint|fault DIR | compare A B\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  try {
    if (mode == "compare") {
      if (argc != 4) throw vjit::UserError("usage: mpi_train_check compare A B");
      return compare_checkpoints(argv[2], argv[3]);
    }
    std::shared_ptr<vjit::Distributed> comm = vjit::Distributed::world();
    if (mode == "train") check_train(comm);
    else if (mode == "checkpoint") check_checkpoint(comm, dir);
    else if (mode == "fault") check_fault(comm, false);
    else if (mode == "hang") check_fault(comm, true);
    else throw vjit::UserError("unknown mode '" + mode + "'");
    if (failures == 0) std::printf("rank %d: %s passed\n", comm->rank(), mode.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_train_check: error: %s\n", e.what());
    std::fflush(stderr);
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
