// What an Engine logs: the VJIT_LOG=schedule lines of each batch.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "examples/models/models.h"
#include "tests/engine_check.h"

namespace vjit {
namespace {

models::Config small_config() {
  models::Config config;
  config.hidden = 8;
  config.embed = 6;
  config.train_samples = 32;
  config.test_samples = 0;
  config.dropout = 0.25;
  return config;
}

GraphBatch first_samples(const models::Bundle& bundle, int n) {
  std::vector<int> indices;
  for (int i = 0; i < n; ++i) indices.push_back(i);
  return models::make_batch(bundle.train, indices);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// --- VJIT_LOG=schedule ---

TEST(ScheduleLog, PrintsEveryTaskWithTypeVerticesAndPolicy) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  GraphBatch batch = first_samples(bundle, 8);
  Options options = Options::defaults();
  options.log = "schedule";
  options.policy = "depth";
  Engine engine(*bundle.program, options);
  ::testing::internal::CaptureStderr();
  engine.forward(batch);
  const std::vector<std::string> lines = lines_of(::testing::internal::GetCapturedStderr());
  const int64_t tasks = engine.stats().tasks;
  ASSERT_EQ(int64_t(lines.size()), tasks + 1);
  EXPECT_EQ(lines[0].rfind("[vjit] schedule: policy=depth tasks=" + std::to_string(tasks) + " lower_bound=", 0), 0u)
      << lines[0];
  int64_t vertices = 0;
  std::map<std::string, int> tasks_of_type;
  for (int64_t i = 0; i < tasks; ++i) {
    std::istringstream fields(lines[size_t(i + 1)]);
    std::string tag, task, index, type, times;
    int64_t n = 0;
    fields >> tag >> task >> index >> type >> times >> n;
    EXPECT_EQ(tag + " " + task + " " + index, "[vjit] task " + std::to_string(i) + ":") << lines[size_t(i + 1)];
    EXPECT_EQ(times, "x");
    EXPECT_GT(n, 0);
    vertices += n;
    ++tasks_of_type[type];
  }
  EXPECT_EQ(vertices, batch.num_vertices());
  EXPECT_EQ(tasks_of_type.size(), 2u);
  EXPECT_GT(tasks_of_type["leaf"], 0);
  EXPECT_GT(tasks_of_type["internal"], 0);
  // Nothing when the topic is off.
  Engine quiet(*bundle.program, Options::defaults());
  ::testing::internal::CaptureStderr();
  quiet.forward(batch);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace vjit
