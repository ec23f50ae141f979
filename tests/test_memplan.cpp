// The memory planners: every layout they make is one the executor can follow —
// rows are a permutation with each task's rows contiguous, every buffer lies
// inside its arena, disjoint from every other and at least as wide as its
// value, and every gather reads exactly the children's scattered rows.
#include <gtest/gtest.h>

#include <algorithm>

#include "jit/pipeline.h"
#include "runtime/memplan.h"
#include "tests/user_error.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using runtime::BatchLayout;
using runtime::Pass;

struct Interval {
  int64_t begin, end;
};

void expect_disjoint_and_inside(std::vector<Interval> buffers, int64_t arena, const std::string& what) {
  std::sort(buffers.begin(), buffers.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_GE(buffers[i].begin, 0) << what;
    EXPECT_LE(buffers[i].end, arena) << what;
    if (i > 0) {
      EXPECT_LE(buffers[i - 1].end, buffers[i].begin) << what << ": buffers overlap";
    }
  }
}

// A model's first samples flattened and scheduled (agenda), with the plans
// lowered under the default options: what a planner reads.
struct Scheduled {
  models::Bundle bundle;
  runtime::ExecPlan plan;
  std::vector<TypeSignature> signatures;
  scheduler::FlatBatch graph;
  scheduler::FlatSchedule schedule;

  Scheduled(const std::string& model, const models::Config& config, int samples)
      : bundle(models::make_model(model, config)),
        plan(jit::lower_program(*bundle.program, Options::defaults())),
        signatures(bundle.program->signatures()) {
    std::vector<int> indices(static_cast<size_t>(samples));
    for (int i = 0; i < samples; ++i) indices[size_t(i)] = i;
    GraphBatch batch = models::make_batch(bundle.train, indices);
    std::vector<int> order, scratch;
    scheduler::validate_and_flatten(signatures, batch, false, graph, order, scratch);
    scheduler::Scheduler scheduler;
    scheduler.run(graph, scheduler::Policy::Agenda, nullptr, schedule);
  }

  BatchLayout layout(const std::string& planner, const runtime::PlannerOptions& options = {}) const {
    BatchLayout out;
    runtime::make_planner(planner, plan, signatures, options)->plan({&graph, &schedule}, out);
    return out;
  }
};

models::Config config_of(int hidden, int samples) {
  models::Config config;
  config.hidden = hidden;
  config.embed = hidden;
  config.train_samples = samples;
  config.test_samples = 0;
  config.tree_fc_leaves = 16;
  return config;
}

class Planners : public ::testing::TestWithParam<std::string> {};

TEST_P(Planners, MakeLayoutsTheExecutorCanFollow) {
  const std::string planner_name = GetParam();
  for (const std::string model : {"tree_lstm", "lattice_lstm", "bilstm_tagger", "tree_fc", "tree_lstm_2type", "mv_rnn"}) {
    const Scheduled scheduled(model, config_of(8, 24), 24);
    const Program& program = *scheduled.bundle.program;
    const runtime::ExecPlan& plan = scheduled.plan;
    const std::vector<TypeSignature>& signatures = scheduled.signatures;
    const scheduler::FlatBatch& graph = scheduled.graph;
    const scheduler::FlatSchedule& schedule = scheduled.schedule;
    const BatchLayout layout = scheduled.layout(planner_name);
    const std::string what = planner_name + " " + model;
    EXPECT_EQ(layout.planner, planner_name);

    // Rows: a permutation, each task's rows contiguous from task_first_row.
    for (int v = 0; v < graph.num_vertices(); ++v) {
      int type = graph.type(v), row = layout.vertex_row[size_t(v)];
      ASSERT_GE(row, 0) << what;
      EXPECT_EQ(layout.rows_of(type)[size_t(row)], v) << what;
    }
    // The copy and padded planners keep the schedule's order; pqtree may
    // reorder a task's vertices, never mix tasks.
    for (int t = 0; t < schedule.num_tasks(); ++t) {
      const int first = layout.task_first_row[size_t(t)];
      const int count = int(schedule.task(t).size());
      std::vector<int> rows = {layout.task_rows(schedule.task_type[size_t(t)], t, count).begin(),
                               layout.task_rows(schedule.task_type[size_t(t)], t, count).end()};
      if (planner_name != "pqtree") {
        EXPECT_TRUE(std::equal(rows.begin(), rows.end(), schedule.task(t).begin())) << what << " task " << t;
      }
      std::sort(rows.begin(), rows.end());
      EXPECT_TRUE(std::equal(rows.begin(), rows.end(), schedule.task(t).begin())) << what << " task " << t;
      for (int r = 0; r < count; ++r)
        EXPECT_EQ(layout.vertex_row[size_t(layout.task_rows(schedule.task_type[size_t(t)], t, count)[size_t(r)])],
                  first + r)
            << what << " task " << t;
    }

    // Buffers.
    int in_place = 0;
    for (Pass pass : {Pass::Forward, Pass::Backward}) {
      std::vector<Interval> buffers;
      for (int type = 0; type < program.num_types(); ++type) {
        const ir::Function& planned = pass == Pass::Forward ? *plan.types[size_t(type)].forward.function
                                                             : *plan.types[size_t(type)].backward.function;
        int64_t rows = layout.type_rows[size_t(type)];
        for (ir::ValueId id = 0; id < planned.size(); ++id) {
          const runtime::ValueLayout& v = layout.value(pass, type, id);
          if (v.offset < 0) continue;
          int64_t width = planned[id].shape.numel();
          if (v.in_concat >= 0) {  // concat in place: its columns of the Concat's rows, nothing else
            const ir::Node& concat = planned[v.in_concat];
            ASSERT_EQ(concat.op, ir::Op::Concat) << what;
            const runtime::ValueLayout& whole = layout.value(pass, type, v.in_concat);
            EXPECT_EQ(v.ld, whole.ld) << what;
            // The argument is the value or a reshape of it.
            auto root_of = [&](ir::ValueId arg) {
              while (planned[arg].op == ir::Op::Reshape) arg = planned[arg].args[0];
              return arg;
            };
            int64_t column = 0;
            int found = 0;
            for (ir::ValueId arg : concat.args) {
              if (root_of(arg) == id) {
                ++found;
                break;
              }
              column += planned[arg].shape.numel();
            }
            EXPECT_EQ(found, 1) << what;
            EXPECT_EQ(v.offset, whole.offset + column) << what;
            ++in_place;
            continue;
          }
          if (planned[id].uniform) {  // stacked weights (matmul merging): one row every vertex reads
            EXPECT_EQ(v.ld, 0) << what;
            buffers.push_back({v.offset, v.offset + width});
            continue;
          }
          EXPECT_GE(v.ld, width) << what;
          if (planner_name == "padded") {
            EXPECT_GT(v.ld, width) << what;
          }
          if (rows > 0) buffers.push_back({v.offset, v.offset + (rows - 1) * v.ld + width});
        }
        if (pass == Pass::Backward && layout.scatter_grad[size_t(type)].offset >= 0 && rows > 0) {
          const runtime::ValueLayout& g = layout.scatter_grad[size_t(type)];
          buffers.push_back({g.offset, g.offset + rows * g.ld});
        }
      }
      expect_disjoint_and_inside(buffers, layout.arena_floats[int(pass)], what);
    }
    // Every model here but Tree-FC (which concatenates only gathered children)
    // concatenates values it computed: h and c, gate gradients.
    if (model != "tree_fc") {
      EXPECT_GT(in_place, 0) << what;
    }

    // Gathers read exactly each vertex's child in that slot.
    for (int t = 0; t < schedule.num_tasks(); ++t) {
      int type = schedule.task_type[size_t(t)];
      for (int slot = 0; slot < signatures[size_t(type)].fixed_arity; ++slot) {
        const runtime::GatherLayout& g = layout.gather(t, slot);
        if (planner_name == "padded") {
          EXPECT_FALSE(g.is_view()) << what;
        }
        int r = 0;
        for (int v : layout.task_rows(type, t, int(schedule.task(t).size()))) {
          int child = graph.children(v)[size_t(slot)];
          runtime::RowRef want{graph.type(child), layout.vertex_row[size_t(child)]};
          runtime::RowRef got = g.is_view() ? runtime::RowRef{g.source_type, g.first_row + r * g.row_step}
                                            : layout.gather_sources[size_t(g.first_source + r)];
          EXPECT_EQ(got.type, want.type) << what;
          EXPECT_EQ(got.row, want.row) << what;
          ++r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPlanner, Planners, ::testing::Values("copy", "padded", "pqtree"));

// Rows a multiple of 256 floats wide get 16 floats more, unless asked not to.
TEST(Planners, WideRowsArePaddedPastCacheSetConflicts) {
  const Scheduled scheduled("tree_lstm", config_of(256, 2), 2);
  for (bool pad : {true, false}) {
    const BatchLayout layout = scheduled.layout("copy", {true, pad});
    int wide = 0;
    for (int type = 0; type < scheduled.bundle.program->num_types(); ++type) {
      const ir::Function& f = *scheduled.plan.types[size_t(type)].forward.function;
      for (ir::ValueId id = 0; id < f.size(); ++id) {
        const runtime::ValueLayout& v = layout.value(Pass::Forward, type, id);
        if (v.offset < 0 || v.in_concat >= 0 || f[id].uniform || f[id].shape.numel() % 256 != 0) continue;
        ++wide;
        EXPECT_EQ(v.ld, f[id].shape.numel() + (pad ? 16 : 0)) << ir::to_string(f, id);
      }
    }
    EXPECT_GT(wide, 0);
  }
}

TEST(Planners, ConcatInPlaceOffGivesEveryValueItsOwnBuffer) {
  const Scheduled scheduled("tree_lstm", config_of(8, 8), 8);
  for (bool inplace : {false, true}) {
    const BatchLayout layout = scheduled.layout("copy", {inplace, true});
    int in_place = 0;
    for (Pass pass : {Pass::Forward, Pass::Backward})
      for (const runtime::ValueLayout& v : layout.values[int(pass)]) in_place += v.in_concat >= 0;
    if (inplace) {
      EXPECT_GT(in_place, 0);
    } else {
      EXPECT_EQ(in_place, 0);
    }
  }
}

// Lattice-LSTM's backward concatenates its gate gradients, a Concat, with the
// word gate's gradient for the lazy weight gradient: with nested concats (the
// CPU executor) the inner Concat lies in place in the outer one, at its
// columns (MakeLayoutsTheExecutorCanFollow checks where); without, no Concat
// lies in another.
TEST(Planners, AConcatLiesInPlaceInsideAnotherOnlyWithNestedConcats) {
  const Scheduled scheduled("lattice_lstm", config_of(8, 8), 8);
  for (bool nested : {false, true}) {
    runtime::PlannerOptions options;
    options.nested_concats = nested;
    const BatchLayout layout = scheduled.layout("copy", options);
    int nested_in_place = 0;
    for (int type = 0; type < int(scheduled.plan.types.size()); ++type) {
      const ir::Function& f = *scheduled.plan.types[size_t(type)].backward.function;
      for (ir::ValueId id = 0; id < f.size(); ++id)
        nested_in_place += f[id].op == ir::Op::Concat && layout.value(Pass::Backward, type, id).in_concat >= 0;
    }
    if (nested) {
      EXPECT_GT(nested_in_place, 0);
    } else {
      EXPECT_EQ(nested_in_place, 0);
    }
  }
}

// A stand-in candidate for auto: it writes its name into the layout and
// counts the batches it laid out.
class NamedPlanner final : public runtime::Planner {
 public:
  NamedPlanner(const char* name, int& batches) : name_(name), batches_(batches) {}
  const char* name() const override { return name_; }
  void plan(const runtime::PlanInput&, BatchLayout& out) override {
    out.planner = name_;
    ++batches_;
  }

 private:
  const char* name_;
  int& batches_;
};

// auto's trials: the candidates alternate, copy first; each one's first batch
// only warms up; the lower median time per vertex wins (a tie keeps copy);
// batches of different sizes compare per vertex; a batch never reported, or
// of no vertices, is not counted.
struct AutoTrial {
  int copy_batches = 0, pqtree_batches = 0;
  runtime::MeasuredPlanner planner{std::make_unique<NamedPlanner>("copy", copy_batches),
                                   std::make_unique<NamedPlanner>("pqtree", pqtree_batches)};
  BatchLayout layout;

  std::string next(double seconds, int64_t vertices) {
    planner.plan({}, layout);
    planner.batch_done(seconds, vertices);
    return layout.planner;
  }
};

TEST(Planners, AutoAlternatesThenKeepsTheFasterPerVertex) {
  constexpr int kEach = runtime::MeasuredPlanner::kTrialsEach;
  AutoTrial trial;
  EXPECT_STREQ(trial.planner.name(), "auto");
  for (int i = 0; i < kEach; ++i) {
    EXPECT_STREQ(trial.planner.in_use(), "auto");
    // copy's warm-up batch is slow (it must not count); afterwards copy takes
    // 2 µs per vertex, pqtree 1 µs on batches twice the size.
    EXPECT_EQ(trial.next(i == 0 ? 1.0 : 200e-6, 100), "copy");
    EXPECT_EQ(trial.next(i == 0 ? 1.0 : 200e-6, 200), "pqtree");
  }
  EXPECT_STREQ(trial.planner.in_use(), "pqtree");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(trial.next(1.0, 100), "pqtree");  // decided: no more timing
  EXPECT_EQ(trial.copy_batches, kEach);
  EXPECT_EQ(trial.pqtree_batches, kEach + 3);
}

TEST(Planners, AutoKeepsCopyUnlessPQTreeIsFaster) {
  AutoTrial tie;
  for (int i = 0; i < 2 * runtime::MeasuredPlanner::kTrialsEach; ++i) tie.next(1e-3, 10);
  EXPECT_STREQ(tie.planner.in_use(), "copy");

  // Median, not mean: one slow copy batch among fast ones does not decide.
  AutoTrial outlier;
  for (int i = 0; i < runtime::MeasuredPlanner::kTrialsEach; ++i) {
    outlier.next(i == 1 ? 1.0 : 1e-3, 10);  // copy: one batch 1000x slower
    outlier.next(2e-3, 10);                 // pqtree: twice copy's usual time
  }
  EXPECT_STREQ(outlier.planner.in_use(), "copy");
}

TEST(Planners, AutoCountsOnlyBatchesReportedWithVertices) {
  AutoTrial trial;
  trial.planner.batch_done(1e-3, 10);  // no plan() before it: ignored
  BatchLayout layout;
  trial.planner.plan({}, layout);      // laid out, never reported (a forward
  trial.planner.plan({}, layout);      // whose backward never came): not counted
  trial.planner.batch_done(1e-3, 0);   // an empty batch: not counted
  for (int i = 0; i < 2 * runtime::MeasuredPlanner::kTrialsEach - 1; ++i) trial.next(1e-3, 10);
  EXPECT_STREQ(trial.planner.in_use(), "auto");  // one timed batch short
  trial.next(1e-3, 10);
  EXPECT_STRNE(trial.planner.in_use(), "auto");
}

TEST(Planners, AnUnknownPlannerIsRefusedWithTheValidOnes) {
  runtime::ExecPlan plan;
  std::vector<TypeSignature> signatures;
  std::string message = test_util::user_error_of([&] { runtime::make_planner("tetris", plan, signatures); });
  EXPECT_NE(message.find("tetris"), std::string::npos) << message;
  EXPECT_NE(message.find("copy, padded"), std::string::npos) << message;
}

}  // namespace
}  // namespace vjit
