// vjit::Distributed in one process (no mpirun): the communicator of one rank,
// its shard, and an Engine with it set trains exactly as one without it. The
// several-process behaviour runs under mpirun: ctest -L mpi (tests/mpi_check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

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
  vjit::GraphBatch cut = batch;  // a shard of a shard keeps counting from where its batch began
  cut.first_sample = 3;
  EXPECT_EQ(world->shard(cut).first_sample, 3);
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

// Dropout masks follow GraphBatch::first_sample + the sample's index, so the
// shards of a global batch draw the masks the whole batch draws: their
// objectives and gradients add up to the whole batch's (and the reference
// interpreter agrees on a shard). Without first_sample they would not.
TEST(Distributed, ShardsDrawTheWholeBatchsDropoutMasks) {
  vjit::models::Config config;
  config.hidden = 8;
  config.train_samples = 16;
  config.test_samples = 2;
  config.dropout = 0.5;
  vjit::models::Bundle bundle = vjit::models::make_model("tree_lstm", config);
  vjit::Options options = vjit::Options::from_env();
  options.threads = 1;
  vjit::RunOptions run;
  run.seed = 11;
  const vjit::GraphBatch whole = first_samples(bundle, 6);
  vjit::GraphBatch head, tail;
  head.samples.assign(whole.samples.begin(), whole.samples.begin() + 2);
  tail.samples.assign(whole.samples.begin() + 2, whole.samples.end());
  tail.first_sample = 2;

  auto objective_and_gradients = [&](const vjit::GraphBatch& batch) {
    vjit::Engine engine(*bundle.program, options);
    double objective = engine.forward(batch, run);
    engine.backward();
    return std::make_pair(objective, engine.gradients());
  };
  const auto [whole_objective, whole_grads] = objective_and_gradients(whole);
  const auto [head_objective, head_grads] = objective_and_gradients(head);
  const auto [tail_objective, tail_grads] = objective_and_gradients(tail);
  EXPECT_NEAR(head_objective + tail_objective, whole_objective, 1e-5 * std::abs(whole_objective));
  for (size_t p = 0; p < whole_grads.size(); ++p)
    for (size_t i = 0; i < whole_grads[p].size(); ++i)
      ASSERT_NEAR(head_grads[p][i] + tail_grads[p][i], whole_grads[p][i], 1e-4) << bundle.model->param(int(p)).name;
  EXPECT_NEAR(vjit::reference_evaluate(*bundle.program, tail, run).objective, tail_objective,
              1e-5 * std::abs(tail_objective));

  vjit::GraphBatch tail_as_whole = tail;  // the same samples, masks drawn as if they came first
  tail_as_whole.first_sample = 0;
  EXPECT_GT(std::abs(objective_and_gradients(tail_as_whole).first - tail_objective), 1e-3);
  tail_as_whole.first_sample = -1;
  EXPECT_NE(vjit::test_util::user_error_of([&] { objective_and_gradients(tail_as_whole); }).find("first_sample is -1"),
            std::string::npos);
}

}  // namespace
