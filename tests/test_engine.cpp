// The batched engine against the reference interpreter: every example model ×
// every policy × batch sizes 1, 7 and 64, lazy batching, fusion and matmul
// merging on and off, and the memory layouts of every planner.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <span>

#include "codegen/isa.h"
#include "ir/flops.h"
#include "jit/engine_access.h"
#include "tests/engine_check.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

constexpr double kTolerance = 1e-4;

using testing::small_config;

std::vector<int> first_indices(int n) {
  std::vector<int> indices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) indices[size_t(i)] = i;
  return indices;
}

struct EngineCase {
  std::string model;
  std::string policy = "agenda";
  bool lazy = true;
  bool fusion = true;
  std::string isa = "auto";
  bool streaming = false;
  std::string memplan = "copy";
  bool merge_matmuls = true;
  bool inplace_concat = true;
  bool epilogue = true;
  bool fuse_across_phases = true;

  std::string name() const {
    std::string n = model + "_" + policy;
    if (!lazy) n += "_nolazy";
    if (!fusion) n += "_nofusion";
    if (isa != "auto") n += "_" + isa;
    if (streaming) n += "_streaming";
    if (memplan != "copy") n += "_" + memplan;
    if (!merge_matmuls) n += "_nomerge";
    if (!inplace_concat) n += "_noinplace";
    if (!epilogue) n += "_noepilogue";
    if (!fuse_across_phases) n += "_nosink";
    return n;
  }
};

void PrintTo(const EngineCase& c, std::ostream* out) { *out << c.name(); }

class EngineMatchesReference : public ::testing::TestWithParam<EngineCase> {};

TEST_P(EngineMatchesReference, ForEveryBatchSize) {
  const EngineCase& c = GetParam();
  models::Bundle bundle = models::make_model(c.model, small_config());
  Options options = Options::defaults();
  apply_flag(options, "policy", c.policy);
  options.tuning.lazy = c.lazy;
  options.tuning.fusion = c.fusion;
  apply_flag(options, "isa", c.isa);
  options.tuning.streaming = c.streaming;
  apply_flag(options, "memplan", c.memplan);
  options.tuning.merge_matmuls = c.merge_matmuls;
  options.tuning.inplace_concat = c.inplace_concat;
  options.tuning.epilogue = c.epilogue;
  options.tuning.fuse_across_phases = c.fuse_across_phases;
  Engine engine(*bundle.program, options);
  for (int batch_size : {1, 7, 64}) {
    GraphBatch batch = models::make_batch(bundle.train, first_indices(batch_size));
    const std::string what = c.model + " " + c.policy + " batch " + std::to_string(batch_size);
    testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance, what);
    // Inference: a forward pass that no backward follows.
    testing::expect_forward_only_matches_reference(engine, *bundle.program, batch, kTolerance, what + ", forward only");
  }
}

// Every policy with the default options; then, with agenda, each optimisation
// off in turn and every ISA path this CPU has (and for var_lstm_gates, every
// policy with matmul merging off).
std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> cases;
  for (const std::string& model : models::model_names()) {
    EngineCase base;
    base.model = model;
    auto add = [&](auto change) {
      EngineCase c = base;
      change(c);
      cases.push_back(c);
    };
    for (const char* policy : {"depth", "agenda", "frontier", "ratio", "fsm"}) add([&](EngineCase& c) { c.policy = policy; });
    add([](EngineCase& c) { c.lazy = false; });
    add([](EngineCase& c) { c.fusion = false; });
    add([](EngineCase& c) { c.streaming = true; });
    // Every row padded past its width, every gather a copy: nothing may
    // assume a leading dimension equal to the width.
    add([](EngineCase& c) { c.memplan = "padded"; });
    add([](EngineCase& c) {
      c.memplan = "padded";
      c.fusion = false;
    });
    // The PQ-tree layout (rows reordered, gathers read in place, steps that
    // read them outside the tasks run task by task) under every policy, and
    // with lazy batching, fusion and streaming in turn changed.
    for (const char* policy : {"depth", "agenda", "frontier", "ratio", "fsm"})
      add([&](EngineCase& c) {
        c.policy = policy;
        c.memplan = "pqtree";
      });
    add([](EngineCase& c) {
      c.memplan = "pqtree";
      c.lazy = false;
    });
    add([](EngineCase& c) {
      c.memplan = "pqtree";
      c.fusion = false;
    });
    add([](EngineCase& c) {
      c.memplan = "pqtree";
      c.streaming = true;
    });
    add([](EngineCase& c) { c.merge_matmuls = false; });
    add([](EngineCase& c) { c.inplace_concat = false; });
    add([](EngineCase& c) { c.epilogue = false; });
    add([](EngineCase& c) { c.fuse_across_phases = false; });
    // The model written for matmul merging: every policy without it too.
    if (model == "var_lstm_gates")
      for (const char* policy : {"depth", "frontier", "ratio", "fsm"})
        add([&](EngineCase& c) {
          c.policy = policy;
          c.merge_matmuls = false;
        });
    for (const char* isa : {"scalar", "avx2", "avx512", "neon"})
      if (codegen::cpu_has(codegen::parse_isa(isa)))
        add([&](EngineCase& c) { c.isa = isa; });
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllModelsAllPolicies, EngineMatchesReference, ::testing::ValuesIn(engine_cases()),
                         [](const ::testing::TestParamInfo<EngineCase>& info) { return info.param.name(); });

// Rows 256 floats wide (hidden 256) are padded to a leading dimension of 272
// (VJIT_PAD_WIDE_ROWS); the small configurations above never are, so these
// models run once at that width, both ways, against the reference.
TEST(WideRows, PaddedAndUnpaddedMatchTheReference) {
  for (const std::string model : {"tree_lstm", "var_lstm"}) {
    models::Config config = small_config(6);
    config.hidden = 256;
    config.embed = 256;
    models::Bundle bundle = models::make_model(model, config);
    GraphBatch batch = models::make_batch(bundle.train, first_indices(6));
    for (bool pad : {true, false}) {
      Options options = Options::defaults();
      options.tuning.pad_wide_rows = pad;
      Engine engine(*bundle.program, options);
      testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance,
                                        model + (pad ? " padded" : " unpadded"));
    }
  }
}

// VJIT_PRETRANSPOSE: the weights that per-task products multiply transposed
// (X·Wᵀ) are read from a transposed copy made once per forward pass. Both ways
// match the reference on a batch large enough for the copies to be made (the
// counter says they were), and training steps agree: a copy kept past the
// optimizer's update would run the next step on the old weights.
TEST(PretransposedWeights, MatchTheReferenceAndFollowEveryUpdate) {
  for (const std::string model : {"tree_lstm", "var_lstm", "mv_rnn"}) {
    models::Config config = small_config(48);
    config.hidden = 32;  // wide enough for the copies (a product of 16 outputs or more)
    models::Bundle bundle = models::make_model(model, config);
    GraphBatch batch = models::make_batch(bundle.train, first_indices(48));
    const Model start = bundle.program->model();
    std::vector<double> losses[2];
    std::vector<Model> trained;
    for (bool on : {true, false}) {
      bundle.program->model() = start;
      Options options = Options::defaults();
      options.tuning.pretranspose = vjit::to_lever(on);
      Engine engine(*bundle.program, options);
      testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance, model + (on ? " on" : " off"));
      if (on) {
        EXPECT_GT(jit::internal_stats(engine).pretransposed_weights, 0) << model << ": no weight was copied transposed";
      } else {
        EXPECT_EQ(jit::internal_stats(engine).pretransposed_weights, 0) << model;
      }
      SGD sgd(0.02f);
      for (int step = 0; step < 3; ++step) losses[on].push_back(engine.train_step(batch, sgd));
      trained.push_back(bundle.program->model());
    }
    for (int step = 0; step < 3; ++step)
      EXPECT_NEAR(losses[1][size_t(step)], losses[0][size_t(step)], 1e-5 * (1 + std::abs(losses[0][size_t(step)])))
          << model << " step " << step;
    for (int p = 0; p < start.size(); ++p)
      for (size_t i = 0; i < start.param(p).value.size(); ++i) {
        const float on = trained[0].param(p).value[i], off = trained[1].param(p).value[i];
        ASSERT_NEAR(on, off, 1e-5 * (1 + std::abs(off))) << model << " parameter " << p;
      }
  }
}

// VJIT_INFER_KERNELS: a forward pass that no backward follows runs fused
// kernels that write only what the forward reads. For every example model,
// with the option on and off: such a pass equals the reference, and so does a
// training step on another, larger batch right after it (its forward must
// write the values the backward reads, which the pass before left unwritten).
// With the option on the Tree-LSTM has such kernels (the counter); off, none;
// the forward-only objective is the same, bit for bit.
TEST(InferenceKernels, ForwardOnlyPassesAndTheTrainingStepsAfterThemMatchTheReference) {
  for (const std::string& model : models::model_names()) {
    models::Bundle bundle = models::make_model(model, small_config());
    const GraphBatch first = models::make_batch(bundle.train, first_indices(7));
    std::vector<int> later(20);
    std::iota(later.begin(), later.end(), 7);
    const GraphBatch second = models::make_batch(bundle.train, later);
    double objective[2] = {0, 0};  // of the forward-only pass, on and off
    for (bool on : {true, false}) {
      Options options = Options::defaults();
      options.tuning.infer_kernels = vjit::to_lever(on);
      Engine engine(*bundle.program, options);
      const std::string what = model + (on ? " on" : " off");
      testing::expect_forward_only_matches_reference(engine, *bundle.program, first, kTolerance,
                                                     what + ", forward only");
      objective[on] = engine.last_result().objective;
      testing::expect_matches_reference(engine, *bundle.program, second, kTolerance, what + ", training after it");
      const int made = engine.compile_info().inference_kernels;
      if (!on) {
        EXPECT_EQ(made, 0) << what;
      } else if (model == "tree_lstm") {
        EXPECT_GT(made, 0) << what << ": no inference kernel";
      }
    }
    // The same operations in the same order: the same bits.
    EXPECT_EQ(objective[1], objective[0]) << model;
  }
}

// VJIT_ROW_PLACEMENT=slices against copy: every example model, under each
// memory planner, matches the reference in a training step and in a
// forward-only pass after it (the copy planner's views, the pqtree planner's
// in-place gradients and the padded planner's copies each meet gathers of part
// of a row). With slices, a Tree-LSTM cell gathers [h_l; h_r] straight into the
// concat its product reads: fewer bytes copied by the layout, the same
// objective bits.
TEST(RowPlacement, SlicesMatchTheReferenceAndCopyBitForBitUnderEachPlanner) {
  for (const std::string memplan : {"copy", "pqtree", "padded"}) {
    for (const std::string& model : models::model_names()) {
      models::Bundle bundle = models::make_model(model, small_config());
      const GraphBatch batch = models::make_batch(bundle.train, first_indices(12));
      double objective[2] = {0, 0};
      int64_t layout_bytes[2] = {0, 0};
      for (bool on : {true, false}) {
        Options options = Options::defaults();
        options.tuning.row_placement = on ? Options::RowPlacement::Slices : Options::RowPlacement::Copy;
        apply_flag(options, "memplan", memplan);
        Engine engine(*bundle.program, options);
        const std::string what = model + " " + memplan + (on ? " slices" : " copy");
        testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance, what);
        objective[on] = engine.last_result().objective;
        engine.reset_stats();
        testing::expect_forward_only_matches_reference(engine, *bundle.program, batch, kTolerance,
                                                       what + ", forward only");
        layout_bytes[on] = jit::internal_stats(engine).layout_copy_bytes;
      }
      EXPECT_EQ(objective[1], objective[0]) << model << " " << memplan;
      if (model == "tree_lstm" && memplan == "copy") {
        EXPECT_LT(layout_bytes[1], layout_bytes[0]) << "the concat of h_l and h_r still copies";
      }
    }
  }
}

// The first 10 trees of a bundle, each with a vertex whose two children are
// its root, and one whose children are that vertex and the first leaf, which
// so has two parents.
GraphBatch trees_with_shared_children(const models::Bundle& bundle) {
  GraphBatch batch = models::make_batch(bundle.train, first_indices(10));
  for (Sample& sample : batch.samples) {
    const int root = int(sample.vertices.size()) - 1;
    const int internal = sample.vertices[size_t(root)].type;
    const int twice = sample.add_vertex(internal, {root, root}, -1, 1);
    sample.add_vertex(internal, {twice, 0}, -1, 2);
  }
  return batch;
}

// The layout's bytes copied with an option off and on (`set`), each engine
// checked against the reference on a training step and a forward-only pass.
std::array<int64_t, 2> layout_bytes_off_on(const Program& program, const GraphBatch& batch, const std::string& memplan,
                                           int threads, const std::string& what,
                                           const std::function<void(Options&, bool)>& set) {
  std::array<int64_t, 2> bytes = {0, 0};
  for (bool on : {false, true}) {
    Options options = Options::defaults();
    set(options, on);
    apply_flag(options, "memplan", memplan);
    options.threads = threads;
    Engine engine(program, options);
    const std::string run = what + " " + memplan + " threads " + std::to_string(threads) + (on ? " on" : " off");
    testing::expect_matches_reference(engine, program, batch, kTolerance, run);
    testing::expect_forward_only_matches_reference(engine, program, batch, kTolerance, run + ", forward only");
    bytes[on] = jit::internal_stats(engine).layout_copy_bytes;
  }
  return bytes;
}

// VJIT_ROW_PLACEMENT=tables where `tables`, else slices (for layout_bytes_off_on).
void tables_or_slices(Options& options, bool tables) {
  options.tuning.row_placement = tables ? Options::RowPlacement::Tables : Options::RowPlacement::Slices;
}

// VJIT_ROW_PLACEMENT=tables against slices, every example model, each
// planner, one and two threads: the reference's objective and gradients, and
// no more bytes copied by the layout with tables. Tables reads a gathered
// value that fused kernels read (a Tree-LSTM's children's c) where it lies,
// through a table of row addresses, and writes a child's gradient that fused
// kernels and elementwise nodes compute (dc, and dh = the sum of two
// products' rows) straight into its scatter-gradient row; a child's kernel
// writes the part of its row a parent gathers into a buffer (a Tree-LSTM's h,
// into [h_l; h_r]; a lattice character's h and c, into the gather_sum of the
// one start state of a word); and a fused kernel that computes part of a
// gradient sent to children (a lattice character's dc to its previous
// character, a word's to its start character) adds it into their
// scatter-gradient rows. So under copy the Tree-LSTM's layout copies nothing,
// and the lattice's copies less under every planner.
TEST(RowPlacement, TablesReadAndWriteChildrenRowsWhereTheyLieInEveryModel) {
  for (const std::string memplan : {"copy", "pqtree", "padded"}) {
    for (const std::string& model : models::model_names()) {
      models::Bundle bundle = models::make_model(model, small_config());
      const GraphBatch batch = models::make_batch(bundle.train, first_indices(12));
      for (int threads : {1, 2}) {
        const std::array<int64_t, 2> layout_bytes =
            layout_bytes_off_on(*bundle.program, batch, memplan, threads, model, tables_or_slices);
        EXPECT_LE(layout_bytes[1], layout_bytes[0]) << model << " " << memplan;
        if (model == "tree_lstm" && memplan == "copy") {
          EXPECT_GT(layout_bytes[0], 0) << "slices copies nothing: the test proves nothing";
          EXPECT_EQ(layout_bytes[1], 0) << "the Tree-LSTM still copies";
        }
        if (model == "lattice_lstm") {
          EXPECT_LT(layout_bytes[1], layout_bytes[0]) << memplan << ": the characters' rows are still copied";
        }
      }
    }
  }
}

// A child forwards its row to the parent that takes most of it: here a leaf
// scatters [h; c] (one fused kernel computes both) to a "chain" vertex that gathers
// h alone (8 floats), listed first, and to a "sum" vertex whose gather_sum of
// one child takes all 16. Forward-only, slices against tables (the chain's
// GEMM reads h at the rows' stride, so tables gathers it too): with slices,
// both gathers copy (24 floats a sample); with tables, the leaf fills the sum,
// and only the chain's gather copies (8).
TEST(RowPlacement, AChildForwardsToTheParentThatTakesMostOfItsRow) {
  Model model;
  Param w = model.add("w", Shape::mat(8, 3));
  Param v = model.add("v", Shape::mat(4, 8));
  Program program(model);
  const int leaf = program.add_type("leaf", [&](Builder& b) {
    Value a = b.matmul(w, b.pull(3));
    Value t = b.tanh(a), s = b.sigmoid(a);
    b.scatter(b.concat({b.mul(t, s), b.add(t, s)}));
  });
  const int chain = program.add_type("chain", [&](Builder& b) {
    Value h = b.slice(b.gather(0, Shape::vec(16)), 0, 8);
    Value y = b.matmul(v, h);
    b.add_loss(b.sum(b.mul(y, y)));
  });
  const int sum = program.add_type("sum", [&](Builder& b) {
    Value s = b.gather_sum(Shape::vec(16));
    b.add_loss(b.sum(b.mul(s, s)));
  });
  GraphBatch batch;
  for (int i = 0; i < 5; ++i) {
    Sample sample;
    sample.name = "sample " + std::to_string(i);
    const int x = sample.add_vertex(leaf);
    sample.vertices[size_t(x)].features = {0.1f * float(i), -0.2f, 0.3f};
    sample.add_vertex(chain, {x});
    sample.add_vertex(sum, {x});
    batch.samples.push_back(sample);
  }
  int64_t bytes[2] = {0, 0};
  for (bool on : {false, true}) {
    Options options = Options::defaults();
    tables_or_slices(options, on);
    Engine engine(program, options);
    testing::expect_forward_only_matches_reference(engine, program, batch, kTolerance, on ? "tables" : "slices");
    bytes[on] = jit::internal_stats(engine).layout_copy_bytes;
  }
  const int64_t samples = int64_t(batch.samples.size()), floats = int64_t(sizeof(float));
  EXPECT_EQ(bytes[0], samples * 24 * floats);
  EXPECT_EQ(bytes[1], samples * 8 * floats) << "the leaf forwarded to the chain, not to the sum";
}

// A child with two parents forwards to one only (here the first: both take
// as much of its row), the other copies; a child read in both
// slots of one parent fills only the slot it was forwarded to (Tree-LSTM,
// where each tree gets a vertex whose two children are the root, and a leaf
// with a second parent).
TEST(RowPlacement, SharedChildrenForwardOnceAndTheOtherGathersCopy) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  const GraphBatch batch = trees_with_shared_children(bundle);
  for (const std::string memplan : {"copy", "pqtree"}) {
    const std::array<int64_t, 2> layout_bytes =
        layout_bytes_off_on(*bundle.program, batch, memplan, 1, "tree_lstm", tables_or_slices);
    EXPECT_LT(layout_bytes[1], layout_bytes[0]) << memplan;
    EXPECT_GT(layout_bytes[1], 0) << memplan << ": the second parents' gathers copied nothing";
  }
}

// A vertex that reads only the second half of its child's state: its gradient
// is added into that half alone (a GatherGrad from start 4, which no
// example model makes), under each planner, and the gather copies or views
// from there.
TEST(GatherSlices, AGatherOfTheSecondHalfOfAStateAndItsGradientMatchTheReference) {
  Model model;
  Param w = model.add("w", Shape::mat(8, 3));
  Param u = model.add("u", Shape::mat(8, 4));
  Program program(model);
  int leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.tanh(b.matmul(w, b.pull(3)))); });
  int node = program.add_type("node", [&](Builder& b) {
    Value c = b.slice(b.gather(0, Shape::vec(8)), 4, 4);
    b.add_loss(b.sum(b.mul(c, c)));
    b.scatter(b.tanh(b.matmul(u, c)));
  });
  GraphBatch batch;
  for (int i = 0; i < 6; ++i) {
    Sample sample;
    sample.name = "chain " + std::to_string(i);
    int v = sample.add_vertex(leaf);
    sample.vertices[size_t(v)].features = {1.0f, 0.25f * float(i), -0.5f};
    for (int depth = 0; depth < 2 + i % 3; ++depth) v = sample.add_vertex(node, {v});
    batch.samples.push_back(sample);
  }
  for (const std::string memplan : {"copy", "pqtree", "padded"}) {
    Options options = Options::defaults();
    apply_flag(options, "memplan", memplan);
    Engine engine(program, options);
    testing::expect_matches_reference(engine, program, batch, kTolerance, memplan);
  }
}

// Layer normalisation in a tree model (gain and bias a mul and an add, as the
// guide shows): the CPU engine's values and gradients equal the reference
// under every planner, fused and unfused, and its FLOPs are counted.
TEST(LayerNorm, ATreeModelUsingItMatchesTheReferenceUnderEveryPlanner) {
  Model model;
  Param w = model.add("w", Shape::mat(6, 3));
  Param u = model.add("u", Shape::mat(6, 12));
  Param gain = model.add("gain", Shape::vec(6));
  Param bias = model.add("bias", Shape::vec(6));
  Param classes = model.add("classes", Shape::mat(3, 6));
  Program program(model);
  auto normalised = [&](Builder& b, Value x) { return b.add(b.mul(b.layer_norm(x), gain), bias); };
  const int leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.tanh(normalised(b, b.matmul(w, b.pull(3))))); });
  const int node = program.add_type("node", [&](Builder& b) {
    Value h = b.tanh(normalised(b, b.matmul(u, b.concat({b.gather(0, Shape::vec(6)), b.gather(1, Shape::vec(6))}))));
    b.add_loss(b.softmax_cross_entropy(b.matmul(classes, h), b.label(3)));
    b.push(h);
    b.scatter(h);
  });
  GraphBatch batch;
  for (int s = 0; s < 9; ++s) {
    Sample sample;
    sample.name = "tree " + std::to_string(s);
    std::vector<int> level;
    for (int i = 0; i < 2 + s % 4; ++i) {
      level.push_back(sample.add_vertex(leaf));
      sample.vertices[size_t(level.back())].features = {0.5f * float(i) - 0.7f, 0.25f * float(s), -0.4f + 0.1f * float(i)};
    }
    while (level.size() > 1) {  // pairs from the left; the last one joins the first parent
      std::vector<int> parents;
      for (size_t i = 0; i + 1 < level.size(); i += 2)
        parents.push_back(sample.add_vertex(node, {level[i], level[i + 1]}, -1, int(i + size_t(s)) % 3));
      if (level.size() % 2 == 1) parents.push_back(level.back());
      level = parents;
    }
    batch.samples.push_back(sample);
  }
  for (const std::string memplan : {"copy", "pqtree", "padded"})
    for (bool fusion : {true, false}) {
      Options options = Options::defaults();
      apply_flag(options, "memplan", memplan);
      options.tuning.fusion = fusion;
      Engine engine(program, options);
      const std::string what = memplan + (fusion ? "" : ", no fusion");
      testing::expect_matches_reference(engine, program, batch, kTolerance, what);
      testing::expect_forward_only_matches_reference(engine, program, batch, kTolerance, what + ", forward only");
    }
  // Its FLOPs: 5 per element forward, 12 for the gradient; the add, the sum
  // and the bias's ParamGrad add 6 each, the pull, the seed and the broadcast
  // none.
  Program counted(model);
  const int type = counted.add_type("norm", [&](Builder& b) { b.add_loss(b.sum(b.layer_norm(b.add(b.pull(6), bias)))); });
  EXPECT_EQ(ir::flops_per_vertex(counted.forward(type)), 6 + 5 * 6 + 6);
  EXPECT_EQ(ir::flops_per_vertex(counted.backward(type)), 12 * 6 + 6);
}

// A weight times a per-vertex matrix, W·M and W·Mᵀ: the weight's gradient is
// a sum of one small product per vertex (Σ dY·Mᵀ, Σ dY·M), which the executor
// sums a group of vertices per GEMM, their operands laid side by side. 310
// vertices: several whole groups and a partial one on each thread, each product
// form, and one thread against two.
TEST(PerVertexProducts, WeightGradientsSummedInGroupsMatchTheReference) {
  Model model;
  Param w = model.add("w", Shape::mat(5, 4));
  Param u = model.add("u", Shape::mat(5, 3));
  Program program(model);
  program.add_type("matrix", [&](Builder& b) {
    Value m = b.tanh(b.reshape(b.pull(12), Shape::mat(4, 3)));
    Value y = b.tanh(b.matmul(w, m));
    Value z = b.tanh(b.matmul(u, b.transpose(m)));
    b.add_loss(b.add(b.sum(b.mul(y, y)), b.sum(b.mul(z, z))));
  });
  GraphBatch batch;
  for (int i = 0; i < 31; ++i) {
    Sample sample;
    sample.name = "matrices " + std::to_string(i);
    for (int j = 0; j < 10; ++j) {
      int v = sample.add_vertex(0);
      for (int e = 0; e < 12; ++e) sample.vertices[size_t(v)].features.push_back(0.1f * float((i * 7 + j * 3 + e) % 17) - 0.8f);
    }
    batch.samples.push_back(sample);
  }
  for (int threads : {1, 2}) {
    Options options = Options::defaults();
    options.threads = threads;
    Engine engine(program, options);
    testing::expect_matches_reference(engine, program, batch, kTolerance, std::to_string(threads) + " threads");
  }
}

// VJIT_ROW_PLACEMENT=tables: children's matrices that only per-vertex products
// read are read where they lie. The "node" type multiplies each child's
// [4, 3] matrix by the other child's vector, one by the other (read as
// [3, 4]), and both, stacked, by a weight, W·[A; B], whose gradient
// Σ dP·[A; B]ᵀ joins their rows; the backward reads them transposed: nothing
// of them is copied. The "mixed" type also reads B elementwise (a fused
// kernel, given a table of row addresses: still read where it lies) and
// multiplies A by a weight on the right (a GEMM over rows at a
// stride: A is copied, and so [A; B]). Random binary trees of both types over
// leaves; each planner, one and two threads, off and on: the reference's
// objective and gradients, and with tables, fewer bytes copied by the layout
// than with slices, but not none where "mixed" vertices exist.
namespace {

struct PointerProgram {
  Model model;
  Param w = model.add("w", Shape::mat(4, 8));
  Param u = model.add("u", Shape::mat(3, 8));
  Param v = model.add("v", Shape::mat(3, 3));
  Program program{model};
  int leaf = -1, node = -1, mixed = -1;

  PointerProgram() {
    leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.tanh(b.pull(15))); });
    node = program.add_type("node", [&](Builder& b) { cell(b, false); });
    mixed = program.add_type("mixed", [&](Builder& b) { cell(b, true); });
  }

  void cell(Builder& b, bool mixed_reads) {
    Value left = b.gather(0, Shape::vec(15)), right = b.gather(1, Shape::vec(15));
    Value ha = b.slice(left, 0, 3), hb = b.slice(right, 0, 3);
    Value A = b.reshape(b.slice(left, 3, 12), Shape::mat(4, 3)), B = b.reshape(b.slice(right, 3, 12), Shape::mat(4, 3));
    Value h = b.tanh(b.matmul(u, b.concat({b.matmul(A, hb), b.matmul(B, ha)})));
    Value P = b.tanh(b.matmul(w, b.concat({A, B})));
    Value C = b.matmul(A, b.reshape(B, Shape::mat(3, 4)));
    Value loss = b.add(b.sum(b.mul(h, h)), b.scale(b.sum(b.mul(C, C)), 0.1));
    if (mixed_reads) loss = b.add(loss, b.add(b.sum(b.tanh(B)), b.sum(b.matmul(A, v))));
    b.add_loss(loss);
    b.scatter(b.concat({h, b.reshape(P, Shape::vec(12))}));
  }

  // Random binary trees: internal vertices of `types`, in turn.
  GraphBatch trees(std::vector<int> types) const {
    GraphBatch batch;
    for (int i = 0; i < 12; ++i) {
      Sample sample;
      sample.name = "tree " + std::to_string(i);
      std::vector<int> open;
      for (int j = 0; j < 3 + i % 5; ++j) {
        int x = sample.add_vertex(leaf);
        for (int e = 0; e < 15; ++e)
          sample.vertices[size_t(x)].features.push_back(0.1f * float((i * 5 + j * 3 + e) % 13) - 0.6f);
        open.push_back(x);
      }
      for (int k = 0; open.size() > 1; ++k) {
        const size_t at = size_t(i + k) % (open.size() - 1);
        int parent = sample.add_vertex(types[size_t(k) % types.size()], {open[at], open[at + 1]});
        open.erase(open.begin() + long(at), open.begin() + long(at) + 2);
        open.insert(open.begin() + long(at), parent);
      }
      batch.samples.push_back(sample);
    }
    return batch;
  }
};

}  // namespace

TEST(RowPlacement, PerVertexProductsReadChildrenWhereTheyLieAndMatchTheReference) {
  PointerProgram p;
  for (const std::vector<int>& types : {std::vector<int>{p.node}, {p.mixed}, {p.node, p.mixed}}) {
    const GraphBatch batch = p.trees(types);
    const bool has_node = types.front() == p.node;
    for (const std::string memplan : {"copy", "pqtree", "padded"}) {
      for (int threads : {1, 2}) {
        const std::string what = "types " + std::to_string(types.size()) + (has_node ? " node" : " mixed");
        const std::array<int64_t, 2> layout_bytes =
            layout_bytes_off_on(p.program, batch, memplan, threads, what, tables_or_slices);
        EXPECT_LT(layout_bytes[1], layout_bytes[0]) << memplan << ": the children's matrices are copied";
        if (types.size() == 1 && !has_node) {
          EXPECT_GT(layout_bytes[1], 0) << memplan << ": a matrix a GEMM over rows reads was not copied";
        }
      }
    }
  }
}

// The GEMM epilogue adding a gradient's other term: a Tree-LSTM's dh =
// U_fᵀ·df + its columns of U_iouᵀ·diou is one GEMM whose rows start as those
// columns (no elementwise add), batched with the other child's, and written
// through the children's row table under VJIT_ROW_PLACEMENT=tables: straight into
// a child's gradient row where it is that row's one contribution, else into
// its own rows for the GatherGrad to add (here the first leaf of each tree
// has two parents, and a vertex gathers the root in both slots). Each
// planner, slices and tables, epilogue and batching off and on: the
// reference's objective and gradients.
TEST(GemmEpilogue, GradientTermsAddedByBatchedGemmsMatchTheReferenceWithSharedChildren) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  const GraphBatch batch = trees_with_shared_children(bundle);
  for (const std::string memplan : {"copy", "pqtree"})
    for (bool tables : {false, true})
      layout_bytes_off_on(*bundle.program, batch, memplan, 2, tables ? "tree_lstm tables" : "tree_lstm slices",
                          [&](Options& options, bool on) {
                            tables_or_slices(options, tables);
                            options.tuning.epilogue = on;
                            options.tuning.batch_gemms = vjit::to_lever(on);
                          });
  auto primitives = [&](bool epilogue) {
    Options options = Options::defaults();
    options.tuning.epilogue = epilogue;
    Engine engine(*bundle.program, options);
    engine.forward(batch);
    engine.backward();
    return engine.stats().primitives;
  };
  const PrimitiveCounts on = primitives(true), off = primitives(false);
  EXPECT_GT(on[Primitive::GemmBatched], 0);
  EXPECT_LT(on[Primitive::Elementwise], off[Primitive::Elementwise]) << "the adds of dh's terms";
  EXPECT_LT(on.total(), off.total());
}

// VJIT_ROW_PLACEMENT=tables in the backward: MV-RNN's gradients of a child's
// vector and matrix are written by the products straight into the child's
// scatter-gradient row where that row has no other contribution, and into
// their own rows, then added, where it has: here each tree gets a vertex
// whose two children are its root, and one whose children are that vertex and
// the first leaf, which so has two parents. Each planner, slices and tables:
// the reference's objective and gradients, and with tables, fewer bytes copied.
TEST(RowPlacement, GradientsOfSharedChildrenAreAddedAndTheOthersWrittenInPlace) {
  models::Bundle bundle = models::make_model("mv_rnn", small_config());
  const GraphBatch batch = trees_with_shared_children(bundle);
  for (const std::string memplan : {"copy", "pqtree"}) {
    const std::array<int64_t, 2> layout_bytes =
        layout_bytes_off_on(*bundle.program, batch, memplan, 1, "mv_rnn", tables_or_slices);
    EXPECT_LT(layout_bytes[1], layout_bytes[0]) << memplan;
  }
  // With tables, the planner gives the gathered matrices and their concat no buffer:
  // the batch's forward values need fewer bytes (named by VJIT_MAX_MEMORY's
  // error, "values N").
  auto value_bytes = [&](bool tables) {
    Options options = Options::defaults();
    tables_or_slices(options, tables);
    options.max_memory = 1024;
    Engine engine(*bundle.program, options);
    const std::string message = test_util::user_error_of([&] { engine.forward(batch); });
    std::smatch found;
    EXPECT_TRUE(std::regex_search(message, found, std::regex("values ([0-9]+)"))) << message;
    return found.empty() ? int64_t(0) : std::stoll(found[1]);
  };
  const int64_t on = value_bytes(true), off = value_bytes(false);
  EXPECT_GT(on, 0);
  EXPECT_LT(on, off);
}

// VJIT_VERTEX_GEMM: MV-RNN's products run one per vertex match the reference
// on every back end the option accepts; one that cannot be used here is an
// error naming the variable. The option reaches them: the reference back end
// (double sums) and VJIT_GEMM's give different bits.
TEST(VertexGemm, EveryValueMatchesTheReferenceAndReachesThePerVertexProducts) {
  models::Bundle bundle = models::make_model("mv_rnn", small_config());
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(12));
  std::map<std::string, double> objective;
  for (std::string_view value : option_values::vertex_gemm) {
    Options options = Options::defaults();
    apply_flag(options, "vertex_gemm", value);
    std::unique_ptr<Engine> engine;
    try {
      engine = std::make_unique<Engine>(*bundle.program, options);
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("VJIT_VERTEX_GEMM=" + std::string(value)), std::string::npos) << e.what();
      continue;
    }
    testing::expect_matches_reference(*engine, *bundle.program, batch, kTolerance, "vertex_gemm=" + std::string(value));
    objective[std::string(value)] = engine->last_result().objective;
  }
  ASSERT_TRUE(objective.count("same") && objective.count("reference"));
  EXPECT_NE(objective["reference"], objective["same"]);
}

// bf16 products (VJIT_GEMM=onednn_bf16, AVX-512 BF16 or AMX): every matrix
// product on operands rounded to bfloat16. The stated accuracy: every example
// model's objective, outputs and gradients within 5e-2 (relative to the
// largest entry) of the double reference at hidden 64, except Tree-FC's: its
// complete 256-leaf trees chain eight levels of products each way, and its
// gradients come within 0.21 (0.25 here), as they did before the bf16 back end
// was made faster. Where the CPU lacks bf16 the engine refuses the option with
// the reason, and the test says so.
TEST(Bf16Products, EveryExampleModelStaysWithinTheStatedToleranceOfTheReference) {
  for (const std::string& model : models::model_names()) {
    models::Config config = small_config(8);
    config.hidden = 64;
    config.embed = 64;
    models::Bundle bundle = models::make_model(model, config);
    Options options = Options::defaults();
    options.tuning.gemm = vjit::Options::Gemm::OneDnnBf16;
    std::unique_ptr<Engine> engine;
    try {
      engine = std::make_unique<Engine>(*bundle.program, options);
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("AVX-512 BF16 or AMX"), std::string::npos) << e.what();
      GTEST_SKIP() << "skipped: " << e.what();
    }
    GraphBatch batch = models::make_batch(bundle.train, first_indices(8));
    const double tolerance = model == "tree_fc" ? 0.25 : 5e-2;
    testing::expect_matches_reference(*engine, *bundle.program, batch, tolerance, model + " bf16");
  }
}

// Lazy batching: each weight gradient is one GEMM per vertex type that uses it,
// however many samples or vertices the batch has.
TEST(LazyBatching, WeightGradientGemmsDoNotGrowWithTheBatch) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Engine engine(*bundle.program, Options::defaults());
  std::vector<int64_t> gemms;
  for (int batch_size : {2, 16, 64}) {
    engine.reset_stats();
    GraphBatch batch = models::make_batch(bundle.train, first_indices(batch_size));
    engine.forward(batch);
    engine.backward();
    gemms.push_back(jit::internal_stats(engine).param_grad_gemms);
    EXPECT_GT(engine.stats().tasks, 2);
  }
  EXPECT_GT(gemms[0], 0);
  EXPECT_EQ(gemms[0], gemms[1]);
  EXPECT_EQ(gemms[1], gemms[2]);
}

TEST(LazyBatching, PerTaskGradientsGrowWithTheTasksWhenOff) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Options options = Options::defaults();
  options.tuning.lazy = false;
  Engine engine(*bundle.program, options);
  GraphBatch batch = models::make_batch(bundle.train, first_indices(16));
  engine.forward(batch);
  engine.backward();
  EXPECT_GE(jit::internal_stats(engine).param_grad_gemms, engine.stats().tasks);
}

// Gather copies are one call per (task, slot), never one per vertex (whole
// gathers: VJIT_ROW_PLACEMENT=slices gathers each slice of a state on its own).
TEST(Copies, OneCallPerTaskAndSlot) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Options options = Options::defaults();
  options.tuning.row_placement = Options::RowPlacement::Copy;
  Engine engine(*bundle.program, options);
  GraphBatch batch = models::make_batch(bundle.train, first_indices(32));
  engine.forward(batch);
  const EngineStats& s = engine.stats();
  // Per task at most two gathers (internal) or one pull (leaf), plus the lazy pushes.
  EXPECT_LE(s.copy_calls, 2 * s.tasks + int64_t(bundle.program->num_types()));
  EXPECT_LT(s.copy_calls, batch.num_vertices());
  EXPECT_GT(s.copy_bytes, 0);
}

// Matmul merging runs W1·x and W2·x as one GEMM over [W1; W2]: where the
// Model does not hold them as one block (here VJIT_PARAM_LAYOUT is off; see
// tests/test_param_layout.cpp) the CPU copies both weights into that block
// once per pass and counts the bytes (stacked_weight_bytes).
TEST(Copies, StackedWeightsOfMergedProductsAreCountedOncePerPass) {
  Model model;
  Param w1 = model.add("W1", Shape::mat(3, 4)), w2 = model.add("W2", Shape::mat(5, 4));
  Program program(model);
  const int leaf = program.add_type("leaf", [&](Builder& b) {
    Value x = b.pull(4);
    Value y = b.concat({b.matmul(w1, x), b.matmul(w2, x)});
    b.add_loss(b.sum(b.mul(y, y)));
  });
  GraphBatch batch;
  for (int i = 0; i < 3; ++i) {
    Sample sample;
    sample.name = "sample " + std::to_string(i);
    sample.vertices[size_t(sample.add_vertex(leaf))].features = {0.1f * float(i), -0.2f, 0.3f, 0.4f};
    batch.samples.push_back(sample);
  }
  const int64_t stacked = (3 + 5) * 4 * int64_t(sizeof(float));
  for (bool merge : {false, true}) {
    Options options = Options::defaults();
    options.tuning.merge_matmuls = merge;
    options.tuning.param_layout = vjit::Lever::Off;
    Engine engine(program, options);
    testing::expect_forward_only_matches_reference(engine, program, batch, kTolerance, merge ? "on" : "off");
    EXPECT_EQ(jit::internal_stats(engine).stacked_weight_bytes, merge ? stacked : 0) << "merging " << merge;
  }
}

TEST(Engine, RejectsAnInvalidGraphWithTheSampleNamed) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Engine engine(*bundle.program, Options::defaults());
  GraphBatch batch = models::make_batch(bundle.train, first_indices(3));
  batch.samples[1].vertices.back().children.push_back(int(batch.samples[1].vertices.size()) + 5);
  try {
    engine.forward(batch);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(batch.samples[1].name), std::string::npos) << e.what();
  }
  // The engine still works after the error.
  GraphBatch good = models::make_batch(bundle.train, first_indices(3));
  EXPECT_GT(engine.forward(good), 0.0);
}

// --- what used to crash: each is now an error naming the culprit, or works ---

using test_util::user_error_of;

TEST(EngineErrors, ProgramChangedAfterTheEngineWasBuilt) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Engine engine(*bundle.program, Options::defaults());
  int extra = bundle.program->add_type("extra", [](Builder& b) { b.scatter(b.constant(Shape::vec(8), 1.0)); });
  GraphBatch batch = models::make_batch(bundle.train, first_indices(2));
  batch.samples[0].add_vertex(extra);
  std::string message = user_error_of([&] { engine.forward(batch); });
  EXPECT_NE(message.find("build a new Engine"), std::string::npos) << message;
  EXPECT_NE(message.find("vertex types"), std::string::npos) << message;
}

TEST(EngineErrors, ABatchDestroyedAfterForwardStillHasItsBackward) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Engine engine(*bundle.program, Options::defaults());
  RunOptions run;
  run.seed = 3;
  engine.forward(models::make_batch(bundle.train, first_indices(8)), run);  // a temporary batch
  engine.backward();
  std::vector<std::vector<float>> grads = engine.gradients();
  GraphBatch batch = models::make_batch(bundle.train, first_indices(8));
  Evaluation<double> ref = reference_evaluate(*bundle.program, parameter_values<double>(bundle.program->model()), batch, run);
  for (size_t p = 0; p < grads.size(); ++p)
    EXPECT_LE(testing::tensor_error(grads[p], ref.param_grads[p]), kTolerance) << bundle.program->model().param(int(p)).name;
}

// A parameter's values are a view of a fixed size: assigning another count is
// refused, naming both counts, and leaves the values as they were.
TEST(EngineErrors, ParameterValuesOfTheWrongSize) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  ParamData& param = bundle.program->model().param(1);
  const std::vector<float> before = param.value;
  const std::vector<float> shorter(param.value.size() - 3, 0.5f);
  std::string message = user_error_of([&] { param.value = shorter; });
  EXPECT_NE(message.find(std::to_string(before.size())), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(shorter.size())), std::string::npos) << message;
  EXPECT_EQ(param.value, before);
}

TEST(EngineErrors, ResultsBeforeAnyRun) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Engine engine(*bundle.program, Options::defaults());
  EXPECT_NE(user_error_of([&] { engine.gradients(); }).find("no backward()"), std::string::npos);
  EXPECT_NE(user_error_of([&] { engine.gradient_rows(); }).find("no backward()"), std::string::npos);
  EXPECT_NE(user_error_of([&] { engine.last_result(); }).find("no forward()"), std::string::npos);
  EXPECT_NE(user_error_of([&] { engine.backward(); }).find("needs a forward()"), std::string::npos);
  GraphBatch batch = models::make_batch(bundle.train, first_indices(2));
  RunOptions no_gradients;
  no_gradients.backward = false;
  engine.forward(batch, no_gradients);
  EXPECT_NO_THROW(engine.last_result());
  EXPECT_NE(user_error_of([&] { engine.backward(); }).find("needs a forward()"), std::string::npos);
  EXPECT_NE(user_error_of([&] { engine.gradients(); }).find("no backward()"), std::string::npos);
}

// The copy planner reads a gather in place where the children's rows lie at a
// constant stride and only the task reads the gathered value: in Tree-FC's
// complete trees, child 0 of a level's nodes are every other row of the level
// below. The padded planner copies every gather (children forwarding their
// rows would fill the gathers instead: VJIT_ROW_PLACEMENT=slices here).
TEST(MemoryPlan, StridedChildrenAreGatheredInPlace) {
  models::Bundle bundle = models::make_model("tree_fc", small_config());
  GraphBatch batch = models::make_batch(bundle.train, first_indices(16));
  Options options = Options::defaults();
  options.tuning.row_placement = Options::RowPlacement::Slices;
  Engine copy(*bundle.program, options);
  copy.forward(batch);
  options.tuning.memplan = vjit::Options::MemoryPlanner::Padded;
  Engine padded(*bundle.program, options);
  padded.forward(batch);
  EXPECT_GT(jit::internal_stats(copy).gather_views, copy.stats().tasks / 2);
  EXPECT_EQ(jit::internal_stats(padded).gather_views, 0);
  EXPECT_LT(copy.stats().copy_calls, padded.stats().copy_calls);
  EXPECT_DOUBLE_EQ(copy.last_result().objective, padded.last_result().objective);
}

// The PQ-tree layout on chains (the language models, sentences of every
// length): every task's predecessors are consecutive rows in its order, so each
// gather_sum is read in place and its gradient computed in place, and neither
// pass copies for the layout; values and gradients still equal the reference.
// On trees it keeps the reference too, and copies no more than the copy planner
// (which on the Tree-LSTM copies nothing: its children forward h into the
// parents' [h_l; h_r], and c is read where it lies).
TEST(MemoryPlan, PQTreeReadsChainsInPlaceInBothPasses) {
  for (const std::string model : {"var_lstm", "fixed_lstm", "tree_lstm", "lattice_lstm"}) {
    models::Bundle bundle = models::make_model(model, small_config());
    GraphBatch batch = models::make_batch(bundle.train, first_indices(16));
    Options options = Options::defaults();
    Engine copy(*bundle.program, options);
    testing::expect_matches_reference(copy, *bundle.program, batch, kTolerance, model + " copy");
    options.tuning.memplan = vjit::Options::MemoryPlanner::PqTree;
    Engine pqtree(*bundle.program, options);
    testing::expect_matches_reference(pqtree, *bundle.program, batch, kTolerance, model + " pqtree");
    if (model != "tree_lstm") {
      EXPECT_GT(jit::internal_stats(copy).layout_copy_bytes, 0) << model;
    }
    EXPECT_LE(jit::internal_stats(pqtree).layout_copy_bytes, jit::internal_stats(copy).layout_copy_bytes) << model;
    EXPECT_GE(jit::internal_stats(pqtree).aligned_batches, jit::internal_stats(pqtree).aligned_satisfied) << model;
    if (model == "var_lstm" || model == "fixed_lstm") {
      EXPECT_EQ(jit::internal_stats(pqtree).layout_copy_bytes, 0) << model;
      EXPECT_EQ(jit::internal_stats(pqtree).aligned_satisfied, jit::internal_stats(pqtree).aligned_batches) << model;
      EXPECT_GT(jit::internal_stats(pqtree).gather_views, pqtree.stats().tasks) << model;  // forward and backward
    }
    // Sentences of one length: each step's children are the rows the step
    // before wrote, so the views continue one another and a weight gradient
    // is a few GEMMs over every step's rows, not one per step.
    if (model == "fixed_lstm") {
      EXPECT_LE(jit::internal_stats(pqtree).param_grad_gemms, 2 * jit::internal_stats(copy).param_grad_gemms) << model;
    }
    // A Tree-LSTM's views are never read as views: its children's c through
    // row pointers, their h from the [h_l; h_r] buffer the children forward
    // into. So no phase step runs task by task: the weight gradients are one
    // GEMM per parameter over all rows, as under copy.
    if (model == "tree_lstm") {
      EXPECT_EQ(jit::internal_stats(pqtree).param_grad_gemms, jit::internal_stats(copy).param_grad_gemms) << model;
      EXPECT_EQ(pqtree.stats().gemm_calls, copy.stats().gemm_calls) << model;
    }
  }
}

// VJIT_MEMPLAN=auto: copy and pqtree take turns on the first batches (every
// one equal to the reference, whichever lays it out), then one of the two is
// kept; training and inference batches both count.
TEST(MemoryPlan, AutoTriesBothLayoutsThenKeepsOneAndStaysExact) {
  for (const std::string model : {"tree_lstm", "var_lstm", "lattice_lstm"}) {
    models::Bundle bundle = models::make_model(model, small_config());
    Options options = Options::defaults();
    options.tuning.memplan = vjit::Options::MemoryPlanner::Auto;
    options.deterministic = vjit::Lever::Off;
    Engine engine(*bundle.program, options);
    constexpr int kTrials = 8;  // Engine::memory_planner: auto's first 8 timed batches
    for (int step = 0; step < kTrials + 2; ++step) {
      if (step < kTrials) {
        EXPECT_EQ(engine.memory_planner(), "auto") << model << " batch " << step;
      }
      GraphBatch batch = models::make_batch(bundle.train, first_indices(4 + step));
      if (step % 2 == 0) {
        testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance,
                                          model + " auto, batch " + std::to_string(step));
      } else {
        RunOptions inference;
        inference.training = false;
        inference.backward = false;
        Evaluation<double> ref = reference_evaluate(*bundle.program, parameter_values<double>(bundle.program->model()),
                                                    batch, inference);
        EXPECT_NEAR(engine.infer(batch).objective, ref.objective, kTolerance * std::max(1.0, std::abs(ref.objective)))
            << model << " auto, inference batch " << step;
      }
    }
    const std::string kept = engine.memory_planner();
    EXPECT_TRUE(kept == "copy" || kept == "pqtree") << model << ": " << kept;
    // Both layouts ran: pqtree poses alignment constraints, copy does not.
    EXPECT_GT(jit::internal_stats(engine).aligned_batches, 0) << model;
  }
}

// Timing decides auto's layout, and the two layouts sum weight gradients in
// different orders: with bitwise determinism asked for, it is refused, saying
// what to do. On the GPU (pqtree is CPU only) auto is copy.
TEST(MemoryPlan, AutoNeedsDeterminismOff) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  Options options = Options::defaults();
  options.tuning.memplan = vjit::Options::MemoryPlanner::Auto;
  options.deterministic = vjit::Lever::On;
  const std::string message = test_util::user_error_of([&] { Engine engine(*bundle.program, options); });
  EXPECT_NE(message.find("VJIT_DETERMINISTIC=0"), std::string::npos) << message;
  options.tuning.memplan = vjit::Options::MemoryPlanner::PqTree;
  Engine pqtree(*bundle.program, options);
  EXPECT_EQ(pqtree.memory_planner(), "pqtree");
}

// The optimizer state (Adam's moments and t) lives in each engine's parameter
// store: one Adam driving two engines steps each exactly as its own Adam would,
// and reset() makes the engines' states start over.
TEST(OptimizerState, LivesInTheEnginesParameterStore) {
  models::Config config = small_config();
  config.dropout = 0;
  auto weights = [](const models::Bundle& b) {
    std::vector<std::vector<float>> w;
    for (int p = 0; p < b.model->size(); ++p) w.push_back(b.model->param(p).value);
    return w;
  };
  models::Bundle a = models::make_model("tree_lstm", config), b = models::make_model("tree_lstm", config);
  models::Bundle a2 = models::make_model("tree_lstm", config), b2 = models::make_model("tree_lstm", config);
  Engine ea(*a.program, Options::defaults()), eb(*b.program, Options::defaults());
  Engine ea2(*a2.program, Options::defaults()), eb2(*b2.program, Options::defaults());
  Adam shared(0.01f), own_a(0.01f), own_b(0.01f);
  GraphBatch first = models::make_batch(a.train, first_indices(8));
  GraphBatch second = models::make_batch(a.train, {8, 9, 10, 11, 12});
  for (const GraphBatch* batch : {&first, &second, &first}) {
    ea.train_step(*batch, shared);
    eb.train_step(batch == &first ? second : first, shared);
    ea2.train_step(*batch, own_a);
    eb2.train_step(batch == &first ? second : first, own_b);
  }
  EXPECT_EQ(weights(a), weights(a2));
  EXPECT_EQ(weights(b), weights(b2));
  EXPECT_EQ(shared.steps(), 6);

  // After reset() the engine's next step is a first step of Adam again.
  shared.reset();
  Adam fresh(0.01f);
  ea.train_step(second, shared);
  ea2.train_step(second, fresh);
  EXPECT_EQ(weights(a), weights(a2));
}

TEST(Engine, TrainingLowersTheLoss) {
  models::Config config = small_config();
  config.dropout = 0;
  models::Bundle bundle = models::make_model("tree_lstm", config);
  Engine engine(*bundle.program, Options::defaults());
  Adam adam(0.05f);
  GraphBatch batch = models::make_batch(bundle.train, first_indices(16));
  double first = engine.train_step(batch, adam);
  double last = first;
  for (int i = 0; i < 30; ++i) last = engine.train_step(batch, adam);
  EXPECT_LT(last, 0.7 * first);
}

// train_step hands the optimizer the rows of the embedding table that the
// batch looked up: with LazyAdam and weight decay, the update equals a step
// given exactly those rows (a row more would decay, a row less would not move),
// on the engine's threads or not, and every other row keeps its value.
TEST(Engine, TrainStepUpdatesTheLookedUpRowsOfTheEmbeddingTable) {
  models::Config config = small_config();
  config.dropout = 0;
  models::Bundle engine_side = models::make_model("tree_lstm", config);
  models::Bundle by_hand = models::make_model("tree_lstm", config);
  Options options = Options::defaults();
  options.threads = 2;
  Engine engine(*engine_side.program, options);
  Engine twin(*by_hand.program, options);
  Adam adam(0.05f, 0.9f, 0.999f, 1e-8f, 0.01f), twin_adam(0.05f, 0.9f, 0.999f, 1e-8f, 0.01f);
  const Model& model = *engine_side.model;
  const int table = model.find("embedding").id;
  const int64_t cols = model.param(table).shape.cols();
  const std::vector<float> initial = model.param(table).value;

  std::vector<int32_t> tokens;
  for (int step = 0; step < 3; ++step) {
    GraphBatch batch = models::make_batch(engine_side.train, first_indices(8 + 8 * step));
    engine.train_step(batch, adam);
    RunOptions run;
    run.seed = uint64_t(step + 1);
    twin.forward(batch, run);
    twin.backward();
    std::vector<GradientRows> rows(size_t(model.size()));
    rows[size_t(table)].all = false;
    for (const Sample& sample : batch.samples)
      for (const Vertex& v : sample.vertices)
        if (v.token >= 0) rows[size_t(table)].rows.push_back(v.token);
    std::vector<int32_t>& listed = rows[size_t(table)].rows;
    std::sort(listed.begin(), listed.end());
    listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
    EXPECT_EQ(twin.gradient_rows()[size_t(table)].rows, listed) << "step " << step;
    EXPECT_FALSE(twin.gradient_rows()[size_t(table)].all);
    twin_adam.step(*by_hand.model, twin.gradients(), rows);
    for (int p = 0; p < model.size(); ++p)
      EXPECT_EQ(model.param(p).value, by_hand.model->param(p).value) << "step " << step << ", " << model.param(p).name;
    tokens.insert(tokens.end(), listed.begin(), listed.end());
  }
  std::sort(tokens.begin(), tokens.end());
  const int64_t vocab = model.param(table).shape.rows();
  ASSERT_LT(int64_t(std::unique(tokens.begin(), tokens.end()) - tokens.begin()), vocab) << "some rows are not looked up";
  for (int64_t row = 0; row < vocab; ++row) {
    const bool looked_up = std::binary_search(tokens.begin(), tokens.end(), int32_t(row));
    bool moved = false;
    for (int64_t k = row * cols; k < (row + 1) * cols; ++k) moved |= model.param(table).value[size_t(k)] != initial[size_t(k)];
    EXPECT_EQ(moved, looked_up) << "embedding row " << row;
  }
}

// The CPU-only levers on the CPU: auto is on (the engine runs them resolved,
// Options::resolve), on does the same, bit for bit, and off does without;
// so is the row placement's auto tables, and copy does without. CompileInfo
// counts what two of them make: the inference kernels (VJIT_INFER_KERNELS)
// and the accumulating kernels (VJIT_ROW_PLACEMENT=tables).
TEST(Levers, AutoIsOnOnTheCpuAndOffDoesWithout) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config());
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(7));
  struct Made {
    Options resolved;
    CompileInfo info;
    double objective;
  };
  auto run = [&](Lever lever) {
    Options options = Options::defaults();
    Options::Tuning& t = options.tuning;
    for (Lever* each : {&t.pretranspose, &t.infer_kernels, &t.param_layout}) *each = lever;
    t.row_placement = lever == Lever::Auto ? Options::RowPlacement::Auto
                      : lever == Lever::On ? Options::RowPlacement::Tables
                                           : Options::RowPlacement::Copy;
    Engine engine(*bundle.program, options);
    RunOptions forward_and_backward;
    forward_and_backward.backward = true;
    const double objective = engine.forward(batch, forward_and_backward);
    return Made{engine.options(), engine.compile_info(), objective};
  };
  const Made automatic = run(Lever::Auto), on = run(Lever::On), off = run(Lever::Off);
  EXPECT_EQ(automatic.resolved, on.resolved) << "auto is on on the CPU";
  const Options::Tuning& t = off.resolved.tuning;
  for (Lever lever : {t.pretranspose, t.infer_kernels, t.param_layout}) EXPECT_EQ(lever, Lever::Off);
  EXPECT_EQ(t.row_placement, Options::RowPlacement::Copy);
  EXPECT_EQ(automatic.objective, on.objective) << "the same operations: the same bits";
  EXPECT_NEAR(off.objective, on.objective, 1e-4 * std::abs(on.objective));
  for (const Made* made : {&automatic, &on}) {
    EXPECT_GT(made->info.inference_kernels, 0);
    EXPECT_GT(made->info.accumulating_kernels, 0);
  }
  EXPECT_EQ(off.info.inference_kernels, 0);
  EXPECT_EQ(off.info.accumulating_kernels, 0);
}

}  // namespace
}  // namespace vjit

namespace vjit {
namespace {

// A learned policy is saved with the program's signature; an engine of another
// program refuses it, naming what differs.
TEST(FsmPolicyFiles, SavedWithTheProgramAndRejectedByAnother) {
  models::Config config = small_config();
  models::Bundle trees = models::make_model("tree_lstm_outputs", config);
  models::Bundle lattices = models::make_model("lattice_lstm", config);
  Options options = Options::defaults();
  options.policy = vjit::Options::Policy::Fsm;
  std::string path = ::testing::TempDir() + "/vjit_fsm_policy.json";
  {
    Engine engine(*trees.program, options);
    engine.learn_fsm_policy(models::make_batch(trees.train, first_indices(32)));
    engine.save_fsm_policy(path);
  }
  Engine same(*trees.program, options);
  same.load_fsm_policy(path);
  same.track_lower_bound(true);
  GraphBatch batch = models::make_batch(trees.train, first_indices(16));
  same.forward(batch);
  EXPECT_EQ(same.stats().tasks, same.stats().lower_bound) << "ED-Batch's trees with outputs reach the bound";
  Engine other(*lattices.program, options);
  try {
    other.load_fsm_policy(path);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(FsmPolicyFiles, CacheDirKeepsThePolicyAcrossEngines) {
  models::Bundle bundle = models::make_model("tree_lstm_2type", small_config());
  Options options = Options::defaults();
  options.policy = vjit::Options::Policy::Fsm;
  options.cache_dir = ::testing::TempDir() + "/vjit_cache_" + std::to_string(::getpid());
  GraphBatch batch = models::make_batch(bundle.train, first_indices(32));
  {
    Engine first(*bundle.program, options);
    first.forward(batch);  // learns and saves
  }
  Engine second(*bundle.program, options);
  ASSERT_TRUE(second.fsm_policy()) << "loaded at engine start";
  std::filesystem::remove_all(options.cache_dir);
}

// useful_flops: each vertex counts its type's F, and ∂F once backward() ran,
// however the engine batched, merged or fused them.
TEST(EngineStats, UsefulFlopsAreThePerTypeCountsTimesTheVertices) {
  Model model;
  Param w = model.add("w", Shape::mat(4, 3));
  Program program(model);
  int leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.tanh(b.matmul(w, b.pull(3)))); });
  int node = program.add_type("node", [&](Builder& b) { b.add_loss(b.sum(b.sigmoid(b.gather(0, Shape::vec(4))))); });
  // F by hand: leaf 2·4·3 (matmul) + 4 (tanh); node 4 (sigmoid) + 4 (sum).
  EXPECT_EQ(ir::flops_per_vertex(program.forward(leaf)), 28);
  EXPECT_EQ(ir::flops_per_vertex(program.forward(node)), 8);
  GraphBatch batch;
  for (int i = 0; i < 5; ++i) {
    Sample sample;
    int l = sample.add_vertex(leaf);
    sample.vertices[size_t(l)].features = {1.0f, float(i), -0.5f};
    sample.add_vertex(node, {l});
    batch.samples.push_back(sample);
  }
  Engine engine(program, Options::defaults());
  engine.infer(batch);
  EXPECT_EQ(engine.stats().useful_flops, 5.0 * (28 + 8));
  engine.reset_stats();
  engine.forward(batch);
  engine.backward();
  double backward = double(ir::flops_per_vertex(program.backward(leaf)) + ir::flops_per_vertex(program.backward(node)));
  EXPECT_GE(backward, 2.0 * 4 * 3);  // at least the weight gradient's multiply-add
  EXPECT_EQ(engine.stats().useful_flops, 5.0 * (28 + 8 + backward));
}

// The peak measurement: sane numbers only; no speed is asserted.
TEST(Roofline, GemmPeakReturnsFinitePositiveFiguresForTheThreadCount) {
  Options options = Options::defaults();
  options.threads = 2;
  GemmPeakOptions peak;
  peak.seconds = 0.001;
  peak.size = 64;
  GemmPeak result = measure_gemm_peak(options, peak);
  EXPECT_EQ(result.threads, 2);
  EXPECT_EQ(result.size, 64);
  EXPECT_FALSE(result.backend.empty());
  EXPECT_TRUE(std::isfinite(result.one_thread_gflops_per_s));
  EXPECT_TRUE(std::isfinite(result.all_threads_gflops_per_s));
  EXPECT_GT(result.one_thread_gflops_per_s, 0);
  EXPECT_GT(result.all_threads_gflops_per_s, 0);
  peak.size = -1;
  EXPECT_THROW(measure_gemm_peak(options, peak), UserError);
}

// --- VJIT_CHECK_FINITE and non-finite inputs ---

// Leaves scatter their feature row; a node adds its two children's rows, takes
// the log and pushes 2·log(sum): a sum ≤ 0 makes the log -inf or NaN.
struct LogProgram {
  Model model{1};
  Program program{model};
  int leaf = 0, node = 0;

  LogProgram() {
    leaf = program.add_type("leaf", [](Builder& f) { f.scatter(f.pull(2)); });
    node = program.add_type("node", [](Builder& f) {
      auto sum = f.add(f.gather(0, Shape::vec(2)), f.gather(1, Shape::vec(2)));
      f.push(f.scale(f.log(sum), 2.0));
    });
  }
  // The value id of the node type's log.
  ir::ValueId log_id() const {
    const ir::Function& f = program.forward(node);
    for (ir::ValueId id = 0; id < f.size(); ++id)
      if (f[id].op == ir::Op::Log) return id;
    return -1;
  }
  // Samples of leaves a, b under a node; in `bad_sample` the second leaf's
  // features make the sum's element 1 zero: log gives -inf there.
  GraphBatch batch(int samples, int bad_sample) const {
    GraphBatch batch;
    for (int s = 0; s < samples; ++s) {
      Sample sample;
      const int a = sample.add_vertex(leaf), b = sample.add_vertex(leaf);
      sample.vertices[size_t(a)].features = {1.0f + float(s), 2.0f};
      sample.vertices[size_t(b)].features = {0.5f, s == bad_sample ? -2.0f : 1.0f};
      sample.add_vertex(node, {a, b});
      batch.samples.push_back(sample);
    }
    return batch;
  }
};

Options check_finite_options(bool fusion, int threads, bool streaming) {
  Options options = Options::defaults();
  options.check_finite = true;
  options.tuning.fusion = fusion;
  options.threads = threads;
  options.tuning.streaming = streaming;
  return options;
}

TEST(CheckFinite, NamesTheSampleVertexTypeAndOpOfTheFirstNonFiniteValue) {
  LogProgram p;
  const std::string log_op = "%" + std::to_string(p.log_id()) + " log";
  for (bool fusion : {false, true})
    for (int threads : {1, 2})
      for (bool streaming : {false, true}) {
        Engine engine(p.program, check_finite_options(fusion, threads, streaming));
        const std::string message = user_error_of([&] { engine.infer(p.batch(5, 3)); });
        const std::string what = "fusion " + std::to_string(fusion) + ", threads " + std::to_string(threads) +
                                 ", streaming " + std::to_string(streaming) + ": " + message;
        EXPECT_NE(message.find("VJIT_CHECK_FINITE: sample 3, vertex 2 (type 'node')"), std::string::npos) << what;
        EXPECT_NE(message.find("-inf at element 1"), std::string::npos) << what;
        // Unfused, the log is its own step; fused, the group that holds it is named with its ops.
        EXPECT_NE(message.find(log_op), std::string::npos) << what;
        EXPECT_EQ(message.find("fused kernel") != std::string::npos, fusion) << what;
      }
}

TEST(CheckFinite, TheEngineStaysUsableAndOffMeansNoCheck) {
  LogProgram p;
  Engine checked(p.program, check_finite_options(true, 2, false));
  Engine unchecked(p.program, Options::defaults());
  EXPECT_THROW(checked.infer(p.batch(4, 1)), UserError);
  // The next batch runs, and gives what an engine without the check gives.
  const GraphBatch good = p.batch(4, -1);
  EXPECT_EQ(checked.infer(good).pushes.values(), unchecked.infer(good).pushes.values());
  EXPECT_GT(checked.forward(good, RunOptions{}), -1e30);  // no loss: the objective is 0
  // Off (the default): no check, the non-finite value is returned as it is.
  const Evaluation<float> silent = unchecked.infer(p.batch(4, 1));
  const std::span<const float> pushed = silent.pushes.at(1, 2, 0);
  EXPECT_TRUE(std::isnan(pushed[1]) || std::isinf(pushed[1])) << pushed[1];
  EXPECT_FALSE(Options::defaults().check_finite);
}

TEST(CheckFinite, RefusedOnTheCudaExecutorAtConstruction) {
  // Without a GPU VJIT_DEVICE=cuda is refused for that reason first; the
  // check_finite refusal is then tested by test_cuda_engine on a GPU.
  LogProgram p;
  Options options = check_finite_options(true, 1, false);
  options.device = vjit::Options::Device::Cuda;
  const std::string message = user_error_of([&] { Engine engine(p.program, options); });
  EXPECT_TRUE(message.find("VJIT_CHECK_FINITE=1 runs on the CPU executor only") != std::string::npos ||
              message.find("VJIT_DEVICE=cuda: ") != std::string::npos)
      << message;
}

TEST(NonFiniteInputs, AFeatureIsAUserErrorNamingSampleAndVertex) {
  LogProgram p;
  Engine engine(p.program, Options::defaults());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    GraphBatch batch = p.batch(3, -1);
    batch.samples[2].vertices[1].features[0] = bad;
    const std::string message = user_error_of([&] { engine.infer(batch); });
    EXPECT_NE(message.find("sample 2, vertex 1 (type 'leaf'): feature 0 is"), std::string::npos) << message;
    EXPECT_NE(message.find("inputs must be finite"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(engine.infer(p.batch(3, -1)));
}

// A gradient summed over many rows (a scale vector read by one task of 100k
// vertices, as a bias is): Σ_r x_r is summed pairwise, within a few float
// roundings of the double sum (one chain of 100k additions is off by about
// 1e-6 of it, 15× PyTorch's error on bias gradients), and bitwise the same
// on 1 and 2 threads.
TEST(Engine, GradientSummedOverManyRowsIsPairwise) {
  constexpr int kWidth = 4, kRows = 100000;
  Model model;
  const Param scale = model.add("scale", Shape::vec(kWidth), Init::Ones);
  Program program(model);
  const int leaf =
      program.add_type("leaf", [&](Builder& b) { b.add_loss(b.sum(b.mul(b.param(scale), b.pull(kWidth)))); });
  GraphBatch batch;
  batch.samples.resize(kRows);
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 1e-3f);
  std::vector<double> exact(kWidth, 0.0);
  for (Sample& sample : batch.samples) {
    sample.add_vertex(leaf);
    std::vector<float>& x = sample.vertices[0].features;
    for (int i = 0; i < kWidth; ++i) exact[size_t(i)] += x.emplace_back(1.0f + noise(rng));
  }
  std::vector<std::vector<float>> gradients;
  for (int threads : {1, 2}) {
    Options options = Options::defaults();
    options.threads = threads;
    Engine engine(program, options);
    engine.forward(batch);
    engine.backward();
    gradients.push_back(engine.gradients()[0]);
  }
  for (int i = 0; i < kWidth; ++i)
    EXPECT_NEAR(gradients[0][size_t(i)], exact[size_t(i)], 2e-7 * exact[size_t(i)]) << "column " << i;
  EXPECT_EQ(gradients[0], gradients[1]) << "1 and 2 threads";
}

}  // namespace
}  // namespace vjit
