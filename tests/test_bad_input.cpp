// Bad input through the public API: each case is a UserError that names the
// sample, vertex, slot or file position, and the engine is usable afterwards
// (the next good batch gives the reference's result). The reliability
// table (docs/development.md) counts the tests of this file (scripts/reliability_table.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tests/engine_check.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using test_util::user_error_of;

constexpr int kWidth = 4;
constexpr int kClasses = 3;
constexpr int kVocab = 10;

// A small program with every kind of external input: "word" looks up a token,
// "feature" pulls a feature row, "pair" combines two children and has a
// labelled loss, "wide" scatters a value of another width than "pair" reads.
struct Fixture {
  Model model{7};
  Program program{model};
  int word = -1, feature = -1, pair = -1, wide = -1;

  Fixture() {
    Param table = model.add("table", Shape::mat(kVocab, kWidth), Init::Uniform, 0.5f);
    Param w = model.add("W", Shape::mat(kWidth, 2 * kWidth));
    Param out = model.add("out", Shape::mat(kClasses, kWidth));
    word = program.add_type("word", [&](Builder& b) { b.scatter(b.tanh(b.pull_embedding(table))); });
    feature = program.add_type("feature", [&](Builder& b) { b.scatter(b.log(b.add_scalar(b.pull(kWidth), 10.0))); });
    pair = program.add_type("pair", [&](Builder& b) {
      Value h = b.tanh(b.matmul(w, b.concat({b.gather(0, Shape::vec(kWidth)), b.gather(1, Shape::vec(kWidth))})));
      b.add_loss(b.softmax_cross_entropy(b.matmul(out, h), b.label(kClasses)));
      b.scatter(h);
    });
    wide = program.add_type("wide", [&](Builder& b) { b.scatter(b.constant(Shape::vec(kWidth + 1), 1.0)); });
  }

  // One sample: a word and a feature vertex under a labelled pair.
  Sample good_sample(const std::string& name) const {
    Sample s;
    s.name = name;
    int a = s.add_vertex(word, {}, 3);
    int f = s.add_vertex(feature);
    s.vertices[size_t(f)].features.assign(kWidth, 0.5f);
    s.add_vertex(pair, {a, f}, -1, 1);
    return s;
  }

  GraphBatch good_batch() const {
    GraphBatch batch;
    for (int i = 0; i < 3; ++i) batch.samples.push_back(good_sample("good" + std::to_string(i)));
    return batch;
  }
};

// Runs `bad` through a fresh engine: returns the UserError's message, then
// checks the engine still computes the reference's objective, pushes and
// gradients on a good batch.
std::string error_then_still_usable(Fixture& f, const GraphBatch& bad) {
  Engine engine(f.program, Options::defaults());
  std::string message = user_error_of([&] { engine.forward(bad); });
  testing::expect_matches_reference(engine, f.program, f.good_batch(), 1e-4, "the good batch after the error");
  return message;
}

void expect_names(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' in: " << message;
}

TEST(BadInput, EmptyBatchRunsAndTrainsWithoutUndefinedBehaviour) {
  Fixture f;
  Engine engine(f.program, Options::defaults());
  Adam adam(0.01f);
  for (int round = 0; round < 2; ++round) {
    GraphBatch empty;
    if (round == 1) empty.samples.resize(2);  // samples without vertices
    EXPECT_EQ(engine.forward(empty), 0.0);
    engine.backward();
    for (const std::vector<float>& g : engine.gradients())
      for (float x : g) ASSERT_EQ(x, 0.0f);
    EXPECT_EQ(engine.train_step(empty, adam), 0.0);
    Evaluation<float> out = engine.infer(empty);
    EXPECT_EQ(out.pushes.values().size(), 0u);
  }
  GraphBatch good = f.good_batch();
  EXPECT_GT(engine.forward(good), 0.0);
}

// Every example model, forward, backward and an optimizer step on batches with
// no samples and with samples of no vertices, on every memory planner.
TEST(BadInput, EmptyBatchOnEveryExampleModelAndPlanner) {
  for (const std::string& name : models::model_names())
    for (const char* memplan : {"copy", "padded", "pqtree", "auto"}) {
      SCOPED_TRACE(name + " " + memplan);
      models::Bundle bundle = models::make_model(name, testing::small_config(8));
      Options options = Options::defaults();
      apply_flag(options, "memplan", memplan);
      options.deterministic = to_lever(std::string(memplan) != "auto");  // auto needs it off
      Engine engine(*bundle.program, options);
      Adam adam(0.01f);
      GraphBatch empty;
      EXPECT_EQ(engine.train_step(empty, adam), 0.0);
      empty.samples.resize(3);
      EXPECT_EQ(engine.train_step(empty, adam), 0.0);
      EXPECT_EQ(engine.infer(empty).objective, 0.0);
      EXPECT_GT(engine.forward(models::make_batch(bundle.train, {0, 1})), 0.0);
    }
}

TEST(BadInput, LabelOutOfRange) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[1].vertices[2].label = kClasses;
  expect_names(error_then_still_usable(f, bad), {"good1", "label"});
}

TEST(BadInput, TokenOutOfRange) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[2].vertices[0].token = kVocab + 4;
  expect_names(error_then_still_usable(f, bad), {"good2", "token"});
}

TEST(BadInput, WrongFeatureWidth) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[0].vertices[1].features.resize(kWidth + 2, 0.0f);
  expect_names(error_then_still_usable(f, bad), {"good0", "feature"});
}

TEST(BadInput, UnknownVertexType) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[1].vertices[0].type = 99;
  expect_names(error_then_still_usable(f, bad), {"good1", "99"});
}

TEST(BadInput, Cycle) {
  Fixture f;
  GraphBatch bad;
  Sample s;
  s.name = "loop";
  s.add_vertex(f.pair, {1, 2}, -1, 0);
  s.add_vertex(f.pair, {0, 2}, -1, 0);
  s.add_vertex(f.word, {}, 1);
  bad.samples.push_back(s);
  expect_names(error_then_still_usable(f, bad), {"loop", "cycle"});
}

TEST(BadInput, ChildIndexOutOfRange) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[2].vertices[2].children[1] = 17;
  expect_names(error_then_still_usable(f, bad), {"good2", "17"});
}

TEST(BadInput, BadArity) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[0].vertices[2].children.pop_back();  // "pair" gathers two children
  expect_names(error_then_still_usable(f, bad), {"good0", "pair"});
}

TEST(BadInput, ChildScattersTheWrongShape) {
  Fixture f;
  GraphBatch bad = f.good_batch();
  bad.samples[1].vertices[1] = Vertex{f.wide, {}, -1, -1, {}};  // scatters [5] where "pair" gathers [4]
  expect_names(error_then_still_usable(f, bad), {"good1", "[5]", "[4]"});
}

// VJIT_MAX_MEMORY: a batch whose buffers exceed the bound fails before it
// runs, naming what it needs and the bound; smaller batches still run and
// equal the reference, before and after.
TEST(BadInput, BatchOverTheMemoryBoundFailsAndASmallerOneRuns) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(64));
  Options options = Options::defaults();
  options.max_memory = 48 << 10;  // 48 KiB
  Engine engine(*bundle.program, options);
  Adam adam(0.01f);
  std::vector<int> indices;
  std::string message;
  int largest_that_ran = 0;
  for (int n = 1; n <= 64 && message.empty(); ++n) {
    indices.push_back(n - 1);
    GraphBatch batch = models::make_batch(bundle.train, indices);
    message = user_error_of([&] { engine.train_step(batch, adam); });
    if (message == "(no UserError)") {
      message.clear();
      largest_that_ran = n;
    }
  }
  ASSERT_FALSE(message.empty()) << "64 trees fit in 48 KiB?";
  ASSERT_GT(largest_that_ran, 0) << message;
  expect_names(message, {"VJIT_MAX_MEMORY=49152", "bytes of buffers", std::to_string(indices.size()) + " samples"});
  indices.pop_back();
  testing::expect_matches_reference(engine, *bundle.program, models::make_batch(bundle.train, indices), 1e-4,
                                    "the largest batch that fits");
}

// A policy file in VJIT_CACHE_DIR that is corrupt never blocks an engine: it
// is reported, moved aside and learned again.
TEST(BadInput, CorruptCachedPolicyIsSetAsideAndLearnedAgain) {
  models::Bundle bundle = models::make_model("tree_lstm_2type", testing::small_config());
  Options options = Options::defaults();
  options.policy = vjit::Options::Policy::Fsm;
  options.cache_dir = ::testing::TempDir() + "/vjit_bad_cache_" + std::to_string(::getpid());
  std::filesystem::remove_all(options.cache_dir);
  std::vector<int> first(32);
  for (int i = 0; i < 32; ++i) first[size_t(i)] = i;
  GraphBatch batch = models::make_batch(bundle.train, first);
  std::string policy_file;
  {
    Engine learner(*bundle.program, options);
    learner.forward(batch);  // learns and saves
  }
  for (const auto& entry : std::filesystem::directory_iterator(options.cache_dir)) policy_file = entry.path().string();
  ASSERT_FALSE(policy_file.empty());
  for (const std::string& damage : {std::string("{\"format\": \"vjit-fsm-policy\", \"ver"), std::string("\x01\x02garbage"),
                                    std::string("{\"format\":\"vjit-fsm-policy\",\"version\":1,\"num_types\":2000000000}")}) {
    std::filesystem::remove(policy_file + ".rejected");
    std::ofstream(policy_file, std::ios::trunc) << damage;
    Engine engine(*bundle.program, options);  // must not throw
    EXPECT_FALSE(engine.fsm_policy()) << "a damaged file is not used";
    EXPECT_TRUE(std::filesystem::exists(policy_file + ".rejected")) << "set aside for inspection";
    engine.forward(batch);  // learns again and saves a good file
    EXPECT_TRUE(engine.fsm_policy());
    Engine after(*bundle.program, options);
    EXPECT_TRUE(after.fsm_policy()) << "the relearned policy was saved";
  }
  for (const auto& entry : std::filesystem::directory_iterator(options.cache_dir))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << "left behind: " << entry.path();
  std::filesystem::remove_all(options.cache_dir);
}

// A policy file whose num_types is huge is refused before anything is sized by it.
TEST(BadInput, PolicyFileFieldsAreBoundedBeforeUse) {
  std::string path = ::testing::TempDir() + "/vjit_bounded_policy_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path, std::ios::trunc)
      << R"({"format":"vjit-fsm-policy","version":2,"signature":"s","encoding":"sort","num_types":2000000000,)"
      << R"("options":{},"training":{},"states":[{"state":"1999999999","actions":[]}]})";
  std::string message = user_error_of([&] { FsmPolicy::load(path, "s"); });
  expect_names(message, {path, "num_types"});
  std::filesystem::remove(path);
}

// A save that cannot be written leaves nothing behind and says why.
TEST(BadInput, FailedPolicySaveLeavesNoTemporaryFile) {
  models::Bundle bundle = models::make_model("tree_lstm_2type", testing::small_config());
  Options options = Options::defaults();
  options.policy = vjit::Options::Policy::Fsm;
  Engine engine(*bundle.program, options);
  std::vector<int> first(16);
  for (int i = 0; i < 16; ++i) first[size_t(i)] = i;
  engine.learn_fsm_policy(models::make_batch(bundle.train, first));
  std::string dir = ::testing::TempDir() + "/vjit_save_dir_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string target = dir + "/policy.json";
  std::filesystem::create_directories(target);  // a directory where the file should go: rename fails
  std::string message = user_error_of([&] { engine.save_fsm_policy(target); });
  expect_names(message, {target});
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string(), "policy.json") << "left behind: " << entry.path();
  std::filesystem::remove_all(dir);
}

// A learned policy schedules the vertex types it was learned for: one of
// another type count, set or loaded, is refused naming both counts, and the
// policy in place stays (every infer would fail with it).
TEST(BadInput, FsmPolicyOfAnotherTypeCountIsRefusedAndTheOldOneKept) {
  Fixture f;
  Options options = Options::defaults();
  options.policy = vjit::Options::Policy::Fsm;
  Engine engine(f.program, options);
  const GraphBatch batch = f.good_batch();
  const std::shared_ptr<const FsmPolicy> kept = engine.learn_fsm_policy(batch);
  const int types = f.program.num_types();
  auto other = std::make_shared<const FsmPolicy>(FsmPolicy::learn(batch, types + 2));
  std::string message = user_error_of([&] { engine.set_fsm_policy(other); });
  expect_names(message, {std::to_string(types + 2) + " vertex types", "the program has " + std::to_string(types)});
  EXPECT_EQ(engine.fsm_policy(), kept);
  const std::string path = ::testing::TempDir() + "/vjit_other_types_policy_" + std::to_string(::getpid()) + ".json";
  other->save(path, f.program.signature_string());
  message = user_error_of([&] { engine.load_fsm_policy(path); });
  expect_names(message, {path, std::to_string(types + 2) + " vertex types"});
  EXPECT_EQ(engine.fsm_policy(), kept);
  std::filesystem::remove(path);
  testing::expect_matches_reference(engine, f.program, batch, 1e-4, "after the refused policies");
}

// --- graphs with a documented meaning (include/vjit/graph.h): accepted, and
// the engine computes what the reference interpreter does ---

// A program with variadic types: "sum" (gather_sum, labelled loss, push) and
// "most" (gather_all of at most 3, column max), over the Fixture's "word" leaves.
struct VariadicFixture {
  Model model{3};
  Program program{model};
  int word = -1, sum = -1, most = -1;

  VariadicFixture() {
    Param table = model.add("table", Shape::mat(kVocab, kWidth), Init::Uniform, 0.5f);
    Param w = model.add("W", Shape::mat(kWidth, kWidth));
    Param bias = model.add("b", Shape::vec(kWidth), Init::Uniform, 0.5f);
    Param out = model.add("out", Shape::mat(kClasses, kWidth));
    word = program.add_type("word", [&](Builder& b) { b.scatter(b.tanh(b.pull_embedding(table))); });
    sum = program.add_type("sum", [&](Builder& b) {
      Value h = b.tanh(b.add(b.matmul(w, b.gather_sum(Shape::vec(kWidth))), b.param(bias)));
      b.add_loss(b.softmax_cross_entropy(b.matmul(out, h), b.label(kClasses)));
      b.push(h);
      b.scatter(h);
    });
    most = program.add_type("most", [&](Builder& b) {
      Value h = b.tanh(b.add(b.max_children(b.gather_all(3, Shape::vec(kWidth))), b.param(bias)));
      b.add_loss(b.softmax_cross_entropy(b.matmul(out, h), b.label(kClasses)));
      b.scatter(h);
    });
  }
};

void expect_like_the_reference(const Program& program, const GraphBatch& batch, const std::string& what) {
  Engine engine(program, Options::defaults());
  testing::expect_matches_reference(engine, program, batch, 1e-4, what);
}

// A variadic vertex without children is a leaf: gather_sum is zeros, gather_all
// all padding, max_children 0.
TEST(GraphMeaning, VariadicVertexWithoutChildrenIsALeaf) {
  VariadicFixture f;
  Sample s;
  s.name = "leaves";
  const int a = s.add_vertex(f.sum, {}, -1, 1);
  const int b = s.add_vertex(f.most, {}, -1, 2);
  s.add_vertex(f.sum, {a, b, s.add_vertex(f.word, {}, 4)}, -1, 0);
  expect_like_the_reference(f.program, GraphBatch{{s}}, "variadic leaves");
}

// A child listed twice feeds every slot it is in; its gradient is the sum of
// what each slot sends it.
TEST(GraphMeaning, DuplicateChildFeedsEachSlotItIsIn) {
  VariadicFixture v;
  Sample variadic;
  const int a = variadic.add_vertex(v.word, {}, 2), b = variadic.add_vertex(v.word, {}, 5);
  variadic.add_vertex(v.sum, {a, a, b}, -1, 1);
  variadic.add_vertex(v.most, {b, a, b}, -1, 2);
  expect_like_the_reference(v.program, GraphBatch{{variadic}}, "duplicate variadic children");
  Fixture f;
  Sample fixed;
  const int word = fixed.add_vertex(f.word, {}, 3);
  fixed.add_vertex(f.pair, {word, word}, -1, 1);
  expect_like_the_reference(f.program, GraphBatch{{fixed, f.good_sample("good")}}, "a child in both slots");
}

// An empty sample contributes nothing: no objective, no gradient, no pushes.
TEST(GraphMeaning, EmptySampleContributesNothing) {
  Fixture f;
  GraphBatch with_empty = f.good_batch();
  with_empty.samples.insert(with_empty.samples.begin() + 1, Sample{"empty", {}});
  expect_like_the_reference(f.program, with_empty, "an empty sample");
  Engine engine(f.program, Options::defaults());
  const double without = engine.infer(f.good_batch()).objective;
  EXPECT_NEAR(engine.infer(with_empty).objective, without, 1e-6 * std::abs(without));
}

// A label, token or feature row on a vertex whose type reads none is ignored:
// readers attach them to every vertex, the vertex function decides what it reads.
TEST(GraphMeaning, InputsOnATypeThatReadsNoneAreIgnored) {
  Fixture f;
  GraphBatch extra = f.good_batch();
  for (Sample& s : extra.samples) {
    s.vertices[0].label = 2;  // word: pulls a token, has no loss
    s.vertices[0].features.assign(kWidth, std::nanf(""));  // not pulled: not even checked
    s.vertices[1].label = 1;  // feature: pulls features only
    s.vertices[1].token = 7;
    s.vertices[2].token = 9;  // pair: reads a label, no token
  }
  expect_like_the_reference(f.program, extra, "labels, tokens and features nobody reads");
  Engine engine(f.program, Options::defaults());
  EXPECT_EQ(engine.infer(extra).objective, engine.infer(f.good_batch()).objective);
}

// A NaN made inside the forward pass: the failed step names the first
// non-finite value (its sample, vertex and op), not only the gradient it
// spoiled, without VJIT_CHECK_FINITE; the model is not updated.
TEST(BadInput, NonFiniteObjectiveNamesTheFirstNonFiniteValue) {
  Fixture f;
  Engine engine(f.program, Options::defaults());
  GraphBatch batch = f.good_batch();
  batch.samples[1].vertices[1].features.assign(kWidth, -20.0f);  // log(-20 + 10): NaN
  const Model before = f.model;
  SGD sgd(0.1f);
  const std::string message = user_error_of([&] { engine.train_step(batch, sgd); });
  expect_names(message, {"sample 1 ('good1'), vertex 1 (type 'feature')", " log", "objective", "non-finite gradient"});
  for (int p = 0; p < f.model.size(); ++p) EXPECT_EQ(f.model.param(p).value, before.param(p).value);
  testing::expect_matches_reference(engine, f.program, f.good_batch(), 1e-4, "the good batch after the error");
}


// A wrong name lists the valid ones, so the caller sees the typo.
TEST(BadInput, UnknownParameterNameListsTheModelsParameters) {
  Model model;
  model.add("W_in", Shape::mat(2, 3));
  model.add("bias", Shape::vec(2));
  expect_names(user_error_of([&] { model.find("W-in"); }), {"'W-in'", "W_in", "bias"});
  expect_names(user_error_of([] { Model().find("W"); }), {"'W'", "none"});
}

TEST(BadInput, UnknownVertexTypeNameListsTheProgramsTypes) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(2));
  const std::string message = user_error_of([&] { bundle.program->type_index("lef"); });
  expect_names(message, {"'lef'"});
  for (int type = 0; type < bundle.program->num_types(); ++type) expect_names(message, {bundle.program->type_name(type)});
}

TEST(BadInput, MakeBatchIndexOutsideTheSamples) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(3));
  expect_names(user_error_of([&] { models::make_batch(bundle.train, {0, 3}); }), {"index 3", "indices[1]", "3 samples"});
  expect_names(user_error_of([&] { models::make_batch(bundle.train, {-1}); }), {"index -1", "indices[0]"});
  EXPECT_EQ(models::make_batch(bundle.train, {2, 0}).samples.size(), 2u);
}

// The bundle's vocabulary is the one its tokens were made with: every leaf's
// token is the id of a word of it, and the embedding table has a row per word.
TEST(ModelBundle, CarriesTheVocabularyOfItsTokens) {
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(20));
  const Vocabulary& vocab = bundle.vocab;
  ASSERT_GT(vocab.size(), 2);
  EXPECT_EQ(bundle.model->param(bundle.model->find("embedding")).shape.rows(), vocab.size());
  int leaves = 0;
  for (const Sample& sample : bundle.train)
    for (const Vertex& vertex : sample.vertices)
      if (vertex.token >= 0) {
        ++leaves;
        ASSERT_LT(vertex.token, vocab.size());
        EXPECT_EQ(vocab.id(vocab.word(vertex.token)), vertex.token);
      }
  EXPECT_GT(leaves, 0);
  // Generated ids have no words: an empty vocabulary, not a made-up one.
  EXPECT_EQ(models::make_model("fixed_lstm", testing::small_config(1)).vocab.size(), 0);
}

}  // namespace
}  // namespace vjit
