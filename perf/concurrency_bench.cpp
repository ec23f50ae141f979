// Serving from several threads (engine.h, "Threads"): what the engine's lock
// costs and what each way of serving gives. Prints one JSON object:
//   lock_ns                one uncontended lock and unlock of the engine's kind of mutex
//   infer_ms               one infer call of a small batch, one thread, one engine
//   lock_share             lock_ns as a share of that call
//   shared_engine_per_s    batches/s with `threads` callers on one engine (serialised;
//                          each call uses the engine's VJIT_THREADS workers)
//   engine_per_thread_per_s batches/s with `threads` callers, each with its own
//                          engine of the same Program and VJIT_THREADS=1
//
//   build/perf/concurrency_bench [--threads N] [--batch N] [--calls N]
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double lock_nanoseconds() {
  std::mutex mutex;
  constexpr int kRounds = 10'000'000;
  auto start = Clock::now();
  for (int i = 0; i < kRounds; ++i) {
    std::lock_guard<std::mutex> lock(mutex);
    asm volatile("" ::: "memory");  // keep the loop
  }
  return seconds_since(start) * 1e9 / kRounds;
}

// Batches per second when each of `callers` threads runs `calls` infer calls
// on engine_of(thread).
template <typename EngineOf>
double throughput(int callers, int calls, const vjit::GraphBatch& batch, EngineOf engine_of) {
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (int t = 0; t < callers; ++t)
    threads.emplace_back([&, t] {
      for (int c = 0; c < calls; ++c) engine_of(t).infer(batch);
    });
  for (std::thread& t : threads) t.join();
  return double(callers) * calls / seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int callers = 4, batch_size = 16, calls = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string flag = argv[i];
      int value = vjit::bench::int_flag(flag, argv[i + 1]);
      if (flag == "--threads") callers = value;
      else if (flag == "--batch") batch_size = value;
      else if (flag == "--calls") calls = value;
      else throw vjit::UserError("unknown flag " + flag + " (--threads, --batch, --calls)");
    }
    vjit::models::Config config;
    config.train_samples = batch_size;
    config.test_samples = 0;
    vjit::models::Bundle bundle = vjit::models::make_model("tree_lstm", config);
    std::vector<int> indices;
    for (int i = 0; i < batch_size; ++i) indices.push_back(i);
    vjit::GraphBatch batch = vjit::models::make_batch(bundle.train, indices);

    vjit::Options options = vjit::Options::from_env();
    vjit::Engine shared(*bundle.program, options);
    for (int warm = 0; warm < 3; ++warm) shared.infer(batch);
    auto start = Clock::now();
    for (int c = 0; c < calls; ++c) shared.infer(batch);
    double infer_s = seconds_since(start) / calls;

    double shared_rate = throughput(callers, calls, batch, [&](int) -> vjit::Engine& { return shared; });
    vjit::Options single = options;
    single.threads = 1;
    std::vector<std::unique_ptr<vjit::Engine>> own;
    for (int t = 0; t < callers; ++t) {
      own.push_back(std::make_unique<vjit::Engine>(*bundle.program, single));
      own.back()->infer(batch);
    }
    double own_rate = throughput(callers, calls, batch, [&](int t) -> vjit::Engine& { return *own[size_t(t)]; });

    double lock_ns = lock_nanoseconds();
    nlohmann::json out{{"model", "tree_lstm"},
                       {"hidden", config.hidden},
                       {"batch", batch_size},
                       {"callers", callers},
                       {"engine_threads", options.threads},
                       {"lock_ns", lock_ns},
                       {"infer_ms", infer_s * 1e3},
                       {"lock_share", lock_ns * 1e-9 / infer_s},
                       {"shared_engine_per_s", shared_rate},
                       {"engine_per_thread_per_s", own_rate}};
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "concurrency_bench: " << e.what() << "\n";
    return 1;
  }
}
