// Engines used from several threads (engine.h, "Threads"): one Engine called
// by many threads at once gives each call its own, correct result; two Engines
// of one Program run at the same time; a pool whose threads cannot be started
// is a UserError, not an abort. Run under ThreadSanitizer in CI (label
// `threads`, scripts/test.sh).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "runtime/thread_pool.h"
#include "tests/engine_check.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

constexpr int kThreads = 4;
constexpr int kCallsPerThread = 6;

GraphBatch batch_of(const models::Bundle& bundle, int first, int count) {
  std::vector<int> indices;
  for (int i = 0; i < count; ++i) indices.push_back((first + i) % int(bundle.train.size()));
  return models::make_batch(bundle.train, indices);
}

// The results one engine gives for each batch when called from one thread.
std::vector<Evaluation<float>> sequential_results(const Program& program, const std::vector<GraphBatch>& batches) {
  Engine engine(program, Options::defaults());
  std::vector<Evaluation<float>> out;
  for (const GraphBatch& b : batches) out.push_back(engine.infer(b));
  return out;
}

void expect_same(const Evaluation<float>& got, const Evaluation<float>& want, const std::string& what) {
  EXPECT_EQ(got.objective, want.objective) << what;
  ASSERT_EQ(got.pushes.values().size(), want.pushes.values().size()) << what;
  for (size_t i = 0; i < got.pushes.values().size(); ++i)
    ASSERT_EQ(got.pushes.values()[i], want.pushes.values()[i]) << what << " value " << i;
}

// Batches of different sizes, so that concurrent calls would overwrite each
// other's buffers (and their sizes) if they were not kept apart.
std::vector<GraphBatch> distinct_batches(const models::Bundle& bundle) {
  std::vector<GraphBatch> batches;
  for (int i = 0; i < kThreads; ++i) batches.push_back(batch_of(bundle, 5 * i, 3 + 4 * i));
  return batches;
}

TEST(Concurrency, ManyThreadsInferOnOneEngine) {
  models::Bundle bundle = models::make_model("tree_lstm_outputs", testing::small_config());
  std::vector<GraphBatch> batches = distinct_batches(bundle);
  std::vector<Evaluation<float>> want = sequential_results(*bundle.program, batches);
  Engine shared(*bundle.program, Options::defaults());
  std::vector<std::vector<Evaluation<float>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int call = 0; call < kCallsPerThread; ++call) got[size_t(t)].push_back(shared.infer(batches[size_t(t)]));
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t)
    for (int call = 0; call < kCallsPerThread; ++call)
      expect_same(got[size_t(t)][size_t(call)], want[size_t(t)],
                  "thread " + std::to_string(t) + " call " + std::to_string(call));
  EXPECT_EQ(shared.stats().batches, kThreads * kCallsPerThread);
  // The line scripts/reliability_table.sh reads.
  if (!HasFailure())
    std::cout << "[ concurrency ] " << kThreads << " threads x " << kCallsPerThread
              << " infer calls on one engine, each equal to the one-thread result\n";
}

TEST(Concurrency, TwoEnginesOfOneProgramInferAtOnce) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
  std::vector<GraphBatch> batches = distinct_batches(bundle);
  std::vector<Evaluation<float>> want = sequential_results(*bundle.program, batches);
  Options one_thread = Options::defaults();
  one_thread.threads = 1;
  Engine first(*bundle.program), second(*bundle.program, one_thread);
  std::vector<Evaluation<float>> got_first, got_second;
  std::thread other([&] {
    for (const GraphBatch& b : batches) got_second.push_back(second.infer(b));
  });
  for (const GraphBatch& b : batches) got_first.push_back(first.infer(b));
  other.join();
  for (size_t i = 0; i < batches.size(); ++i) {
    expect_same(got_first[i], want[i], "first engine, batch " + std::to_string(i));
    expect_same(got_second[i], want[i], "second engine, batch " + std::to_string(i));
  }
}

// Training on one thread while others read the statistics and infer: calls
// are serialised, so each infer sees the parameters between two steps, and
// the steps are the ones a single thread would take.
TEST(Concurrency, TrainingAndInferenceFromTwoThreadsAreSerialised) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
  models::Bundle alone = models::make_model("tree_lstm", testing::small_config());
  GraphBatch train = batch_of(bundle, 0, 16), probe = batch_of(bundle, 20, 5);
  constexpr int kSteps = 5;
  Adam adam_shared(0.01f), adam_alone(0.01f);
  Engine shared(*bundle.program), reference(*alone.program);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      Evaluation<float> out = shared.infer(probe);
      EXPECT_TRUE(std::isfinite(out.objective));
      (void)shared.stats();
    }
  });
  for (int step = 0; step < kSteps; ++step) {
    double loss = shared.train_step(train, adam_shared);
    EXPECT_EQ(loss, reference.train_step(train, adam_alone)) << "step " << step;
  }
  done = true;
  reader.join();
  for (int p = 0; p < bundle.program->model().size(); ++p)
    EXPECT_EQ(bundle.program->model().param(p).value, alone.program->model().param(p).value)
        << bundle.program->model().param(p).name;
}

bool running_under_a_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  return false;
}

// A pool asked for more threads than the address space allows: the child
// process limits its address space so thread stacks cannot all be mapped.
TEST(Concurrency, AThreadThatCannotStartIsAUserError) {
  if (running_under_a_sanitizer())
    GTEST_SKIP() << "a sanitizer reserves terabytes of shadow memory, so an address-space limit cannot be set";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{size_t(512) << 20, size_t(512) << 20};  // 512 MiB: at most ~60 stacks of 8 MiB
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    try {
      runtime::ThreadPool pool(400);
      ::_exit(4);  // every thread started: the limit did not bite
    } catch (const UserError& e) {
      bool named = std::string(e.what()).find("cannot start worker thread") != std::string::npos &&
                   std::string(e.what()).find("VJIT_THREADS=400") != std::string::npos;
      ::_exit(named ? 0 : 5);
    } catch (...) {
      ::_exit(6);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << "): std::terminate instead of an error?";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: setrlimit failed, 4: no thread failed to start, 5: message, 6: not a UserError";
}

}  // namespace
}  // namespace vjit
