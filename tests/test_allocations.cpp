// A steady-state training step makes no heap allocation: this program replaces
// the global operator new with a counting one and runs training steps of the
// Tree-LSTM and the Lattice-LSTM (the engine's defaults), requiring zero
// allocations, on any thread, over steps 3–10 once the engine has seen its
// batches. (Memory a C library takes with malloc, such as oneDNN's GEMM
// scratch, is not counted: only C++ allocations are.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "examples/models/models.h"
#include "vjit/vjit.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t size, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (size + align - 1) / align * align)
                                              : std::malloc(size);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size, 0); }
void* operator new[](std::size_t size) { return counted_alloc(size, 0); }
void* operator new(std::size_t size, std::align_val_t align) { return counted_alloc(size, std::size_t(align)); }
void* operator new[](std::size_t size, std::align_val_t align) { return counted_alloc(size, std::size_t(align)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

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
  g_allocations = 0;
  g_counting = true;
  for (int step = 3; step <= 10; ++step) engine.train_step(step % 2 ? a : b, adam);
  g_counting = false;
  return g_allocations.load();
}

TEST(SteadyState, CountingReallyCounts) {
  g_allocations = 0;
  g_counting = true;
  auto* p = new std::vector<int>(100);
  g_counting = false;
  delete p;
  EXPECT_EQ(g_allocations.load(), 2);  // the vector object and its elements
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
  g_allocations = 0;
  g_counting = true;
  engine.train_step(batch, adam);
  g_counting = false;
  EXPECT_GT(g_allocations.load(), 10);
}

TEST(SteadyState, TreeLstmTrainingStepAllocatesNothing) {
  EXPECT_EQ(steady_state_allocations("tree_lstm", Options::defaults()), 0);
}

TEST(SteadyState, LatticeLstmTrainingStepAllocatesNothing) {
  EXPECT_EQ(steady_state_allocations("lattice_lstm", Options::defaults()), 0);
}

TEST(SteadyState, PaddedLayoutAndUnfusedStepsAllocateNothing) {
  Options options = Options::defaults();
  options.memplan = "padded";
  options.fusion = false;
  EXPECT_EQ(steady_state_allocations("tree_lstm", options), 0);
}

}  // namespace
}  // namespace vjit
