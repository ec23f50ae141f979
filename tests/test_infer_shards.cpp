// VJIT_INFER_SHARDS: Engine::infer on groups of a batch's samples at once.
// The groups' results, put back together, equal one engine's and the
// reference interpreter's; decoding in groups grows every sample as one engine
// does, its callbacks seeing the caller's sample indices; an error names the
// sample as the caller knows it and leaves the engine usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/engine_check.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using test_util::user_error_of;

constexpr double kTolerance = 1e-5;

Options grouped(int groups, int threads, const std::string& policy = "agenda") {
  Options options = Options::defaults();
  options.tuning.infer_shards = groups;
  options.threads = threads;
  apply_flag(options, "policy", policy);
  return options;
}

void expect_same_pushes(const Evaluation<float>& got, const Evaluation<float>& want, const std::string& what) {
  ASSERT_EQ(got.pushes.num_samples(), want.pushes.num_samples()) << what;
  for (int s = 0; s < want.pushes.num_samples(); ++s) {
    ASSERT_EQ(got.pushes.num_vertices(s), want.pushes.num_vertices(s)) << what << " sample " << s;
    for (int v = 0; v < want.pushes.num_vertices(s); ++v) {
      ASSERT_EQ(got.pushes.count(s, v), want.pushes.count(s, v)) << what << " sample " << s << " vertex " << v;
      for (int k = 0; k < want.pushes.count(s, v); ++k)
        EXPECT_LE(testing::tensor_error(got.pushes.at(s, v, k), want.pushes.at(s, v, k)), kTolerance)
            << what << " sample " << s << " vertex " << v;
    }
  }
  EXPECT_NEAR(got.objective, want.objective, kTolerance * std::max(1.0, std::abs(want.objective))) << what;
}

TEST(InferShards, GroupsEqualOneEngineAndTheReference) {
  for (const char* model : {"tree_lstm", "var_lstm", "lattice_lstm"}) {
    for (const char* policy : {"agenda", "fsm"}) {
      models::Bundle bundle = models::make_model(model, testing::small_config());
      GraphBatch batch = models::make_batch(bundle.train, {0, 1, 2, 3, 4, 5, 6});
      batch.samples[3].name.clear();
      const std::string what = std::string(model) + " " + policy;
      Engine one(*bundle.program, grouped(1, 2, policy));
      const Evaluation<float> want = one.infer(batch);
      // 3 groups of 2, 2 and 3 samples on 2 threads; 7 groups of one sample
      // (as many as there are samples); 3 groups run one after another.
      for (auto [groups, threads] : {std::pair{3, 2}, std::pair{9, 2}, std::pair{3, 1}}) {
        Engine engine(*bundle.program, grouped(groups, threads, policy));
        engine.track_lower_bound(true);
        const Evaluation<float> got = engine.infer(batch);
        expect_same_pushes(got, want, what + " groups " + std::to_string(groups));
        EXPECT_EQ(engine.stats().batches, std::min<int64_t>(groups, 7)) << what;
        EXPECT_EQ(engine.stats().vertices, batch.num_vertices()) << what;
        EXPECT_GT(engine.stats().lower_bound, 0) << what << ": the groups' bounds";
        expect_same_pushes(engine.last_result(), want, what + " last_result");
        // A forward that trains is not split: it still matches the reference.
        testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance, what + " forward");
      }
    }
  }
}

// A growth callback that adds decoder steps until sample s has 2 + s % 5 of
// them: it reads GrowthStep::sample_index, which must be the caller's.
GrowthCallback steps_by_sample_index(int decoder) {
  return [decoder](GrowthStep& step) {
    std::span<const float> logits = step.push(0);
    const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    int steps = 0;
    for (const Vertex& v : step.sample().vertices) steps += v.type == decoder;
    if (steps < 2 + step.sample_index() % 5) step.add_vertex(decoder, {step.vertex()}, next);
  };
}

TEST(InferShards, DecodingInGroupsGrowsEverySampleAsOneEngineDoes) {
  models::Config config = testing::small_config(64);
  config.hidden = 16;
  config.embed = 8;
  config.dropout = 0;
  models::Bundle bundle = models::make_model("seq2seq", config);
  const Program& program = *bundle.program;
  const int decoder = program.type_index("decoder");
  GraphBatch batch;
  for (int i = 0; i < 11; ++i) batch.samples.push_back(models::seq2seq_prompt(program, bundle.train.at(size_t(i))));
  for (int i = 0; i < 11; i += 2) batch.samples[size_t(i)].name.clear();
  for (bool by_index : {false, true}) {
    GrowthCallback callback = by_index ? steps_by_sample_index(decoder) : models::seq2seq_greedy_decoder(program);
    Engine one(program, grouped(1, 2));
    one.set_growth(decoder, callback);
    const Evaluation<float> want = one.infer(batch);
    const GraphBatch want_grown = one.grown_batch();
    Engine engine(program, grouped(4, 2));
    engine.set_growth(decoder, callback);
    const Evaluation<float> got = engine.infer(batch);
    const std::string what = by_index ? "grown by sample index" : "greedy";
    expect_same_pushes(got, want, what);
    const GraphBatch& grown = engine.grown_batch();
    ASSERT_EQ(grown.samples.size(), batch.samples.size()) << what;
    for (size_t s = 0; s < grown.samples.size(); ++s) {
      EXPECT_EQ(grown.samples[s].name, batch.samples[s].name) << what << " sample " << s;
      ASSERT_EQ(grown.samples[s].vertices.size(), want_grown.samples[s].vertices.size()) << what << " sample " << s;
      for (size_t v = 0; v < grown.samples[s].vertices.size(); ++v)
        EXPECT_EQ(grown.samples[s].vertices[v].token, want_grown.samples[s].vertices[v].token) << what;
    }
    EXPECT_GT(engine.stats().grown_vertices, 0) << what;
    EXPECT_EQ(engine.stats().grown_vertices, one.stats().grown_vertices) << what;
  }
}

TEST(InferShards, AnErrorNamesTheCallersSampleAndTheEngineStaysUsable) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
  GraphBatch batch = models::make_batch(bundle.train, {0, 1, 2, 3, 4, 5});
  for (Sample& sample : batch.samples) sample.name.clear();
  GraphBatch bad = batch;
  bad.samples[4].vertices[0].token = 1 << 30;  // past the embedding table
  Engine engine(*bundle.program, grouped(3, 2));
  const std::string message = user_error_of([&] { engine.infer(bad); });
  EXPECT_NE(message.find("sample '4'"), std::string::npos) << message;
  EXPECT_NE(user_error_of([&] { engine.last_result(); }), "(no UserError)");
  Engine one(*bundle.program, grouped(1, 2));
  expect_same_pushes(engine.infer(batch), one.infer(batch), "after the error");
}

}  // namespace
}  // namespace vjit
