#pragma once
// Batching policies: which vertices of a GraphBatch are evaluated together, and
// in which order. A schedule is a list of tasks; a task is one vertex type plus
// vertices of that type whose children all ran in earlier tasks, so the vertex
// function of that type runs once, batched, over all of them. Fewer tasks mean
// fewer kernel launches; the backward pass replays the tasks in reverse.
//
// Every policy below is an instance of ED-Batch's Algorithm 1 except `depth`,
// which batches by static level: repeatedly choose a type a and run every ready
// vertex of type a (a vertex is ready once all its children ran).
//
//   depth     TensorFlow Fold: one task per (depth, type), depth = longest path
//             down to a leaf (leaves are at depth 0); ordered by depth, then type.
//   agenda    DyNet: the ready type whose not-yet-run vertices (all of them in
//             the batch, ready or not) have the lowest average depth.
//   frontier  Cavs: every ready vertex runs at each step, one task per type.
//   ratio     ED-Batch's sufficient-condition heuristic: the ready type a that
//             maximises |Frontier_a(G_t)| / |Frontier(G_t^a)| (see below).
//   fsm       ED-Batch: a learned finite-state machine (scheduler/fsm.h).
//
// The fsm's default state encoding (`critical`, scheduler/fsm.h) also uses each
// vertex's height: the number of vertices on the longest path from it up to a
// vertex without parents, i.e. how many tasks must still follow it (its
// critical path, as in Hu's level scheduling).
//
// Definitions (ED-Batch, ICML'23, section 2.3 and appendix A):
//   G_t             the batch's graph with the vertices run before step t removed.
//   Frontier(G_t)   the ready vertices; Frontier_a(G_t) those of type a.
//   G^a             the subgraph "composed solely of type a operations": its
//                   vertices are the type-a vertices, with an edge u -> v when v
//                   is reachable from u through vertices of other types only
//                   (the reference implementation's `typewise_args`: the nearest
//                   type-a descendants). Its transitive closure is exactly the
//                   dependency order among type-a vertices.
//   Frontier(G_t^a) the not-yet-run type-a vertices with no not-yet-run type-a
//                   descendant. Every ready type-a vertex is in it, so the
//                   ratio is in (0, 1]; when it is 1, running a now is part of
//                   some shortest schedule (Lemma 2.1).
//   lower bound     sum over types a of Depth(G^a), the number of vertices on the
//                   longest chain of G^a (appendix A.3): type a needs at least
//                   that many tasks of its own.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vjit/graph.h"

namespace vjit::scheduler {

class FsmPolicy;

enum class Policy { Depth, Agenda, Frontier, Ratio, Fsm };

const char* policy_name(Policy policy);
// Throws UserError listing the valid names.
Policy parse_policy(const std::string& name);
const std::vector<Policy>& all_policies();

struct VertexRef {
  int sample = 0;
  int vertex = 0;
  friend bool operator==(const VertexRef&, const VertexRef&) = default;
  friend auto operator<=>(const VertexRef&, const VertexRef&) = default;
};

struct Task {
  int type = 0;
  std::vector<VertexRef> vertices;  // sorted by (sample, vertex)
};

struct Schedule {
  std::vector<Task> tasks;
  int lower_bound = 0;            // ED-Batch A.3; no schedule has fewer tasks
  double schedule_seconds = 0.0;  // time to choose the tasks (the lower bound, a
                                  // diagnostic, is computed outside it)
  int fsm_fallbacks = 0;          // fsm steps the learned table did not decide (its
                                  // encoding's fallback did: scheduler/fsm.h)
};

// Schedules every vertex of `batch`. Vertex types must lie in [0, num_types).
// Policy::Fsm needs `fsm`, learned for the same number of types. Throws
// UserError for an out-of-range type or child, or a cycle. (The engine uses
// scheduler::Scheduler over a batch it flattened once, without allocating.)
Schedule make_schedule(const GraphBatch& batch, int num_types, Policy policy,
                       const FsmPolicy* fsm = nullptr);

// The ED-Batch lower bound on the number of tasks of any schedule of `batch`.
int batching_lower_bound(const GraphBatch& batch, int num_types);



// ---------------------------------------------------------------------------
// Building blocks shared by the policies and the FSM learner (scheduler/fsm.cpp).

// The batch with vertices numbered globally: id = offset of the sample + vertex
// index, so sorting ids sorts by (sample, vertex). Children and parents are kept
// in compressed (CSR) lists. With `with_heights`, also each vertex's height
// (vertex_heights), computed in the pass that lists the parents when the ids
// are a topological order.
class FlatBatch {
 public:
  FlatBatch() = default;
  FlatBatch(const GraphBatch& batch, int num_types, bool with_heights = false);
  // Flattens another batch into this object, keeping the capacity of its
  // buffers: once they have grown to the largest batch seen, no allocation.
  void assign(const GraphBatch& batch, int num_types, bool with_heights = false);

  // The batch itself: only while it is alive (backward() may run after the
  // caller destroyed it; what backward needs is copied, like first_sample).
  const GraphBatch& batch() const { return *batch_; }
  // GraphBatch::first_sample, copied: dropout masks of backward() need it.
  int first_sample() const { return first_sample_; }
  int num_samples() const { return int(sample_offset_.size()) - 1; }
  // The id of vertex 0 of sample s; sample_offset(num_samples()) = num_vertices().
  int sample_offset(int s) const { return sample_offset_[s]; }
  int id(VertexRef r) const { return sample_offset_[r.sample] + r.vertex; }
  // Copies of each vertex's token and label, read after the batch is gone.
  int token(int v) const { return tokens_[size_t(v)]; }
  int label(int v) const { return labels_[size_t(v)]; }
  // The batch's vertex itself: only while the batch is alive.
  const Vertex& vertex(int v) const {
    return batch_->samples[size_t(refs_[v].sample)].vertices[size_t(refs_[v].vertex)];
  }

  int num_vertices() const { return int(types_.size()); }
  int num_types() const { return num_types_; }
  int type(int v) const { return types_[v]; }
  VertexRef ref(int v) const { return refs_[v]; }
  std::span<const int> children(int v) const {
    return {child_ids_.data() + child_begin_[v], child_ids_.data() + child_begin_[v + 1]};
  }
  std::span<const int> parents(int v) const {
    return {parent_ids_.data() + parent_begin_[v], parent_ids_.data() + parent_begin_[v + 1]};
  }
  // Empty unless constructed with_heights.
  const std::vector<int>& heights() const { return heights_; }
  // Whether every child's index is below its parent's in the sample (samples
  // built bottom-up): then the ids are a topological order.
  bool children_first() const { return children_first_; }
  // "sample <name or index> vertex <i>", for error messages.
  std::string describe(int v) const;

 private:
  const GraphBatch* batch_ = nullptr;
  int first_sample_ = 0;
  int num_types_ = 0;
  bool children_first_ = true;
  std::vector<int> sample_offset_;
  std::vector<int> fill_;  // scratch of assign()
  std::vector<int> types_, tokens_, labels_;
  std::vector<VertexRef> refs_;
  std::vector<int> child_begin_, child_ids_;
  std::vector<int> parent_begin_, parent_ids_;
  std::vector<int> heights_;
};

// Checks every sample against the program's vertex types, with the checks and
// messages of validate_and_order (include/vjit/graph.h), and flattens the batch
// into `flat`; `order` receives a topological order. Once the buffers have
// grown to the largest batch seen, it allocates nothing (unless it throws).
void validate_and_flatten(std::span<const TypeSignature> types, const GraphBatch& batch, bool with_heights,
                          FlatBatch& flat, std::vector<int>& order, std::vector<int>& scratch);

// Children before parents: the ids when children_first(), else Kahn's algorithm.
// Throws UserError on a cycle.
std::vector<int> topological_order(const FlatBatch& graph);

// Longest path from each vertex up to a vertex without parents (those: 0).
// Throws on a cycle.
std::vector<int> vertex_heights(const FlatBatch& graph);

// Sum over types of Depth(G^a), given the vertices in any topological order.
int lower_bound(const FlatBatch& graph, std::span<const int> topological_order);

// The state of a batch being run task by task: which vertices are ready, and,
// when asked for, the statistics the agenda and ratio policies choose by.
// Each step costs O(vertices run + their parent edges + types).
class FrontierState {
 public:
  FrontierState() = default;
  explicit FrontierState(const FlatBatch& graph);
  // Starts over on `graph` (nothing has run, no statistic tracked), keeping the
  // capacity of every buffer.
  void bind(const FlatBatch& graph);

  // Back to "nothing has run"; keeps the statistics that are tracked.
  void reset();
  bool done() const { return num_executed_ == graph_->num_vertices(); }
  const FlatBatch& graph() const { return *graph_; }
  int num_types() const { return graph_->num_types(); }
  int num_ready(int type) const { return int(ready_[type].size()); }
  bool has_ready() const;

  // Moves the ready vertices of `type`, sorted by id, into `out`. They are not
  // run yet: call execute(out) after taking every type of this step.
  void take_ready(int type, std::vector<int>& out);
  // Marks `vertices` (all previously taken) as run; parents whose children
  // have all run become ready.
  void execute(std::span<const int> vertices);
  // Throws UserError naming a vertex on or above a cycle; call when nothing is
  // ready but the batch is not done.
  [[noreturn]] void throw_cycle() const;

  // Agenda statistic: average depth of the not-yet-run vertices of a type.
  // `depth` must outlive this object.
  void track_depths(const std::vector<int>& depth);
  // Whether type a's not-yet-run vertices have a strictly lower average depth
  // than type b's (both must have some).
  bool lower_average_depth(int a, int b) const;

  // Critical-path statistic: the greatest height among the ready vertices of a
  // type (-1 when none is ready). `height` (vertex_heights) must outlive this
  // object. Costs O(1) per vertex made ready.
  void track_heights(const std::vector<int>& height);
  bool tracks_heights() const { return height_ != nullptr; }
  int max_ready_height(int type) const { return max_ready_height_[type]; }

  // Ratio statistic |Frontier(G_t^a)|. The first call builds G^a's edges among
  // the vertices not yet run, by a search from each down through vertices of
  // other types that skips subgraphs without its type (cost: the regions
  // searched; linear for chains, trees and loss vertices over them; quadratic
  // at worst, e.g. type-a vertices on each of a long run of other-type
  // vertices with a type-a vertex at its bottom).
  void track_type_frontiers();
  bool tracks_type_frontiers() const { return tracking_type_frontiers_; }
  int type_frontier(int type) const { return type_frontier_[type]; }

 private:
  std::vector<int> pending_topological_order() const;
  void build_type_edges();
  void recount_depths();
  void recount_ready_heights();
  void recount_type_frontiers();

  const FlatBatch* graph_ = nullptr;
  int num_executed_ = 0;
  std::vector<int> pending_children_;        // children not yet run, per vertex
  std::vector<std::vector<int>> ready_;      // per type
  std::vector<int> first_descent_;           // per type: where ready_ first goes down, or -1
  std::vector<char> more_descents_;          // per type: whether it goes down again later
  std::vector<int> released_;                // execute's scratch: one slot per vertex, and one
  std::vector<int> merge_buffer_;            // take_ready's sorting
  std::vector<uint64_t> id_bits_;
  std::vector<char> executed_;

  const std::vector<int>* depth_ = nullptr;  // agenda
  std::vector<int64_t> remaining_depth_sum_, remaining_count_;

  const std::vector<int>* height_ = nullptr;  // fsm, critical encoding
  std::vector<int> max_ready_height_;          // per type

  bool tracking_type_frontiers_ = false;     // ratio
  bool type_edges_complete_ = false;         // built before anything ran
  std::vector<int> type_parent_begin_, type_parent_ids_;  // G^a edges, child -> parent
  std::vector<int> type_child_count_, pending_type_children_;
  std::vector<int> type_frontier_;
};

// Longest path from each vertex down to a leaf (leaves: 0), into `depth`
// (resized). Throws on a cycle.
void vertex_depths(const FlatBatch& graph, std::vector<int>& depth, std::vector<int>& order_scratch);
// Children before parents, into `order`; throws UserError on a cycle.
void topological_order(const FlatBatch& graph, std::vector<int>& order, std::vector<int>& pending_scratch);
// The same without throwing: false on a cycle, and then pending[v] > 0 for
// every vertex on or above one.
bool try_topological_order(const FlatBatch& graph, std::vector<int>& order, std::vector<int>& pending);

// A schedule in flat form: task t runs vertices[task_begin[t], task_begin[t+1])
// (FlatBatch ids, ascending), all of type task_type[t]. `vertices` is the
// order the vertices run in, a topological order.
struct FlatSchedule {
  std::vector<int> task_type;
  std::vector<int> task_begin{0};
  std::vector<int> vertices;
  int fsm_fallbacks = 0;

  int num_tasks() const { return int(task_type.size()); }
  std::span<const int> task(int t) const {
    return {vertices.data() + task_begin[size_t(t)], vertices.data() + task_begin[size_t(t) + 1]};
  }
  void clear() {
    task_type.clear();
    task_begin.assign(1, 0);
    vertices.clear();
    fsm_fallbacks = 0;
  }
  void emit(int type, std::span<const int> ids) {
    task_type.push_back(type);
    vertices.insert(vertices.end(), ids.begin(), ids.end());
    task_begin.push_back(int(vertices.size()));
  }
};

// What VJIT_LOG=schedule prints for one batch: a header line with the policy
// and the number of tasks, then one line per task in order,
//   [vjit] schedule: policy=agenda tasks=3
//   [vjit]   task 0: leaf x 12
// `types` names each vertex type (their index is the task's type).
std::string describe_schedule(const FlatSchedule& schedule, std::span<const TypeSignature> types, Policy policy);

// Runs a batching policy over flattened batches, keeping its working memory
// between batches: with the depth, agenda and frontier policies a batch no
// larger than one seen before is scheduled without allocating.
class Scheduler {
 public:
  // Policy::Fsm needs `fsm`, learned for graph.num_types() types.
  void run(const FlatBatch& graph, Policy policy, const FsmPolicy* fsm, FlatSchedule& out);

 private:
  FrontierState state_;
  std::vector<int> depth_, order_, batch_, sorted_, bucket_begin_, fill_;
  std::vector<std::vector<int>> step_;
};

// Ready type with the lowest average depth of its not-yet-run vertices (ties:
// lowest type index). Needs track_depths.
int choose_agenda(const FrontierState& state);
// Ready type maximising |Frontier_a(G_t)| / |Frontier(G_t^a)| (ties: lowest
// type index). Needs track_type_frontiers.
int choose_ratio(const FrontierState& state);

}  // namespace vjit::scheduler
