// The host-side logic of data-parallel training's gradient exchange
// (jit/gradient_exchange.h, runtime/nccl.h), testable without a GPU: the
// bucket plan, which path sums a store's gradients (host MPI or NCCL), the
// GPU a process uses, the NCCL unique id's broadcast, and the errors without
// a GPU or NCCL. Runs alone (ctest) and under mpirun -np 2 (mpi.exchange_np2),
// where the tests that need several processes run instead of skipping.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>

#include "jit/gradient_exchange.h"
#include "runtime/cuda_driver.h"
#include "runtime/nccl.h"
#include "tests/user_error.h"
#include "vjit/vjit.h"

namespace {

using vjit::BucketPiece;
using vjit::GradientPath;
using vjit::test_util::user_error_of;

bool same_piece(const BucketPiece& a, const BucketPiece& b) {
  return a.param == b.param && a.offset == b.offset && a.floats == b.floats;
}

TEST(PlanBuckets, CutsTheDenseGradientsInParameterOrder) {
  // Parameter 1 is an embedding table (0: not dense); parameter 3 spans three buckets.
  const auto buckets = vjit::plan_buckets({5, 0, 3, 10}, 4);
  const std::vector<std::vector<BucketPiece>> expected{
      {{0, 0, 4}}, {{0, 4, 1}, {2, 0, 3}}, {{3, 0, 4}}, {{3, 4, 4}}, {{3, 8, 2}}};
  ASSERT_EQ(buckets.size(), expected.size());
  for (size_t b = 0; b < expected.size(); ++b) {
    ASSERT_EQ(buckets[b].pieces.size(), expected[b].size()) << "bucket " << b;
    int64_t floats = 0;
    for (size_t i = 0; i < expected[b].size(); ++i) {
      EXPECT_TRUE(same_piece(buckets[b].pieces[i], expected[b][i])) << "bucket " << b << " piece " << i;
      floats += expected[b][i].floats;
    }
    EXPECT_EQ(buckets[b].floats, floats) << "bucket " << b;
  }
}

TEST(PlanBuckets, EveryValueInExactlyOnePieceAndBucketsFullButTheLast) {
  const std::vector<int64_t> sizes{1, 1000, 0, 7, 4096, 0, 33, 1};
  const int64_t bucket_floats = 256;
  const auto buckets = vjit::plan_buckets(sizes, bucket_floats);
  std::vector<int64_t> covered(sizes.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (b + 1 < buckets.size()) {
      EXPECT_EQ(buckets[b].floats, bucket_floats) << "bucket " << b;
    }
    for (const BucketPiece& piece : buckets[b].pieces) {
      EXPECT_EQ(piece.offset, covered[size_t(piece.param)]) << "pieces of a parameter are consecutive";
      covered[size_t(piece.param)] += piece.floats;
    }
  }
  EXPECT_EQ(covered, sizes);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  EXPECT_EQ(int64_t(buckets.size()), (total + bucket_floats - 1) / bucket_floats);
}

TEST(PlanBuckets, NoDenseParametersNoBuckets) {
  EXPECT_TRUE(vjit::plan_buckets({0, 0}, 16).empty());
  EXPECT_TRUE(vjit::plan_buckets({}, 16).empty());
}

TEST(PlanBuckets, OverlapOrdersByFinalPointAndEndsBucketsWherePointsChange) {
  // Parameter 1 is an embedding table; 2 is final first, then 0 and 3 (point 1), then 4.
  const std::vector<int64_t> sizes{3, 0, 2, 4, 5};
  const std::vector<int> points{1, 0, 0, 1, 2};
  const auto buckets = vjit::plan_overlap_buckets(sizes, points, 4, 2);
  const std::vector<std::vector<BucketPiece>> expected{
      {{2, 0, 2}}, {{0, 0, 3}, {3, 0, 1}}, {{3, 1, 3}}, {{4, 0, 4}}, {{4, 4, 1}}};
  ASSERT_EQ(buckets.size(), expected.size());
  for (size_t b = 0; b < expected.size(); ++b) {
    ASSERT_EQ(buckets[b].pieces.size(), expected[b].size()) << "bucket " << b;
    for (size_t i = 0; i < expected[b].size(); ++i)
      EXPECT_TRUE(same_piece(buckets[b].pieces[i], expected[b][i])) << "bucket " << b << " piece " << i;
  }
  // Below min_floats a bucket goes on across points: one bucket for all.
  const auto merged = vjit::plan_overlap_buckets(sizes, points, 100, 100);
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].floats, 14);
}

TEST(GradientPath, NcclOnlyForGpuGradientsWhenWantedAndBuilt) {
  for (int on_device = 0; on_device < 2; ++on_device)
    for (int want = 0; want < 2; ++want)
      for (int built = 0; built < 2; ++built)
        EXPECT_EQ(vjit::choose_gradient_path(on_device, want, built),
                  on_device && want && built ? GradientPath::Nccl : GradientPath::HostMpi)
            << "on_device=" << on_device << " want=" << want << " built=" << built;
  EXPECT_STREQ(vjit::gradient_path_name(GradientPath::Nccl), "nccl");
  EXPECT_STREQ(vjit::gradient_path_name(GradientPath::HostMpi), "host-mpi");
}

TEST(GpuPerProcess, TheLocalRanksGpuAndAnErrorWhenGpusAreShared) {
  EXPECT_EQ(vjit::runtime::cuda_device_for_local_rank(0, 4), 0);
  EXPECT_EQ(vjit::runtime::cuda_device_for_local_rank(2, 4), 2);
  EXPECT_EQ(vjit::runtime::cuda_device_for_local_rank(5, 4), 1);
  EXPECT_EQ(vjit::runtime::cuda_device_for_local_rank(3, 0), 0);
  EXPECT_NO_THROW(vjit::runtime::check_gpu_per_rank(0, 1));
  EXPECT_NO_THROW(vjit::runtime::check_gpu_per_rank(3, 4));
  const std::string shared = user_error_of([] { vjit::runtime::check_gpu_per_rank(1, 1); });
  EXPECT_NE(shared.find("GPU of its own"), std::string::npos) << shared;
  EXPECT_NE(shared.find("VJIT_DIST_NCCL=off"), std::string::npos) << shared;
  EXPECT_NE(user_error_of([] { vjit::runtime::check_gpu_per_rank(0, 0); }), "(no UserError)");
}

// Sets an environment variable for one scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(GpuPerProcess, LocalRankFromTheLaunchersEnvironment) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr), mpich("MPI_LOCALRANKID", nullptr),
      slurm("SLURM_LOCALID", nullptr);
  EXPECT_EQ(vjit::runtime::local_rank_from_env(), 0);
  {
    ScopedEnv set("SLURM_LOCALID", "3");
    EXPECT_EQ(vjit::runtime::local_rank_from_env(), 3);
    ScopedEnv first("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    EXPECT_EQ(vjit::runtime::local_rank_from_env(), 1) << "Open MPI's variable comes first";
  }
  ScopedEnv bad("MPI_LOCALRANKID", "x2");
  EXPECT_EQ(vjit::runtime::local_rank_from_env(), 0) << "not a number: ignored";
}

TEST(Nccl, SaysWhyItCannotBeUsed) {
  const std::string reason = vjit::runtime::nccl_unavailable_reason();
  if (!vjit::runtime::nccl_built()) {
    EXPECT_NE(reason.find("built without NCCL"), std::string::npos) << reason;
    EXPECT_NE(user_error_of([] { vjit::runtime::nccl_unique_id(); }).find("built without NCCL"), std::string::npos);
    return;
  }
  // Built with NCCL: the library loads (it is found at build time), or the reason names it.
  if (!reason.empty()) {
    EXPECT_NE(reason.find("NCCL"), std::string::npos) << reason;
  }
}

// The NCCL unique id goes from rank 0 to every rank as raw bytes, every
// byte value included (as floats some would be NaN patterns).
TEST(Nccl, UniqueIdBroadcastKeepsEveryByte) {
  auto world = vjit::Distributed::world();
  vjit::runtime::NcclId pattern;
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = uint8_t(255 - i * 7);
  vjit::runtime::NcclId id{};
  if (world->rank() == 0) id = pattern;
  world->broadcast_bytes(id);
  EXPECT_EQ(id, pattern) << "rank " << world->rank() << " of " << world->size();
  EXPECT_NE(user_error_of([&] { world->broadcast_bytes(id, world->size()); }), "(no UserError)");
}

// A parameter store of host vectors whose gradients may claim to live on a device.
class FakeStore final : public vjit::runtime::ParameterStore {
 public:
  FakeStore(const vjit::Model& model, uint64_t device_base) : device_base_(device_base) {
    for (int p = 0; p < model.size(); ++p) grads_.emplace_back(size_t(model.param(p).shape.numel()), 0.0f);
    rows_.resize(size_t(model.size()));
  }
  void upload(const vjit::Model&) override {}
  void download(vjit::Model&) const override {}
  const std::vector<std::vector<float>>& gradients() const override { return grads_; }
  const std::vector<vjit::GradientRows>& gradient_rows() const override { return rows_; }
  void read_gradient(int p, int64_t offset, int64_t floats, float* values) const override {
    std::copy_n(grads_[size_t(p)].begin() + offset, floats, values);
  }
  void write_gradient(int p, int64_t offset, int64_t floats, const float* values) override {
    std::copy_n(values, floats, grads_[size_t(p)].begin() + offset);
  }
  uint64_t device_gradient(int p) const override { return device_base_ ? device_base_ + uint64_t(p) * 4096 : 0; }
  void add_touched_rows(int p, std::span<const int32_t> rows) override {
    auto& mine = rows_[size_t(p)].rows;
    mine.insert(mine.end(), rows.begin(), rows.end());
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  }

  std::vector<std::vector<float>> grads_;
  std::vector<vjit::GradientRows> rows_;
  uint64_t device_base_ = 0;
};

vjit::Model dense_and_embedding() {
  vjit::Model model;
  model.add("W", vjit::Shape::mat(3, 5));
  model.add("E", vjit::Shape::mat(6, 2));  // an embedding table: rows touched sparsely
  model.add("b", vjit::Shape::vec(4));
  return model;
}

// Rank r: dense values r+1 + i/8; embedding rows {r, r+2} (rank 0: 0 and 2,
// rank 1: 1 and 3), each value r+1.
void fill_rank_gradients(FakeStore& store, int rank) {
  for (int p : {0, 2})
    for (size_t i = 0; i < store.grads_[size_t(p)].size(); ++i) store.grads_[size_t(p)][i] = float(rank + 1) + float(i) / 8;
  store.rows_[1].all = false;
  store.rows_[1].rows = {rank, rank + 2};
  for (int row : store.rows_[1].rows)
    for (int c = 0; c < 2; ++c) store.grads_[1][size_t(row * 2 + c)] = float(rank + 1);
}

TEST(GradientExchange, HostPathSumsDenseBucketsAndTheUnionOfTouchedRows) {
  auto world = vjit::Distributed::world();
  if (world->size() != 2) GTEST_SKIP() << "needs exactly 2 processes (ctest mpi.exchange_np2 runs it under mpirun -np 2)";
  const vjit::Model model = dense_and_embedding();
  FakeStore store(model, 0);
  fill_rank_gradients(store, world->rank());
  vjit::GradientExchange exchange(true, 30);
  exchange.sum_over_ranks(*world, model, store);
  EXPECT_EQ(exchange.last_path(), GradientPath::HostMpi) << "host gradients never go through NCCL";
  for (int p : {0, 2})
    for (size_t i = 0; i < store.grads_[size_t(p)].size(); ++i)
      EXPECT_EQ(store.grads_[size_t(p)][i], (1 + float(i) / 8) + (2 + float(i) / 8)) << "param " << p << " value " << i;
  EXPECT_EQ(store.rows_[1].rows, (std::vector<int32_t>{0, 1, 2, 3})) << "the union of both ranks' rows";
  const std::vector<float> expected{1, 1, 2, 2, 1, 1, 2, 2, 0, 0, 0, 0};  // row r: its rank's r+1
  EXPECT_EQ(store.grads_[1], expected);
}

// The overlap (VJIT_DIST_OVERLAP): b's gradient is final at point 0, W's at
// point 1, so b's bucket starts as soon as the backward says so, while W's
// still waits; the sums are those of the exchange after the backward.
TEST(GradientExchange, OverlapStartsABucketOnceItsGradientsAreFinal) {
  auto world = vjit::Distributed::world();
  if (world->size() != 2) GTEST_SKIP() << "needs exactly 2 processes (ctest mpi.exchange_np2 runs it under mpirun -np 2)";
  const vjit::Model model = dense_and_embedding();
  FakeStore store(model, 0);
  fill_rank_gradients(store, world->rank());
  vjit::GradientExchange exchange(true, 30, 1);
  ASSERT_TRUE(exchange.begin_backward(*world, model, store, {1, 0, 0}));
  const std::vector<int> at_point0{1, 2}, at_point1{0};
  exchange.gradients_final(at_point0);
  EXPECT_EQ(exchange.stats().started_in_backward, 1) << "b's bucket starts at point 0";
  EXPECT_EQ(exchange.stats().started_early, 1) << "W's bucket was still waiting";
  exchange.between_steps();
  exchange.gradients_final(at_point1);
  EXPECT_EQ(exchange.stats().started_in_backward, 2);
  EXPECT_EQ(exchange.stats().started_early, 1) << "W's bucket was the last";
  exchange.sum_over_ranks(*world, model, store);
  EXPECT_EQ(exchange.stats().buckets, 2);
  for (int p : {0, 2})
    for (size_t i = 0; i < store.grads_[size_t(p)].size(); ++i)
      EXPECT_EQ(store.grads_[size_t(p)][i], (1 + float(i) / 8) + (2 + float(i) / 8)) << "param " << p << " value " << i;
  EXPECT_EQ(store.rows_[1].rows, (std::vector<int32_t>{0, 1, 2, 3})) << "the union of both ranks' rows";
  // A second backward plays again, from the same plan.
  fill_rank_gradients(store, world->rank());
  ASSERT_TRUE(exchange.begin_backward(*world, model, store, {1, 0, 0}));
  exchange.gradients_final(at_point0);
  exchange.gradients_final(at_point1);
  exchange.sum_over_ranks(*world, model, store);
  EXPECT_EQ(exchange.stats().buckets, 4);
  EXPECT_EQ(store.grads_[0][0], 3.0f);
}

TEST(GradientExchange, OverlapNeedsSeveralProcessesAndTheFinalPoints) {
  auto world = vjit::Distributed::world();
  const vjit::Model model = dense_and_embedding();
  FakeStore store(model, 0);
  vjit::GradientExchange exchange(true, 30, 1);
  EXPECT_FALSE(exchange.begin_backward(*world, model, store, {})) << "an executor that does not tell (CUDA)";
  if (world->size() == 1) {
    EXPECT_FALSE(exchange.begin_backward(*world, model, store, {1, 0, 0})) << "one process sums nothing";
  }
}

TEST(GradientExchange, GpuGradientsWithoutAGpuFailWithTheReason) {
  auto world = vjit::Distributed::world();
  if (world->size() < 2) GTEST_SKIP() << "needs several processes (ctest mpi.exchange_np2 runs it under mpirun -np 2)";
  if (vjit::runtime::probe_cuda().ok)
    GTEST_SKIP() << "a GPU is present: the fake device addresses of this test would be handed to NCCL";
  const vjit::Model model = dense_and_embedding();
  FakeStore store(model, 0x7f0000000000);
  fill_rank_gradients(store, world->rank());
  vjit::GradientExchange exchange(true, 30);
  if (!vjit::runtime::nccl_built()) {
    exchange.sum_over_ranks(*world, model, store);
    EXPECT_EQ(exchange.last_path(), GradientPath::HostMpi) << "without NCCL, GPU gradients go through host memory";
    return;
  }
  const std::string error = user_error_of([&] { exchange.sum_over_ranks(*world, model, store); });
  EXPECT_TRUE(error.find("no usable CUDA device") != std::string::npos || error.find("NCCL") != std::string::npos)
      << error;
  EXPECT_EQ(exchange.last_path(), GradientPath::Nccl);
  // VJIT_DIST_NCCL=off: the same gradients through host memory.
  vjit::GradientExchange host(false, 30);
  host.sum_over_ranks(*world, model, store);
  EXPECT_EQ(host.last_path(), GradientPath::HostMpi);
}

}  // namespace
