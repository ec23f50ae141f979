// A steady-state training step makes no heap allocation: this program replaces
// the global operator new with a counting one and runs training steps of the
// Tree-LSTM and the Lattice-LSTM (the engine's defaults), requiring zero
// allocations, on any thread, over steps 3–10 once the engine has seen its
// batches. (Memory a C library takes with malloc, such as oneDNN's GEMM
// scratch, is not counted: only C++ allocations are.)
#include <gtest/gtest.h>

#include "tests/allocation_counter.h"
#include "vjit/models.h"
#include "vjit/vjit.h"


namespace vjit {
namespace {

std::vector<int> range(int begin, int end) {
  std::vector<int> out;
  for (int i = begin; i < end; ++i) out.push_back(i);
  return out;
}

// Allocations over training steps 3–10, alternating two batches that steps 1
// and 2 showed the engine first.
int64_t steady_state_allocations(const std::string& model, const Options& options) {
  models::Config config;
  config.hidden = 16;
  config.train_samples = 48;
  config.test_samples = 0;
  config.dropout = 0.1;
  models::Bundle bundle = models::make_model(model, config);
  GraphBatch a = models::make_batch(bundle.train, range(0, 16));
  GraphBatch b = models::make_batch(bundle.train, range(16, 40));
  Engine engine(*bundle.program, options);
  Adam adam(1e-3f);
  engine.train_step(a, adam);
  engine.train_step(b, adam);
  test_util::AllocationCounter counter;
  for (int step = 3; step <= 10; ++step) engine.train_step(step % 2 ? a : b, adam);
  return counter.count();
}

TEST(SteadyState, CountingReallyCounts) {
  int64_t count = 0;
  std::vector<int>* p = nullptr;
  {
    test_util::AllocationCounter counter;
    p = new std::vector<int>(100);
    count = counter.count();
  }
  delete p;
  EXPECT_EQ(count, 2);  // the vector object and its elements
}

// The counter sees the engine's own allocations: its first step grows every buffer.
TEST(SteadyState, FirstStepAllocates) {
  models::Config config;
  config.hidden = 16;
  config.train_samples = 16;
  config.test_samples = 0;
  models::Bundle bundle = models::make_model("tree_lstm", config);
  GraphBatch batch = models::make_batch(bundle.train, range(0, 16));
  Engine engine(*bundle.program, Options::defaults());
  Adam adam(1e-3f);
  test_util::AllocationCounter counter;
  engine.train_step(batch, adam);
  EXPECT_GT(counter.count(), 10);
}

TEST(SteadyState, TreeLstmTrainingStepAllocatesNothing) {
  EXPECT_EQ(steady_state_allocations("tree_lstm", Options::defaults()), 0);
}

TEST(SteadyState, LatticeLstmTrainingStepAllocatesNothing) {
  EXPECT_EQ(steady_state_allocations("lattice_lstm", Options::defaults()), 0);
}

// The other policies whose scheduler keeps its memory (fsm and ratio do not yet:
// docs/architecture.md).
TEST(SteadyState, DepthAndFrontierPoliciesAllocateNothing) {
  for (const char* policy : {"depth", "frontier"}) {
    Options options = Options::defaults();
    apply_flag(options, "policy", policy);
    EXPECT_EQ(steady_state_allocations("lattice_lstm", options), 0) << policy;
  }
}

TEST(SteadyState, PaddedLayoutAndUnfusedStepsAllocateNothing) {
  Options options = Options::defaults();
  options.tuning.memplan = vjit::Options::MemoryPlanner::Padded;
  options.tuning.fusion = false;
  EXPECT_EQ(steady_state_allocations("tree_lstm", options), 0);
}

}  // namespace
}  // namespace vjit
