// Graphs that grow during execution (vjit/growth.h), on the seq2seq model:
// greedy decoding of a batch equals decoding each sample alone, the gradients
// of a grown graph equal the reference interpreter's on the final graph, and
// bad callbacks are UserErrors that leave the engine usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "tests/engine_check.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using test_util::user_error_of;

models::Bundle small_seq2seq(double dropout = 0.0) {
  models::Config config = testing::small_config(64);
  config.hidden = 16;
  config.embed = 8;
  config.dropout = dropout;
  return models::make_model("seq2seq", config);
}

GraphBatch prompts(const models::Bundle& bundle, int first, int count) {
  GraphBatch batch;
  for (int i = first; i < first + count; ++i)
    batch.samples.push_back(models::seq2seq_prompt(*bundle.program, bundle.train.at(size_t(i))));
  return batch;
}

// A few teacher-forced steps, so that the decoder's arg-max varies.
void train_a_little(Engine& engine, const models::Bundle& bundle) {
  Adam adam(0.02f);
  for (int step = 0; step < 30; ++step) {
    std::vector<int> indices;
    for (int i = 0; i < 16; ++i) indices.push_back((step * 16 + i) % int(bundle.train.size()));
    engine.train_step(models::make_batch(bundle.train, indices), adam);
  }
}

// A growth callback that adds labelled decoder steps, fed the arg-max, until
// sample s has 2 + s % spread of them: samples grow to different lengths, and
// the losses of grown vertices reach the objective and the gradients.
GrowthCallback labelled_steps(int decoder, int spread) {
  return [decoder, spread](GrowthStep& step) {
    std::span<const float> logits = step.push(0);
    const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    int steps = 0;
    for (const Vertex& v : step.sample().vertices) steps += v.type == decoder;
    if (steps < 2 + step.sample_index() % spread)
      step.add_vertex(decoder, {step.vertex()}, next, (next + 3) % models::kSeq2seqVocab);
  };
}

void expect_same_graph(const Sample& got, const Sample& want, const std::string& what) {
  ASSERT_EQ(got.vertices.size(), want.vertices.size()) << what;
  for (size_t v = 0; v < want.vertices.size(); ++v) {
    EXPECT_EQ(got.vertices[v].type, want.vertices[v].type) << what << " vertex " << v;
    EXPECT_EQ(got.vertices[v].children, want.vertices[v].children) << what << " vertex " << v;
    EXPECT_EQ(got.vertices[v].token, want.vertices[v].token) << what << " vertex " << v;
  }
}

TEST(Growth, BatchedGreedyDecodingEqualsDecodingEachSampleAlone) {
  for (const char* policy : {"agenda", "depth", "frontier"}) {
    models::Bundle bundle = small_seq2seq();
    Options options = Options::defaults();
    apply_flag(options, "policy", policy);
    Engine engine(*bundle.program, options);
    train_a_little(engine, bundle);
    engine.set_growth(bundle.program->type_index("decoder"), models::seq2seq_greedy_decoder(*bundle.program));
    const GraphBatch batch = prompts(bundle, 0, 12);
    const Evaluation<float> together = engine.infer(batch);
    const GraphBatch grown = engine.grown_batch();
    ASSERT_EQ(grown.samples.size(), batch.samples.size());
    EXPECT_GT(grown.num_vertices(), batch.num_vertices()) << "greedy decoding added no step";
    EXPECT_GT(engine.stats().growth_rounds, 1);
    std::set<size_t> lengths;
    for (int s = 0; s < int(batch.samples.size()); ++s) {
      const std::string what = std::string(policy) + " sample " + std::to_string(s);
      const Evaluation<float> alone = engine.infer(prompts(bundle, s, 1));
      expect_same_graph(engine.grown_batch().samples[0], grown.samples[size_t(s)], what);
      lengths.insert(grown.samples[size_t(s)].vertices.size());
      for (int v = 0; v < together.pushes.num_vertices(s); ++v) {
        ASSERT_EQ(together.pushes.count(s, v), alone.pushes.count(0, v)) << what;
        for (int k = 0; k < alone.pushes.count(0, v); ++k)
          EXPECT_LE(testing::tensor_error(together.pushes.at(s, v, k), alone.pushes.at(0, v, k)), 1e-5)
              << what << " vertex " << v;
      }
    }
    // Samples of different lengths grew at different speeds in one batch.
    EXPECT_GT(lengths.size(), 1u) << policy;
  }
}

TEST(Growth, GradientsOfAGrownGraphEqualTheReferenceOnTheFinalGraph) {
  models::Bundle bundle = small_seq2seq(/*dropout=*/0.25);
  const Program& program = *bundle.program;
  const int decoder = program.type_index("decoder");
  Engine engine(program, Options::defaults());
  // 2 to 5 labelled steps per sample.
  engine.set_growth(decoder, labelled_steps(decoder, 4));
  GraphBatch batch = prompts(bundle, 0, 8);
  for (Sample& s : batch.samples) s.vertices.back().label = 2;  // the first step has a loss too
  RunOptions run;
  run.seed = 5;
  const double objective = engine.forward(batch, run);
  engine.backward();
  const GraphBatch& grown = engine.grown_batch();
  EXPECT_GT(grown.num_vertices(), batch.num_vertices() + 8);
  Evaluation<double> ref = reference_evaluate(program, parameter_values<double>(program.model()), grown, run);
  EXPECT_NEAR(objective, ref.objective, 1e-4 * std::max(1.0, std::abs(ref.objective)));
  ASSERT_EQ(engine.gradients().size(), ref.param_grads.size());
  for (size_t p = 0; p < ref.param_grads.size(); ++p)
    EXPECT_LE(testing::tensor_error(engine.gradients()[p], ref.param_grads[p]), 1e-3)
        << "gradient of " << program.model().param(int(p)).name;

  // train_step grows the same way and updates the parameters.
  Adam adam(0.01f);
  const double loss = engine.train_step(batch, adam);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(engine.grown_batch().num_vertices(), batch.num_vertices());
}

// Inference keeps the values of earlier rounds: every vertex is evaluated
// once (the useful flops are those of one forward of the grown graph), and
// the pushes and objective equal a static forward of the grown graph and the
// reference interpreter's.
TEST(Growth, InferenceEvaluatesEachVertexOnceAndEqualsTheGrownGraphRunAtOnce) {
  models::Bundle bundle = small_seq2seq();
  const Program& program = *bundle.program;
  const int decoder = program.type_index("decoder");
  Engine engine(program, Options::defaults());
  train_a_little(engine, bundle);
  // Labelled steps, so that the objective sums losses from every round.
  engine.set_growth(decoder, labelled_steps(decoder, 5));
  GraphBatch batch = prompts(bundle, 0, 10);
  for (Sample& s : batch.samples) s.vertices.back().label = 2;
  engine.reset_stats();
  const Evaluation<float> grown_result = engine.infer(batch);
  const EngineStats grew = engine.stats();
  const GraphBatch grown = engine.grown_batch();
  EXPECT_GE(grew.growth_rounds, 5);

  Engine whole(program, Options::defaults());
  const Evaluation<float> at_once = whole.infer(grown);
  EXPECT_DOUBLE_EQ(grew.useful_flops, whole.stats().useful_flops) << "a vertex was evaluated more than once";
  EXPECT_NEAR(grown_result.objective, at_once.objective, 1e-5 * std::max(1.0, std::abs(at_once.objective)));
  RunOptions inference;
  inference.training = false;
  inference.backward = false;
  const Evaluation<double> ref = reference_evaluate(program, parameter_values<double>(program.model()), grown, inference);
  EXPECT_NEAR(grown_result.objective, ref.objective, 1e-4 * std::max(1.0, std::abs(ref.objective)));
  for (int s = 0; s < int(grown.samples.size()); ++s)
    for (int v = 0; v < int(grown.samples[size_t(s)].vertices.size()); ++v) {
      ASSERT_EQ(grown_result.pushes.count(s, v), at_once.pushes.count(s, v));
      ASSERT_EQ(grown_result.pushes.count(s, v), ref.pushes.count(s, v));
      for (int k = 0; k < at_once.pushes.count(s, v); ++k) {
        EXPECT_LE(testing::tensor_error(grown_result.pushes.at(s, v, k), at_once.pushes.at(s, v, k)), 1e-5)
            << "sample " << s << " vertex " << v;
        EXPECT_LE(testing::tensor_error(grown_result.pushes.at(s, v, k), ref.pushes.at(s, v, k)), 1e-4)
            << "sample " << s << " vertex " << v;
      }
    }
}

// The rounds that keep values run on an executor of their own; it reads the
// parameters a train_step between two decodings changed.
TEST(Growth, DecodingAfterTrainingReadsTheTrainedParameters) {
  models::Bundle bundle = small_seq2seq();
  const int decoder = bundle.program->type_index("decoder");
  Engine engine(*bundle.program, Options::defaults());
  const GraphBatch batch = prompts(bundle, 0, 6);
  engine.set_growth(decoder, models::seq2seq_greedy_decoder(*bundle.program));
  const Evaluation<float> before = engine.infer(batch);
  engine.set_growth(decoder, nullptr);
  train_a_little(engine, bundle);
  engine.set_growth(decoder, models::seq2seq_greedy_decoder(*bundle.program));
  const Evaluation<float> after = engine.infer(batch);
  const GraphBatch grown = engine.grown_batch();

  Engine fresh(*bundle.program, Options::defaults());
  fresh.set_growth(decoder, models::seq2seq_greedy_decoder(*bundle.program));
  const Evaluation<float> want = fresh.infer(batch);
  double changed = 0;
  for (int s = 0; s < int(batch.samples.size()); ++s) {
    expect_same_graph(grown.samples[size_t(s)], fresh.grown_batch().samples[size_t(s)], "sample " + std::to_string(s));
    const int v = int(batch.samples[size_t(s)].vertices.size()) - 1;  // the first decoder step
    changed = std::max(changed, testing::tensor_error(after.pushes.at(s, v, 0), before.pushes.at(s, v, 0)));
    for (int u = 0; u < want.pushes.num_vertices(s); ++u)
      for (int k = 0; k < want.pushes.count(s, u); ++k)
        EXPECT_LE(testing::tensor_error(after.pushes.at(s, u, k), want.pushes.at(s, u, k)), 1e-5)
            << "sample " << s << " vertex " << u;
  }
  EXPECT_GT(changed, 1e-3) << "training did not change the logits";
}

// A front end (the Python module) raises the callback's own exception again:
// the UserError carries it nested, as it was thrown.
TEST(Growth, TheCallbacksExceptionIsNestedInTheUserError) {
  struct NoNextToken : std::runtime_error {
    int step;
    explicit NoNextToken(int s) : std::runtime_error("no next token"), step(s) {}
  };
  models::Bundle bundle = small_seq2seq();
  const Program& program = *bundle.program;
  Engine engine(program, Options::defaults());
  engine.set_growth(program.type_index("decoder"), [](GrowthStep& step) { throw NoNextToken(step.vertex()); });
  const GraphBatch batch = prompts(bundle, 0, 1);
  int nested_step = -1;
  try {
    engine.infer(batch);
    ADD_FAILURE() << "the callback's exception did not end infer";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("growth callback failed: no next token"), std::string::npos)
        << error.what();
    try {
      std::rethrow_if_nested(error);
    } catch (const NoNextToken& inner) {
      nested_step = inner.step;
    }
  }
  EXPECT_EQ(nested_step, int(batch.samples[0].vertices.size()) - 1);
}

TEST(Growth, BadCallbacksAreUserErrorsAndTheEngineStaysUsable) {
  models::Bundle bundle = small_seq2seq();
  const Program& program = *bundle.program;
  const int decoder = program.type_index("decoder");
  Engine engine(program, Options::defaults());
  const GraphBatch batch = prompts(bundle, 0, 3);
  const std::string where = "sample 'sequence 0' vertex " + std::to_string(batch.samples[0].vertices.size() - 1);

  auto expect_error = [&](GrowthCallback callback, std::vector<std::string> parts) {
    engine.set_growth(decoder, std::move(callback));
    const std::string message = user_error_of([&] { engine.infer(batch); });
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_NE(user_error_of([&] { engine.grown_batch(); }), "(no UserError)");
    EXPECT_NE(user_error_of([&] { engine.last_result(); }), "(no UserError)");
    // Usable afterwards: greedy decoding runs and grows.
    engine.set_growth(decoder, models::seq2seq_greedy_decoder(program, 4));
    engine.infer(batch);
    EXPECT_GT(engine.grown_batch().num_vertices(), batch.num_vertices());
  };
  expect_error([](GrowthStep&) { throw std::runtime_error("no next token"); },
               {where, "'decoder'", "no next token"});
  expect_error([](GrowthStep& step) { step.add_vertex(1, {step.vertex() + 7}); },
               {where, "child 0 is vertex", "does not exist"});
  expect_error([](GrowthStep& step) { step.add_vertex(42, {step.vertex()}); }, {where, "vertex type 42"});
  // An addition the graph check refuses (the decoder gathers one child).
  // It names the added vertex by its index in the grown sample.
  const std::string added = "vertex " + std::to_string(batch.samples[0].vertices.size());
  expect_error([](GrowthStep& step) { step.add_vertex(1, {}, 3); }, {"sequence 0", added});
  engine.set_growth_limit(30);
  expect_error([](GrowthStep& step) { step.add_vertex(1, {step.vertex()}, 3); }, {"growth limit", "'decoder'"});

  // In a later round only the growing sample runs, in a batch of its own: the
  // error still names it by its index in the caller's batch.
  GraphBatch unnamed = batch;
  for (Sample& s : unnamed.samples) s.name.clear();
  engine.set_growth(decoder, [&](GrowthStep& step) {
    if (step.sample_index() != 2) return;
    const bool first_step = step.vertex() + 1 == int(unnamed.samples[2].vertices.size());
    if (first_step) step.add_vertex(decoder, {step.vertex()}, 3);
    else step.add_vertex(decoder, {}, 3);  // no child: the decoder gathers one
  });
  const std::string message = user_error_of([&] { engine.infer(unnamed); });
  EXPECT_NE(message.find("sample '2', vertex " + std::to_string(unnamed.samples[2].vertices.size() + 1)),
            std::string::npos)
      << message;
  engine.set_growth(decoder, models::seq2seq_greedy_decoder(program, 4));
  engine.infer(unnamed);
  for (const Sample& s : engine.grown_batch().samples) EXPECT_EQ(s.name, "");

  EXPECT_NE(user_error_of([&] { engine.set_growth(program.num_types(), nullptr); }).find("not one of"),
            std::string::npos);
  EXPECT_NE(user_error_of([&] { engine.set_growth_limit(0); }), "(no UserError)");
  // Without a growing type, the batch is the caller's: no grown batch.
  engine.set_growth(decoder, nullptr);
  engine.infer(batch);
  EXPECT_NE(user_error_of([&] { engine.grown_batch(); }), "(no UserError)");
}

}  // namespace
}  // namespace vjit
