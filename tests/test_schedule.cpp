// Batching policies (scheduler/schedule.h): the ED-Batch Fig. 1 graph, schedule
// validity on random DAG batches, the lower bound against brute force, errors,
// and the building blocks (heights, ready lists) on random DAGs.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <set>

#include "scheduler/fsm.h"
#include "scheduler/schedule.h"
#include "tests/figure_one.h"
#include "tests/user_error.h"
#include "vjit/error.h"

namespace vjit::scheduler {
namespace {

using test_graphs::figure_one;
using test_graphs::kI;
using test_graphs::kO;
using test_graphs::kR;

std::vector<int> task_types(const Schedule& schedule) {
  std::vector<int> types;
  for (const Task& task : schedule.tasks) types.push_back(task.type);
  return types;
}

// Every vertex exactly once, each task one type and sorted, children in
// strictly earlier tasks, never fewer tasks than the lower bound.
void expect_valid(const GraphBatch& batch, const Schedule& schedule, const std::string& what) {
  std::map<std::pair<int, int>, int> task_of;
  for (size_t t = 0; t < schedule.tasks.size(); ++t) {
    const Task& task = schedule.tasks[t];
    ASSERT_FALSE(task.vertices.empty()) << what << ": task " << t << " is empty";
    ASSERT_TRUE(std::is_sorted(task.vertices.begin(), task.vertices.end())) << what << ": task " << t;
    for (const VertexRef& r : task.vertices) {
      ASSERT_GE(r.sample, 0);
      ASSERT_LT(r.sample, int(batch.samples.size()));
      ASSERT_LT(r.vertex, int(batch.samples[r.sample].vertices.size()));
      ASSERT_EQ(batch.samples[r.sample].vertices[r.vertex].type, task.type) << what << ": task " << t;
      ASSERT_TRUE(task_of.emplace(std::make_pair(r.sample, r.vertex), int(t)).second)
          << what << ": sample " << r.sample << " vertex " << r.vertex << " scheduled twice";
    }
  }
  ASSERT_EQ(int64_t(task_of.size()), batch.num_vertices()) << what << ": not every vertex scheduled";
  for (size_t s = 0; s < batch.samples.size(); ++s)
    for (size_t v = 0; v < batch.samples[s].vertices.size(); ++v)
      for (int child : batch.samples[s].vertices[v].children)
        ASSERT_LT(task_of.at({int(s), child}), task_of.at({int(s), int(v)}))
            << what << ": sample " << s << " vertex " << v << " runs before its child " << child;
  ASSERT_GE(int(schedule.tasks.size()), schedule.lower_bound) << what;
}

// A random DAG per sample: vertex i takes up to three children among the
// earlier ones (repeats allowed), then the indices are shuffled so that index
// order is not a topological order.
GraphBatch random_dag_batch(std::mt19937& rng, int num_types, int max_samples, int max_vertices) {
  GraphBatch batch;
  const int samples = std::uniform_int_distribution<int>(1, max_samples)(rng);
  for (int s = 0; s < samples; ++s) {
    const int n = std::uniform_int_distribution<int>(0, max_vertices)(rng);
    std::vector<int> perm(n);
    for (int i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    Sample sample;
    sample.vertices.resize(n);
    for (int i = 0; i < n; ++i) {
      Vertex& vertex = sample.vertices[perm[i]];
      vertex.type = std::uniform_int_distribution<int>(0, num_types - 1)(rng);
      const int k = i == 0 ? 0 : std::uniform_int_distribution<int>(0, std::min(3, i))(rng);
      for (int c = 0; c < k; ++c) vertex.children.push_back(perm[std::uniform_int_distribution<int>(0, i - 1)(rng)]);
    }
    batch.samples.push_back(std::move(sample));
  }
  return batch;
}

// The fewest tasks of any Algorithm-1 schedule (each step runs every ready
// vertex of one type), by breadth-first search over the sets of run vertices.
int brute_force_optimum(const GraphBatch& batch, int num_types) {
  std::vector<int> type;
  std::vector<uint32_t> children_mask;
  for (const Sample& s : batch.samples) {
    const int offset = int(type.size());
    for (const Vertex& v : s.vertices) {
      type.push_back(v.type);
      uint32_t mask = 0;
      for (int c : v.children) mask |= 1u << (offset + c);
      children_mask.push_back(mask);
    }
  }
  const int n = int(type.size());
  const uint32_t all = n == 32 ? ~0u : (1u << n) - 1;
  std::map<uint32_t, int> distance{{0u, 0}};
  std::queue<uint32_t> queue;
  queue.push(0);
  while (!queue.empty()) {
    const uint32_t done = queue.front();
    queue.pop();
    if (done == all) return distance[done];
    for (int t = 0; t < num_types; ++t) {
      uint32_t next = done;
      for (int v = 0; v < n; ++v)
        if (!(done >> v & 1) && type[v] == t && (children_mask[v] & ~done) == 0) next |= 1u << v;
      if (next != done && distance.emplace(next, distance[done] + 1).second) queue.push(next);
    }
  }
  return -1;
}

TEST(Schedule, PolicyNames) {
  for (Policy p : all_policies()) EXPECT_EQ(parse_policy(policy_name(p)), p);
  EXPECT_EQ(all_policies().size(), 5u);
  try {
    parse_policy("greedy");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'greedy'"), std::string::npos) << message;
    EXPECT_NE(message.find("depth, agenda, frontier, ratio, fsm"), std::string::npos) << message;
  }
}

TEST(Schedule, FigureOneDepth) {
  const GraphBatch batch = figure_one();
  const Schedule s = make_schedule(batch, 3, Policy::Depth);
  expect_valid(batch, s, "depth");
  EXPECT_EQ(s.tasks.size(), 9u);
  // (depth, type): (0,I) (1,I) (1,O) (2,I) (2,O) (3,I) (3,O) (4,O) (5,R)
  EXPECT_EQ(task_types(s), (std::vector<int>{kI, kI, kO, kI, kO, kI, kO, kO, kR}));
  EXPECT_EQ(s.tasks[0].vertices.size(), 4u);
  EXPECT_EQ(s.tasks[2].vertices.size(), 4u);  // the O vertices of the four leaves
}

TEST(Schedule, FigureOneAgenda) {
  // The paper's walk-through: after the I leaves, O has average depth 13/7 <
  // I's 2, so O runs in the 2nd and again in the 6th task.
  const GraphBatch batch = figure_one();
  const Schedule s = make_schedule(batch, 3, Policy::Agenda);
  expect_valid(batch, s, "agenda");
  EXPECT_EQ(s.tasks.size(), 7u);
  EXPECT_EQ(task_types(s), (std::vector<int>{kI, kO, kI, kI, kI, kO, kR}));
}

TEST(Schedule, FigureOneFrontier) {
  const GraphBatch batch = figure_one();
  const Schedule s = make_schedule(batch, 3, Policy::Frontier);
  expect_valid(batch, s, "frontier");
  EXPECT_EQ(s.tasks.size(), 9u);
  EXPECT_EQ(task_types(s), (std::vector<int>{kI, kI, kO, kI, kO, kI, kO, kO, kR}));
}

TEST(Schedule, FigureOneRatioAndLowerBound) {
  // At the 3rd step the ratio is 1/1 for I and 5/7 for O (the paper's numbers).
  const GraphBatch batch = figure_one();
  const Schedule s = make_schedule(batch, 3, Policy::Ratio);
  expect_valid(batch, s, "ratio");
  EXPECT_EQ(s.tasks.size(), 6u);
  EXPECT_EQ(task_types(s), (std::vector<int>{kI, kI, kI, kI, kO, kR}));
  EXPECT_EQ(s.tasks[4].vertices.size(), 7u);
  EXPECT_EQ(s.lower_bound, 6);  // Depth(G^I) 4 + Depth(G^O) 1 + Depth(G^R) 1
  EXPECT_EQ(batching_lower_bound(batch, 3), 6);
  for (Policy p : {Policy::Depth, Policy::Agenda, Policy::Frontier})
    EXPECT_EQ(make_schedule(batch, 3, p).lower_bound, 6) << policy_name(p);
}

TEST(Schedule, FigureOneRatioValues) {
  const GraphBatch batch = figure_one();
  const scheduler::FlatBatch graph(batch, 3);
  scheduler::FrontierState state(graph);
  state.track_type_frontiers();
  std::vector<int> run;
  for (int step = 0; step < 2; ++step) {  // the I leaves, then I1
    state.take_ready(kI, run);
    state.execute(run);
  }
  EXPECT_EQ(state.num_ready(kO), 5);
  EXPECT_EQ(state.type_frontier(kO), 7);
  EXPECT_EQ(state.num_ready(kI), 1);
  EXPECT_EQ(state.type_frontier(kI), 1);
  EXPECT_EQ(scheduler::choose_ratio(state), kI);
}

TEST(Schedule, ManySamplesBatchTogether) {
  GraphBatch batch;
  for (int i = 0; i < 5; ++i) batch.samples.push_back(figure_one().samples[0]);
  const Schedule ratio = make_schedule(batch, 3, Policy::Ratio);
  expect_valid(batch, ratio, "ratio x5");
  EXPECT_EQ(ratio.tasks.size(), 6u);
  EXPECT_EQ(ratio.tasks[0].vertices.size(), 20u);
  EXPECT_EQ(ratio.tasks[0].vertices[4], (VertexRef{1, 0}));
  EXPECT_EQ(make_schedule(batch, 3, Policy::Agenda).tasks.size(), 7u);
  EXPECT_EQ(make_schedule(batch, 3, Policy::Depth).tasks.size(), 9u);
}

TEST(Schedule, EmptyBatch) {
  GraphBatch batch;
  batch.samples.emplace_back();
  for (Policy p : {Policy::Depth, Policy::Agenda, Policy::Frontier, Policy::Ratio}) {
    const Schedule s = make_schedule(batch, 2, p);
    EXPECT_TRUE(s.tasks.empty()) << policy_name(p);
    EXPECT_EQ(s.lower_bound, 0);
  }
}

TEST(Schedule, RandomDagsGiveValidSchedules) {
  std::mt19937 rng(12345);
  for (int c = 0; c < 300; ++c) {
    const int num_types = 1 + c % 4;
    const GraphBatch batch = random_dag_batch(rng, num_types, 4, 25);
    const FsmPolicy empty(StateEncoding::Sort, num_types, {});  // every step with a choice falls back
    FsmOptions options;
    options.episodes = 20;
    options.check_every = 10;
    options.seed = uint64_t(c);
    const FsmPolicy learned = FsmPolicy::learn(batch, num_types, options);
    const int bound = batching_lower_bound(batch, num_types);
    for (Policy p : all_policies()) {
      for (const FsmPolicy* fsm : {&empty, &learned}) {
        if (p != Policy::Fsm && fsm == &learned) continue;
        const std::string what = std::string(policy_name(p)) + " case " + std::to_string(c);
        const Schedule s = make_schedule(batch, num_types, p, fsm);
        expect_valid(batch, s, what);
        EXPECT_EQ(s.lower_bound, bound) << what;
        if (HasFatalFailure()) return;
      }
    }
    // With no learned states the fsm is exactly the ratio heuristic, which
    // decides every step with more than one type on the frontier.
    const Schedule fallback = make_schedule(batch, num_types, Policy::Fsm, &empty);
    const Schedule ratio = make_schedule(batch, num_types, Policy::Ratio);
    EXPECT_EQ(task_types(fallback), task_types(ratio)) << "case " << c;
    const scheduler::FlatBatch graph(batch, num_types);
    scheduler::FrontierState state(graph);
    int choices = 0;
    std::vector<int> run;
    for (const Task& task : ratio.tasks) {
      int present = 0;
      for (int t = 0; t < num_types; ++t) present += state.num_ready(t) > 0;
      choices += present > 1;
      state.take_ready(task.type, run);
      state.execute(run);
    }
    EXPECT_EQ(fallback.fsm_fallbacks, choices) << "case " << c;
  }
}

TEST(Schedule, LowerBoundAgainstBruteForce) {
  std::mt19937 rng(777);
  for (int c = 0; c < 200; ++c) {
    const int num_types = 2 + c % 3;
    GraphBatch batch = random_dag_batch(rng, num_types, 3, 6);
    if (batch.num_vertices() > 16) continue;
    const int optimum = brute_force_optimum(batch, num_types);
    const int bound = batching_lower_bound(batch, num_types);
    EXPECT_LE(bound, optimum) << "case " << c;
    for (Policy p : {Policy::Depth, Policy::Agenda, Policy::Frontier, Policy::Ratio})
      EXPECT_GE(int(make_schedule(batch, num_types, p).tasks.size()), optimum) << policy_name(p) << " case " << c;
  }
}

TEST(Schedule, LowerBoundCountsChainsThroughOtherTypes) {
  // A(B(A)): the two A vertices depend on each other through B, so G^A has an
  // edge and Depth(G^A) = 2; the bound is 3, which is also the optimum.
  Sample s;
  const int a0 = s.add_vertex(0);
  const int b = s.add_vertex(1, {a0});
  s.add_vertex(0, {b});
  GraphBatch batch;
  batch.samples.push_back(s);
  EXPECT_EQ(batching_lower_bound(batch, 2), 3);
  EXPECT_EQ(make_schedule(batch, 2, Policy::Ratio).tasks.size(), 3u);
}

// The batch with each sample's vertices renumbered in a topological order
// (children first), so that FlatBatch::children_first() holds.
GraphBatch renumbered_children_first(const GraphBatch& batch) {
  GraphBatch out;
  for (const Sample& sample : batch.samples) {
    const int n = int(sample.vertices.size());
    std::vector<int> pending(n), order, index(n);
    std::vector<std::vector<int>> parents(n);
    for (int v = 0; v < n; ++v) {
      pending[v] = int(sample.vertices[v].children.size());
      for (int c : sample.vertices[v].children) parents[c].push_back(v);
      if (pending[v] == 0) order.push_back(v);
    }
    for (size_t head = 0; head < order.size(); ++head)
      for (int p : parents[order[head]])
        if (--pending[p] == 0) order.push_back(p);
    for (int i = 0; i < n; ++i) index[order[i]] = i;
    Sample renumbered;
    for (int v : order) {
      Vertex vertex = sample.vertices[v];
      for (int& c : vertex.children) c = index[c];
      renumbered.vertices.push_back(vertex);
    }
    out.samples.push_back(std::move(renumbered));
  }
  return out;
}

TEST(Schedule, HeightsBothWays) {
  // Heights (longest path up to a vertex without parents) from FlatBatch's
  // fused pass (ids in topological order) and from vertex_heights (Kahn's
  // order) against a direct recursion.
  std::mt19937 rng(31);
  for (int c = 0; c < 100; ++c) {
    const int num_types = 1 + c % 3;
    const GraphBatch shuffled = random_dag_batch(rng, num_types, 4, 25);
    for (const GraphBatch& batch : {shuffled, renumbered_children_first(shuffled)}) {
      const scheduler::FlatBatch graph(batch, num_types, /*with_heights=*/true);
      std::vector<int> expected(graph.num_vertices(), -1);
      std::function<int(int)> height = [&](int v) {
        if (expected[v] < 0) {
          expected[v] = 0;
          for (int p : graph.parents(v)) expected[v] = std::max(expected[v], height(p) + 1);
        }
        return expected[v];
      };
      for (int v = 0; v < graph.num_vertices(); ++v) height(v);
      EXPECT_EQ(graph.heights(), expected) << "case " << c << (graph.children_first() ? " (ids in order)" : "");
      EXPECT_EQ(scheduler::vertex_heights(graph), expected) << "case " << c;
      const std::vector<int> order = scheduler::topological_order(graph);
      std::vector<int> position(order.size());
      for (size_t i = 0; i < order.size(); ++i) position[order[i]] = int(i);
      for (int v = 0; v < graph.num_vertices(); ++v)
        for (int child : graph.children(v)) EXPECT_LT(position[child], position[v]) << "case " << c;
    }
  }
}

TEST(Schedule, TakeReadyGivesTheReadyVerticesSorted) {
  // Random type choices on random DAGs with blocks of isolated vertices in
  // between, so that a type waits over several steps and its ready list is
  // made of several sorted runs, dense or spread over many ids: each take is
  // exactly the ready vertices of its type, sorted, and the statistics agree.
  std::mt19937 rng(4242);
  for (int c = 0; c < 60; ++c) {
    const int num_types = 2 + c % 3;
    GraphBatch batch;
    for (int part = 0; part < 4; ++part) {
      for (Sample& s : random_dag_batch(rng, num_types, 3, 30).samples) batch.samples.push_back(std::move(s));
      Sample filler;
      const int isolated = std::uniform_int_distribution<int>(0, 3000)(rng);
      for (int i = 0; i < isolated; ++i) filler.add_vertex(num_types - 1);
      batch.samples.push_back(std::move(filler));
    }
    if (c % 2) batch = renumbered_children_first(batch);
    const scheduler::FlatBatch graph(batch, num_types, true);
    scheduler::FrontierState state(graph);
    state.track_heights(graph.heights());
    std::vector<char> executed(graph.num_vertices(), 0);
    std::vector<int> run;
    while (!state.done()) {
      std::vector<std::vector<int>> ready(num_types);
      for (int v = 0; v < graph.num_vertices(); ++v) {
        if (executed[v]) continue;
        bool all = true;
        for (int child : graph.children(v)) all = all && executed[child];
        if (all) ready[graph.type(v)].push_back(v);
      }
      std::vector<int> present;
      for (int t = 0; t < num_types; ++t) {
        ASSERT_EQ(state.num_ready(t), int(ready[t].size())) << "case " << c;
        int top = -1;
        for (int v : ready[t]) top = std::max(top, graph.heights()[v]);
        ASSERT_EQ(state.max_ready_height(t), top) << "case " << c;
        if (!ready[t].empty()) present.push_back(t);
      }
      // Mostly the type that waited longest, so that lists pile up.
      const int type = present[std::uniform_int_distribution<int>(0, int(present.size()) - 1)(rng) % 2 == 0
                                   ? 0
                                   : present.size() - 1];
      state.take_ready(type, run);
      ASSERT_EQ(run, ready[type]) << "case " << c;  // ascending, as ready[type] was built
      state.execute(run);
      for (int v : run) executed[v] = 1;
    }
  }
}

TEST(Schedule, RatioStatisticsStartedLateAgree) {
  // The fsm policy starts the ratio statistics at its first fallback, over the
  // vertices not yet run; they must match statistics kept from the start.
  std::mt19937 rng(2024);
  for (int c = 0; c < 100; ++c) {
    const int num_types = 2 + c % 3;
    const GraphBatch batch = random_dag_batch(rng, num_types, 4, 30);
    const scheduler::FlatBatch graph(batch, num_types);
    scheduler::FrontierState early(graph), late(graph);
    early.track_type_frontiers();
    const int start = c % 5;
    auto expect_same = [&](const char* when, int step) {
      for (int t = 0; t < num_types; ++t)
        ASSERT_EQ(early.type_frontier(t), late.type_frontier(t)) << when << " case " << c << " step " << step;
    };
    std::vector<int> run;
    for (int step = 0; !early.done(); ++step) {
      if (step == start) late.track_type_frontiers();
      if (step >= start) expect_same("late", step);
      const int type = scheduler::choose_ratio(early);
      early.take_ready(type, run);
      late.take_ready(type, run);
      early.execute(run);
      late.execute(run);
    }
    if (!late.tracks_type_frontiers()) continue;
    early.reset();
    late.reset();  // the late edges were partial: rebuilt for the whole batch
    for (int step = 0; !early.done(); ++step) {
      expect_same("after reset", step);
      const int type = scheduler::choose_ratio(early);
      early.take_ready(type, run);
      late.take_ready(type, run);
      early.execute(run);
      late.execute(run);
    }
  }
}

TEST(Schedule, Deterministic) {
  std::mt19937 rng(99);
  const GraphBatch batch = random_dag_batch(rng, 3, 6, 40);
  for (Policy p : {Policy::Depth, Policy::Agenda, Policy::Frontier, Policy::Ratio}) {
    const Schedule a = make_schedule(batch, 3, p), b = make_schedule(batch, 3, p);
    ASSERT_EQ(a.tasks.size(), b.tasks.size());
    for (size_t t = 0; t < a.tasks.size(); ++t) {
      EXPECT_EQ(a.tasks[t].type, b.tasks[t].type);
      EXPECT_EQ(a.tasks[t].vertices, b.tasks[t].vertices);
    }
  }
}

using test_util::user_error_of;

TEST(Schedule, Errors) {
  Sample cyclic;
  cyclic.name = "loop";
  cyclic.add_vertex(0);
  cyclic.add_vertex(0, {2});
  cyclic.add_vertex(0, {1});
  GraphBatch batch;
  batch.samples.push_back(cyclic);
  for (Policy p : {Policy::Depth, Policy::Agenda, Policy::Frontier, Policy::Ratio}) {
    const std::string message = user_error_of([&] { make_schedule(batch, 1, p); });
    EXPECT_NE(message.find("cycle"), std::string::npos) << policy_name(p) << ": " << message;
    EXPECT_NE(message.find("sample 'loop' vertex 1"), std::string::npos) << message;
  }
  const FsmPolicy empty(StateEncoding::Sort, 1, {});
  EXPECT_NE(user_error_of([&] { make_schedule(batch, 1, Policy::Fsm, &empty); }).find("cycle"), std::string::npos);

  GraphBatch bad_type = figure_one();
  EXPECT_NE(user_error_of([&] { make_schedule(bad_type, 2, Policy::Depth); }).find("has vertex type 2"),
            std::string::npos);
  bad_type.samples[0].vertices[4].children[1] = 99;
  const std::string child = user_error_of([&] { make_schedule(bad_type, 3, Policy::Agenda); });
  EXPECT_NE(child.find("sample 'fig1' vertex 4 child 1 is vertex 99"), std::string::npos) << child;

  const GraphBatch fig = figure_one();
  EXPECT_NE(user_error_of([&] { make_schedule(fig, 3, Policy::Fsm); }).find("needs a learned FSM"), std::string::npos);
  const FsmPolicy two_types(StateEncoding::Sort, 2, {});
  EXPECT_NE(user_error_of([&] { make_schedule(fig, 3, Policy::Fsm, &two_types); }).find("learned for 2 vertex types"),
            std::string::npos);
}

}  // namespace
}  // namespace vjit::scheduler
