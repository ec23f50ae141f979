// vjit::Distributed in one process (no mpirun): the communicator of one rank,
// its shard, and an Engine with it set trains exactly as one without it. The
// several-process behaviour runs under mpirun: ctest -L mpi (tests/mpi_check.sh).
#include <gtest/gtest.h>

#include <cstring>

#include "tests/user_error.h"
#include "vjit/vjit.h"

namespace {

vjit::models::Bundle small_tree_lstm() {
  vjit::models::Config config;
  config.hidden = 8;
  config.train_samples = 16;
  config.test_samples = 2;
  return vjit::models::make_model("tree_lstm", config);
}

vjit::GraphBatch first_samples(const vjit::models::Bundle& bundle, int count) {
  std::vector<int> indices;
  for (int i = 0; i < count; ++i) indices.push_back(i);
  return vjit::models::make_batch(bundle.train, indices);
}

TEST(Distributed, OneProcessIsRankZeroOfOne) {
  if (vjit::Distributed::launched_with_several_processes())
    GTEST_SKIP() << "started by mpirun with several processes: this test is for one";
  auto world = vjit::Distributed::world();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world.get(), vjit::Distributed::world().get()) << "one communicator per process";
  std::vector<float> data{1.0f, -2.5f, 3.0f};
  world->allreduce_sum(data);
  EXPECT_EQ(data, (std::vector<float>{1.0f, -2.5f, 3.0f}));
  EXPECT_EQ(world->allreduce_sum(4.25), 4.25);
  std::vector<int32_t> all;
  std::vector<int64_t> counts;
  const std::vector<int32_t> mine{7, 9};
  world->allgather(std::span<const int32_t>(mine), all, counts);
  EXPECT_EQ(all, mine);
  EXPECT_EQ(counts, (std::vector<int64_t>{2}));
}

TEST(Distributed, ShardOfOneRankIsTheWholeBatchAndAnEmptyBatchIsRefused) {
  if (vjit::Distributed::launched_with_several_processes())
    GTEST_SKIP() << "started by mpirun with several processes: this test is for one";
  vjit::models::Bundle bundle = small_tree_lstm();
  auto world = vjit::Distributed::world();
  const vjit::GraphBatch batch = first_samples(bundle, 5);
  EXPECT_EQ(world->shard(batch).samples.size(), 5u);
  EXPECT_NE(vjit::test_util::user_error_of([&] { world->shard(vjit::GraphBatch{}); })
                .find("a global batch of 0 samples cannot give each of 1 ranks a sample"),
            std::string::npos);
}

TEST(Distributed, EngineWithOneRankTrainsBitwiseAsWithout) {
  if (vjit::Distributed::launched_with_several_processes())
    GTEST_SKIP() << "started by mpirun with several processes: this test is for one";
  vjit::models::Bundle alone = small_tree_lstm(), with_comm = small_tree_lstm();
  vjit::Options options = vjit::Options::from_env();
  options.threads = 1;
  vjit::Engine plain(*alone.program, options), distributed(*with_comm.program, options);
  distributed.set_distributed(vjit::Distributed::world());
  EXPECT_NE(distributed.distributed(), nullptr);
  vjit::Adam adam_plain(1e-2f), adam_distributed(1e-2f);
  for (int step = 0; step < 3; ++step) {
    const vjit::GraphBatch batch = first_samples(alone, 4 + step);
    EXPECT_EQ(plain.train_step(batch, adam_plain), distributed.train_step(batch, adam_distributed));
  }
  for (int p = 0; p < alone.model->size(); ++p) {
    const std::vector<float>& a = alone.model->param(p).value;
    const std::vector<float>& b = with_comm.model->param(p).value;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << alone.model->param(p).name;
  }
}

}  // namespace
