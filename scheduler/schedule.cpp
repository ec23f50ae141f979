#include "scheduler/schedule.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>

#include "scheduler/fsm.h"
#include "vjit/error.h"

namespace vjit::scheduler {

namespace {
constexpr std::array<std::pair<Policy, const char*>, 5> kPolicyNames{{
    {Policy::Depth, "depth"},
    {Policy::Agenda, "agenda"},
    {Policy::Frontier, "frontier"},
    {Policy::Ratio, "ratio"},
    {Policy::Fsm, "fsm"},
}};
}  // namespace

std::string describe_schedule(const FlatSchedule& schedule, std::span<const TypeSignature> types, Policy policy) {
  std::string out = std::string("[vjit] schedule: policy=") + policy_name(policy) +
                    " tasks=" + std::to_string(schedule.num_tasks()) + "\n";
  for (int t = 0; t < schedule.num_tasks(); ++t) {
    const int type = schedule.task_type[size_t(t)];
    const bool named = type >= 0 && size_t(type) < types.size();
    out += "[vjit]   task " + std::to_string(t) + ": " +
           (named ? types[size_t(type)].name : "type " + std::to_string(type)) + " x " +
           std::to_string(schedule.task(t).size()) + "\n";
  }
  return out;
}

const char* policy_name(Policy policy) {
  for (const auto& [value, name] : kPolicyNames)
    if (value == policy) return name;
  VJIT_INTERNAL_CHECK(false, "unknown Policy value " << int(policy));
}

Policy parse_policy(const std::string& name) {
  for (const auto& [value, known] : kPolicyNames)
    if (name == known) return value;
  detail::Message valid;
  for (size_t i = 0; i < kPolicyNames.size(); ++i) valid << (i ? ", " : "") << kPolicyNames[i].second;
  throw UserError("unknown batching policy '" + name + "'; valid policies: " + valid.str());
}

const std::vector<Policy>& all_policies() {
  static const std::vector<Policy> policies = [] {
    std::vector<Policy> all;
    for (const auto& entry : kPolicyNames) all.push_back(entry.first);
    return all;
  }();
  return policies;
}

// ---------------------------------------------------------------- FlatBatch

FlatBatch::FlatBatch(const GraphBatch& batch, int num_types, bool with_heights) {
  assign(batch, num_types, with_heights);
}

void FlatBatch::assign(const GraphBatch& batch, int num_types, bool with_heights) {
  batch_ = &batch;
  num_types_ = num_types;
  children_first_ = true;
  VJIT_USER_CHECK(num_types >= 1, "a program needs at least one vertex type (got " << num_types << ")");
  VJIT_USER_CHECK(batch.first_sample >= 0 && int64_t(batch.first_sample) + int64_t(batch.samples.size()) < int64_t(1) << 31,
                  "GraphBatch::first_sample is " << batch.first_sample << " for " << batch.samples.size()
                                                 << " samples; it must be >= 0 and index every sample below 2^31");
  first_sample_ = batch.first_sample;
  const int64_t total = batch.num_vertices();
  VJIT_USER_CHECK(total < int64_t(1) << 31, "batch has " << total << " vertices; at most 2^31-1 are supported");

  sample_offset_.resize(batch.samples.size() + 1);
  int offset = 0;
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    sample_offset_[s] = offset;
    offset += int(batch.samples[s].vertices.size());
  }
  sample_offset_.back() = offset;

  types_.clear();
  tokens_.clear();
  labels_.clear();
  refs_.clear();
  child_ids_.clear();
  child_begin_.clear();
  child_begin_.push_back(0);
  std::vector<int>& parent_count = fill_;
  parent_count.assign(size_t(offset), 0);
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const auto& vertices = batch.samples[s].vertices;
    for (size_t i = 0; i < vertices.size(); ++i) {
      const Vertex& vertex = vertices[i];
      const int id = int(types_.size());
      types_.push_back(vertex.type);
      tokens_.push_back(vertex.token);
      labels_.push_back(vertex.label);
      refs_.push_back(VertexRef{int(s), int(i)});
      VJIT_USER_CHECK(vertex.type >= 0 && vertex.type < num_types,
                      describe(id) << " has vertex type " << vertex.type << ", but the program has "
                                   << num_types << " vertex types");
      for (size_t k = 0; k < vertex.children.size(); ++k) {
        const int child = vertex.children[k];
        VJIT_USER_CHECK(child >= 0 && size_t(child) < vertices.size(),
                        describe(id) << " child " << k << " is vertex " << child << ", out of range (the sample has "
                                     << vertices.size() << " vertices)");
        child_ids_.push_back(sample_offset_[s] + child);
        ++parent_count[size_t(sample_offset_[s] + child)];
        children_first_ = children_first_ && child < int(i);
      }
      child_begin_.push_back(int(child_ids_.size()));
    }
  }

  // Parents in CSR form: a counting pass, then a fill pass, from the last
  // vertex down so that, when the ids are a topological order, the same pass
  // computes the heights (every parent of a vertex comes before it).
  parent_begin_.assign(size_t(offset) + 1, 0);
  for (int v = 0; v < offset; ++v) parent_begin_[size_t(v) + 1] = parent_begin_[size_t(v)] + parent_count[size_t(v)];
  parent_ids_.resize(child_ids_.size());
  std::vector<int>& fill = fill_;  // filled backwards: the end of each parent list
  for (int v = 0; v < offset; ++v) fill[size_t(v)] = parent_begin_[size_t(v) + 1];
  heights_.clear();
  if (with_heights && children_first_) {
    heights_.assign(size_t(offset), 0);
    for (int v = offset - 1; v >= 0; --v)
      for (int child : children(v)) {
        parent_ids_[size_t(--fill[size_t(child)])] = v;
        heights_[size_t(child)] = std::max(heights_[size_t(child)], heights_[size_t(v)] + 1);
      }
  } else {
    for (int v = offset - 1; v >= 0; --v)
      for (int child : children(v)) parent_ids_[size_t(--fill[size_t(child)])] = v;
    if (with_heights) heights_ = vertex_heights(*this);
  }
}

std::string FlatBatch::describe(int v) const {
  const VertexRef r = refs_[v];
  const std::string& name = batch_->samples[r.sample].name;
  detail::Message m;
  if (name.empty())
    m << "sample " << r.sample;
  else
    m << "sample '" << name << "'";
  m << " vertex " << r.vertex;
  return m.str();
}

// ------------------------------------------------------- depths, lower bound

bool try_topological_order(const FlatBatch& graph, std::vector<int>& order, std::vector<int>& pending) {
  const int n = graph.num_vertices();
  order.resize(size_t(n));
  pending.assign(size_t(n), 0);
  if (graph.children_first()) {  // the ids themselves (samples built bottom-up)
    for (int v = 0; v < n; ++v) order[size_t(v)] = v;
    return true;
  }
  // Kahn's algorithm upwards from the leaves.
  size_t tail = 0;
  for (int v = 0; v < n; ++v) {
    pending[size_t(v)] = int(graph.children(v).size());
    if (pending[size_t(v)] == 0) order[tail++] = v;
  }
  for (size_t head = 0; head < tail; ++head)
    for (int parent : graph.parents(order[head]))
      if (--pending[size_t(parent)] == 0) order[tail++] = parent;
  return int(tail) == n;
}

void topological_order(const FlatBatch& graph, std::vector<int>& order, std::vector<int>& pending) {
  if (try_topological_order(graph, order, pending)) return;
  for (int v = 0; v < graph.num_vertices(); ++v)
    VJIT_USER_CHECK(pending[size_t(v)] == 0, "the input graph has a cycle: " << graph.describe(v)
                                                                           << " is on or above a cycle");
}

std::vector<int> topological_order(const FlatBatch& graph) {
  std::vector<int> order, pending;
  topological_order(graph, order, pending);
  return order;
}

void vertex_depths(const FlatBatch& graph, std::vector<int>& depth, std::vector<int>& order) {
  std::vector<int>& pending = depth;  // the order's scratch, overwritten below
  topological_order(graph, order, pending);
  depth.assign(size_t(graph.num_vertices()), 0);
  for (int v : order)
    for (int child : graph.children(v)) depth[size_t(v)] = std::max(depth[size_t(v)], depth[size_t(child)] + 1);
}

std::vector<int> vertex_heights(const FlatBatch& graph) {
  std::vector<int> height(graph.num_vertices(), 0);
  if (graph.children_first()) {  // parents before children: descending ids
    for (int v = graph.num_vertices() - 1; v >= 0; --v)
      for (int child : graph.children(v)) height[child] = std::max(height[child], height[v] + 1);
    return height;
  }
  const std::vector<int> order = topological_order(graph);
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    for (int child : graph.children(*it)) height[child] = std::max(height[child], height[*it] + 1);
  return height;
}

int lower_bound(const FlatBatch& graph, std::span<const int> topological_order) {
  // chain[v][a] = the most type-a vertices on one downward path from v (v
  // included); Depth(G^a) is its maximum over v. Only the types present get a
  // column, so the pass costs O((vertices + edges) * types present).
  const int n = graph.num_vertices();
  std::vector<int> column(graph.num_types(), -1);
  int width = 0;
  for (int v = 0; v < n; ++v)
    if (column[graph.type(v)] < 0) column[graph.type(v)] = width++;
  std::vector<int> chain(size_t(n) * width, 0);
  std::vector<int> depth(width, 0);
  for (int v : topological_order) {
    int* mine = chain.data() + size_t(v) * width;
    for (int child : graph.children(v)) {
      const int* theirs = chain.data() + size_t(child) * width;
      for (int a = 0; a < width; ++a) mine[a] = std::max(mine[a], theirs[a]);
    }
    const int a = column[graph.type(v)];
    depth[a] = std::max(depth[a], ++mine[a]);
  }
  int bound = 0;
  for (int d : depth) bound += d;
  return bound;
}

// ------------------------------------------------------------ FrontierState

FrontierState::FrontierState(const FlatBatch& graph) { bind(graph); }

void FrontierState::bind(const FlatBatch& graph) {
  graph_ = &graph;
  ready_.resize(size_t(graph.num_types()));
  released_.resize(size_t(graph.num_vertices()) + 1);
  depth_ = nullptr;
  height_ = nullptr;
  tracking_type_frontiers_ = false;
  type_edges_complete_ = false;
  reset();
}

void FrontierState::reset() {
  const int n = graph_->num_vertices();
  num_executed_ = 0;
  executed_.assign(n, 0);
  pending_children_.resize(n);
  for (auto& list : ready_) list.clear();
  first_descent_.assign(num_types(), -1);  // the lists below are built in id order
  more_descents_.assign(num_types(), 0);
  for (int v = 0; v < n; ++v) {
    pending_children_[v] = int(graph_->children(v).size());
    if (pending_children_[v] == 0) ready_[graph_->type(v)].push_back(v);
  }
  if (depth_) recount_depths();
  if (height_) recount_ready_heights();
  if (tracking_type_frontiers_) {
    if (!type_edges_complete_) build_type_edges();  // built after some vertices ran
    recount_type_frontiers();
  }
}

bool FrontierState::has_ready() const {
  for (const auto& list : ready_)
    if (!list.empty()) return true;
  return false;
}

void FrontierState::take_ready(int type, std::vector<int>& out) {
  // Copied, not swapped: every list keeps its own capacity, so a warm
  // scheduler never allocates.
  out.assign(ready_[type].begin(), ready_[type].end());
  ready_[type].clear();
  if (height_) max_ready_height_[type] = -1;
  // Release order is often sorted (chains, trees built bottom-up); else it is
  // one sorted run per step the type waited, which a policy that lets a type
  // wait long (fsm) makes many of. execute() noted the descents.
  const int first_descent = first_descent_[type];
  const bool more_descents = more_descents_[type];
  first_descent_[type] = -1;
  more_descents_[type] = 0;
  if (first_descent < 0) return;
  if (!more_descents) {  // two runs: merge them, without branching on which is next
    merge_buffer_.resize(out.size());
    const int *a = out.data(), *a_end = a + first_descent, *b = a_end, *b_end = out.data() + out.size();
    int* to = merge_buffer_.data();
    while (a != a_end && b != b_end) {
      const bool from_b = *b < *a;
      *to++ = from_b ? *b : *a;
      b += from_b;
      a += !from_b;
    }
    to = std::copy(a, a_end, to);
    std::copy(b, b_end, to);
    std::copy(merge_buffer_.begin(), merge_buffer_.end(), out.begin());
    return;
  }
  const auto [low_it, high_it] = std::minmax_element(out.begin(), out.end());
  const int low = *low_it, high = *high_it;
  const size_t words = size_t(high - low) / 64 + 1;
  if (words <= 4 * out.size()) {
    // Dense: the ids are distinct, so a bitmap over [low, high] sorts them in
    // O(ids + range / 64).
    id_bits_.assign(words, 0);
    for (int v : out) id_bits_[size_t(v - low) / 64] |= uint64_t(1) << ((v - low) % 64);
    size_t next = 0;
    for (size_t w = 0; w < words; ++w)
      for (uint64_t bits = id_bits_[w]; bits; bits &= bits - 1)
        out[next++] = low + int(w * 64) + std::countr_zero(bits);
  } else {
    std::sort(out.begin(), out.end());
  }
}

void FrontierState::execute(std::span<const int> vertices) {
  // The parents that become ready are first collected without a branch (which
  // of them do depends on the schedule and is poorly predicted), then filed.
  int* pending = pending_children_.data();
  int* released = released_.data();
  size_t num_released = 0;
  for (int v : vertices) {
    executed_[v] = 1;
    const int type = graph_->type(v);
    for (int parent : graph_->parents(v)) {
      released[num_released] = parent;
      num_released += --pending[parent] == 0;
    }
    if (depth_) {
      remaining_depth_sum_[type] -= (*depth_)[v];
      --remaining_count_[type];
    }
    if (tracking_type_frontiers_) {
      // v was ready, so it had no type-a descendant left: it leaves Frontier(G^a).
      --type_frontier_[type];
      for (int i = type_parent_begin_[v]; i < type_parent_begin_[v + 1]; ++i) {
        const int parent = type_parent_ids_[i];
        if (--pending_type_children_[parent] == 0) ++type_frontier_[type];
      }
    }
  }
  const int* height = height_ ? height_->data() : nullptr;
  for (size_t i = 0; i < num_released; ++i) {
    const int parent = released[i];
    const int parent_type = graph_->type(parent);
    std::vector<int>& list = ready_[parent_type];
    if (!list.empty() && parent < list.back()) {  // a new sorted run: note where, for take_ready
      if (first_descent_[parent_type] < 0)
        first_descent_[parent_type] = int(list.size());
      else
        more_descents_[parent_type] = 1;
    }
    list.push_back(parent);
    if (height) max_ready_height_[parent_type] = std::max(max_ready_height_[parent_type], height[parent]);
  }
  num_executed_ += int(vertices.size());
}

void FrontierState::throw_cycle() const {
  for (int v = 0; v < graph_->num_vertices(); ++v)
    if (!executed_[v])
      throw UserError("the input graph has a cycle: " + graph_->describe(v) + " is on or above a cycle");
  VJIT_INTERNAL_CHECK(false, "throw_cycle called on a finished batch");
}

void FrontierState::track_depths(const std::vector<int>& depth) {
  VJIT_INTERNAL_CHECK(int(depth.size()) == graph_->num_vertices(), "depth vector of the wrong size");
  depth_ = &depth;
  recount_depths();
}

void FrontierState::recount_depths() {
  remaining_depth_sum_.assign(num_types(), 0);
  remaining_count_.assign(num_types(), 0);
  for (int v = 0; v < graph_->num_vertices(); ++v) {
    if (executed_[v]) continue;
    remaining_depth_sum_[graph_->type(v)] += (*depth_)[v];
    ++remaining_count_[graph_->type(v)];
  }
}

void FrontierState::track_heights(const std::vector<int>& height) {
  VJIT_INTERNAL_CHECK(int(height.size()) == graph_->num_vertices(), "height vector of the wrong size");
  height_ = &height;
  recount_ready_heights();
}

void FrontierState::recount_ready_heights() {
  max_ready_height_.assign(num_types(), -1);
  for (int type = 0; type < num_types(); ++type)
    for (int v : ready_[type]) max_ready_height_[type] = std::max(max_ready_height_[type], (*height_)[v]);
}

bool FrontierState::lower_average_depth(int a, int b) const {
  // sum_a / count_a < sum_b / count_b, without rounding.
  return remaining_depth_sum_[a] * remaining_count_[b] < remaining_depth_sum_[b] * remaining_count_[a];
}

void FrontierState::track_type_frontiers() {
  if (tracking_type_frontiers_) return;
  build_type_edges();
  tracking_type_frontiers_ = true;
  recount_type_frontiers();
}

std::vector<int> FrontierState::pending_topological_order() const {
  // Kahn's algorithm over the vertices not yet run, upwards from the ready ones;
  // pending_children_ already counts each vertex's children not yet run.
  std::vector<int> order, pending = pending_children_;
  order.reserve(graph_->num_vertices() - num_executed_);
  for (const auto& list : ready_) order.insert(order.end(), list.begin(), list.end());
  for (size_t head = 0; head < order.size(); ++head)
    for (int parent : graph_->parents(order[head]))
      if (--pending[parent] == 0) order.push_back(parent);
  if (int(order.size()) != graph_->num_vertices() - num_executed_) {
    for (int v = 0; v < graph_->num_vertices(); ++v)
      VJIT_USER_CHECK(executed_[v] || pending[v] == 0, "the input graph has a cycle: " << graph_->describe(v)
                                                                                   << " is on or above a cycle");
  }
  return order;
}

void FrontierState::build_type_edges() {
  // For each vertex v not yet run, a depth-first search down through vertices
  // of other types finds its nearest descendants of v's own type: the G^a
  // edges. Only the part of the graph not yet run matters (a run vertex has no
  // pending descendant), so a late fallback of the fsm policy pays only for
  // what is left. `below` (the types at or under each vertex, one bit per type;
  // types from 63 on share the last bit, which then only prunes less) lets the
  // search skip subgraphs without v's type: e.g. a loss vertex over a tree of
  // other types costs O(its degree).
  const FlatBatch& g = *graph_;
  const int n = g.num_vertices();
  const std::vector<int> order = pending_topological_order();
  std::vector<uint64_t> below(n, 0);  // stays 0 for run vertices: never searched
  auto bit = [](int type) { return uint64_t(1) << std::min(type, 63); };
  for (int v : order) {
    below[v] = bit(g.type(v));
    for (int child : g.children(v)) below[v] |= below[child];
  }

  std::vector<std::pair<int, int>> edges;  // (type child, type parent)
  std::vector<int> seen(n, -1), stack;
  type_child_count_.assign(n, 0);
  for (int v : order) {
    const int type = g.type(v);
    auto push_children = [&](int x) {
      for (int child : g.children(x))
        if (below[child] & bit(type)) stack.push_back(child);
    };
    push_children(v);
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      if (seen[x] == v) continue;
      seen[x] = v;
      if (g.type(x) == type) {
        edges.emplace_back(x, v);
        ++type_child_count_[v];
      } else {
        push_children(x);
      }
    }
  }
  type_edges_complete_ = num_executed_ == 0;

  // CSR, child -> parent: running the child is what unblocks the parent.
  type_parent_begin_.assign(n + 1, 0);
  for (const auto& edge : edges) ++type_parent_begin_[edge.first + 1];
  for (int v = 0; v < n; ++v) type_parent_begin_[v + 1] += type_parent_begin_[v];
  type_parent_ids_.resize(edges.size());
  std::vector<int> fill(type_parent_begin_.begin(), type_parent_begin_.end() - 1);
  for (const auto& edge : edges) type_parent_ids_[fill[edge.first]++] = edge.second;
}

void FrontierState::recount_type_frontiers() {
  // The edges only lead to vertices not yet run, so the counts start from them.
  const FlatBatch& g = *graph_;
  pending_type_children_ = type_child_count_;
  type_frontier_.assign(num_types(), 0);
  for (int v = 0; v < g.num_vertices(); ++v)
    if (!executed_[v] && pending_type_children_[v] == 0) ++type_frontier_[g.type(v)];
}

int choose_agenda(const FrontierState& state) {
  int best = -1;
  for (int type = 0; type < state.num_types(); ++type) {
    if (state.num_ready(type) == 0) continue;
    if (best < 0 || state.lower_average_depth(type, best)) best = type;
  }
  return best;
}

int choose_ratio(const FrontierState& state) {
  int best = -1;
  for (int type = 0; type < state.num_types(); ++type) {
    if (state.num_ready(type) == 0) continue;
    // ready_t / frontier_t > ready_best / frontier_best, without rounding.
    if (best < 0 || int64_t(state.num_ready(type)) * state.type_frontier(best) >
                        int64_t(state.num_ready(best)) * state.type_frontier(type))
      best = type;
  }
  return best;
}

// ------------------------------------------------------------------ policies

namespace {

void schedule_by_depth(const FlatBatch& graph, const std::vector<int>& depth, std::vector<int>& bucket_begin,
                       std::vector<int>& fill, std::vector<int>& sorted, FlatSchedule& out) {
  // Counting sort of the vertices by (depth, type); scanning ids in ascending
  // order keeps each bucket sorted.
  const int num_types = graph.num_types();
  const int max_depth = depth.empty() ? -1 : *std::max_element(depth.begin(), depth.end());
  const size_t num_buckets = size_t(max_depth + 1) * size_t(num_types);
  bucket_begin.assign(num_buckets + 1, 0);
  auto bucket = [&](int v) { return size_t(depth[size_t(v)]) * size_t(num_types) + size_t(graph.type(v)); };
  for (int v = 0; v < graph.num_vertices(); ++v) ++bucket_begin[bucket(v) + 1];
  for (size_t b = 0; b < num_buckets; ++b) bucket_begin[b + 1] += bucket_begin[b];
  sorted.resize(size_t(graph.num_vertices()));
  fill.assign(bucket_begin.begin(), bucket_begin.end() - 1);
  for (int v = 0; v < graph.num_vertices(); ++v) sorted[size_t(fill[bucket(v)]++)] = v;
  for (size_t b = 0; b < num_buckets; ++b) {
    if (bucket_begin[b] == bucket_begin[b + 1]) continue;
    out.emit(int(b % size_t(num_types)),
             std::span<const int>(sorted.data() + bucket_begin[b], sorted.data() + bucket_begin[b + 1]));
  }
}

// Algorithm 1 of ED-Batch: `choose` names the next type among the ready ones.
template <typename Choose>
void schedule_by_type_choice(FrontierState& state, std::vector<int>& batch, FlatSchedule& out, Choose choose) {
  while (!state.done()) {
    if (!state.has_ready()) state.throw_cycle();
    const int type = choose(state);
    state.take_ready(type, batch);
    out.emit(type, batch);
    state.execute(batch);
  }
}

void schedule_by_frontier(FrontierState& state, std::vector<std::vector<int>>& step, FlatSchedule& out) {
  // Take every type's ready vertices before running any, so that vertices made
  // ready by this step wait for the next one.
  step.resize(size_t(state.num_types()));
  while (!state.done()) {
    if (!state.has_ready()) state.throw_cycle();
    for (int type = 0; type < state.num_types(); ++type) state.take_ready(type, step[size_t(type)]);
    for (int type = 0; type < state.num_types(); ++type) {
      if (step[size_t(type)].empty()) continue;
      out.emit(type, step[size_t(type)]);
      state.execute(step[size_t(type)]);
    }
  }
}

int schedule_by_fsm(const FsmPolicy& fsm, const FlatBatch& graph, FrontierState& state, std::vector<int>& batch,
                    FlatSchedule& out) {
  StateEncoder encoder(fsm.encoding());
  if (encoding_uses_heights(fsm.encoding())) state.track_heights(graph.heights());
  std::string key;
  int fallbacks = 0;
  schedule_by_type_choice(state, batch, out, [&](FrontierState& s) {
    bool fell_back = false;
    const int type = fsm_step(fsm, encoder, s, key, fell_back);
    fallbacks += fell_back;
    return type;
  });
  return fallbacks;
}

void check_fsm(Policy policy, const FsmPolicy* fsm, int num_types) {
  if (policy != Policy::Fsm) return;
  VJIT_USER_CHECK(fsm != nullptr, "batching policy 'fsm' needs a learned FSM policy (none was given)");
  VJIT_USER_CHECK(fsm->num_types() == num_types, "the FSM policy was learned for " << fsm->num_types()
                                                     << " vertex types, but the program has " << num_types);
}

}  // namespace

void Scheduler::run(const FlatBatch& graph, Policy policy, const FsmPolicy* fsm, FlatSchedule& out) {
  check_fsm(policy, fsm, graph.num_types());
  out.clear();
  if (policy == Policy::Depth) {
    vertex_depths(graph, depth_, order_);
    schedule_by_depth(graph, depth_, bucket_begin_, fill_, sorted_, out);
    return;
  }
  state_.bind(graph);
  switch (policy) {
    case Policy::Agenda:
      vertex_depths(graph, depth_, order_);
      state_.track_depths(depth_);
      schedule_by_type_choice(state_, batch_, out, choose_agenda);
      break;
    case Policy::Frontier: schedule_by_frontier(state_, step_, out); break;
    case Policy::Ratio:
      state_.track_type_frontiers();
      schedule_by_type_choice(state_, batch_, out, choose_ratio);
      break;
    case Policy::Fsm: out.fsm_fallbacks = schedule_by_fsm(*fsm, graph, state_, batch_, out); break;
    case Policy::Depth: break;
  }
}

Schedule make_schedule(const GraphBatch& batch, int num_types, Policy policy, const FsmPolicy* fsm) {
  scheduler::check_fsm(policy, fsm, num_types);
  const auto start = std::chrono::steady_clock::now();
  const scheduler::FlatBatch graph(batch, num_types, policy == Policy::Fsm && encoding_uses_heights(fsm->encoding()));
  scheduler::Scheduler scheduler;
  scheduler::FlatSchedule flat;
  scheduler.run(graph, policy, fsm, flat);
  Schedule schedule;
  schedule.fsm_fallbacks = flat.fsm_fallbacks;
  schedule.tasks.reserve(size_t(flat.num_tasks()));
  for (int t = 0; t < flat.num_tasks(); ++t) {
    Task task{flat.task_type[size_t(t)], {}};
    for (int v : flat.task(t)) task.vertices.push_back(graph.ref(v));
    schedule.tasks.push_back(std::move(task));
  }
  schedule.schedule_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  schedule.lower_bound = scheduler::lower_bound(graph, flat.vertices);
  return schedule;
}

int batching_lower_bound(const GraphBatch& batch, int num_types) {
  const scheduler::FlatBatch graph(batch, num_types);
  return scheduler::lower_bound(graph, scheduler::topological_order(graph));
}

}  // namespace vjit::scheduler
