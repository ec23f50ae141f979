// Data-parallel training throughput under mpirun (perf/mpi_scaling.sh):
//   mpirun -np N mpi_bench [--hidden H] [--batch B] [--steps S]
// Tree-LSTM on its built-in data, global batch B split over the N ranks, S
// timed Adam steps after 2 warm-up steps. Rank 0 prints one JSON line:
// processes, samples/s of the global batch, seconds per step, seconds per step
// in collectives (mean over ranks; it includes waiting for the slowest rank),
// the compute part (the rest), and the bytes each rank contributes per step:
// dense gradients and the embedding rows it touched (sparse); and the time of
// the dense exchange alone (all ranks entering it together); whether the
// exchange overlapped the backward (VJIT_DIST_OVERLAP), the dense buckets per
// step and how many of them started during the backward.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "jit/engine_access.h"
#include "vjit/vjit.h"

int main(int argc, char** argv) {
  try {
    int hidden = 150, batch = 64, steps = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      const int value = std::stoi(argv[i + 1]);
      if (flag == "--hidden") hidden = value;
      else if (flag == "--batch") batch = value;
      else if (flag == "--steps") steps = value;
      else throw vjit::UserError("mpi_bench: unknown flag " + flag + " (--hidden, --batch, --steps)");
    }
    auto comm = vjit::Distributed::world();
    vjit::models::Config config;
    config.hidden = hidden;
    config.train_samples = batch * (steps + 2);
    vjit::models::Bundle bundle = vjit::models::make_model("tree_lstm", config);
    vjit::Engine engine(*bundle.program);
    engine.set_distributed(comm);
    vjit::Adam adam(1e-3f);
    auto step_batch = [&](int step) {
      std::vector<int> indices;
      for (int i = 0; i < batch; ++i) indices.push_back(step * batch + i);
      return comm->shard(vjit::models::make_batch(bundle.train, indices));
    };
    for (int step = 0; step < 2; ++step) engine.train_step(step_batch(step), adam);
    comm->barrier();
    comm->reset_stats();
    const auto start = std::chrono::steady_clock::now();
    for (int step = 2; step < steps + 2; ++step) engine.train_step(step_batch(step), adam);
    comm->barrier();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const vjit::CommStats stats = comm->stats();  // a copy: the sums below are collectives too
    int64_t dense_bytes = 0;
    for (int p = 0; p < bundle.model->size(); ++p)
      if (engine.gradient_rows()[size_t(p)].all) dense_bytes += int64_t(bundle.model->param(p).value.size()) * 4;
    // The dense exchange alone, all ranks entering together: what moving the
    // bytes costs, without the waiting for a slower rank that comm_s includes.
    std::vector<float> dense(size_t(dense_bytes / 4), 1.0f);
    comm->barrier();
    const auto exchange_start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) comm->allreduce_sum(dense);
    const double exchange_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - exchange_start).count() / steps;
    const double per_step = 1.0 / steps;
    const double comm_s = comm->allreduce_sum(stats.seconds) / comm->size() * per_step;
    const double sent = comm->allreduce_sum(double(stats.bytes_sent)) / comm->size() * per_step;
    const double step_s = seconds * per_step;
    if (comm->rank() == 0)
      std::printf("{\"processes\": %d, \"threads\": %d, \"hidden\": %d, \"global_batch\": %d, \"steps\": %d, "
                  "\"samples_per_s\": %.1f, \"step_s\": %.5f, \"comm_s_per_step\": %.5f, \"compute_s_per_step\": %.5f, "
                  "\"dense_exchange_s\": %.5f, \"dense_bytes\": %lld, \"sparse_bytes_per_rank_step\": %.0f, \"deterministic\": %s, "
                  "\"overlap\": %s, \"buckets_per_step\": %.2f, \"buckets_started_in_backward_per_step\": %.2f}\n",
                  comm->size(), engine.options().threads, hidden, batch, steps, batch / step_s, step_s, comm_s,
                  step_s - comm_s, exchange_s, static_cast<long long>(dense_bytes),
                  comm->size() > 1 ? sent - double(dense_bytes) : 0.0, comm->deterministic() ? "true" : "false",
                  is_on(engine.options().tuning.dist_overlap) ? "true" : "false",
                  double(vjit::jit::internal_stats(engine).dist_buckets) / (steps + 2),
                  double(vjit::jit::internal_stats(engine).dist_buckets_overlapped) / (steps + 2));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_bench: %s\n", e.what());
    return 1;
  }
}
