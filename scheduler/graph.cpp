// Checks input graphs against the vertex types of a program and orders each
// sample's vertices children first (Boost.Graph topological sort).
#include "vjit/validate.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cmath>
#include <iterator>
#include <span>
#include <string>

#include "scheduler/schedule.h"
#include "vjit/error.h"

namespace vjit {

namespace {

// Edges point from a parent to its children.
using Digraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

std::string sample_label(const Sample& sample, size_t index) {
  return sample.name.empty() ? "sample " + std::to_string(index) : "sample '" + sample.name + "'";
}

// What the checks of one sample need: the types, the sample and how to name it.
struct SampleContext {
  std::span<const TypeSignature> types;
  const Sample& sample;
  size_t index;

  // Built only for an error message: validation allocates nothing otherwise.
  std::string label() const { return sample_label(sample, index); }

  const Vertex& vertex(int v) const { return sample.vertices[size_t(v)]; }
  const TypeSignature& type_of(int v) const { return types[size_t(vertex(v).type)]; }
  // "sample 'tree 3', vertex 5 (type 'internal')"
  std::string where(int v) const {
    return label() + ", vertex " + std::to_string(v) + " (type '" + type_of(v).name + "')";
  }
};

void check_type(const SampleContext& c, int v) {
  int type = c.vertex(v).type;
  VJIT_USER_CHECK(type >= 0 && type < int(c.types.size()),
                  c.label() << ", vertex " << v << ": unknown vertex type " << type << " (the program has "
                          << c.types.size() << " types)");
}

void check_arity(const SampleContext& c, int v) {
  const TypeSignature& t = c.type_of(v);
  int n = int(c.vertex(v).children.size());
  VJIT_USER_CHECK(n >= t.fixed_arity, c.where(v)
                                          << ": has " << n << " children but the type gathers "
                                          << t.fixed_arity << " (slots 0.." << t.fixed_arity - 1 << ")");
  VJIT_USER_CHECK(t.variadic || n == t.fixed_arity, c.where(v)
                                                        << ": has " << n << " children but the type gathers "
                                                        << t.fixed_arity << " and is not variadic");
  VJIT_USER_CHECK(!t.variadic || t.max_children < 0 || n - t.fixed_arity <= t.max_children,
                  c.where(v) << ": has " << n - t.fixed_arity << " children after its " << t.fixed_arity
                             << " gather slots but gather_all takes at most " << t.max_children);
}

Shape expected_shape(const TypeSignature& t, int slot) {
  if (slot >= t.fixed_arity) return t.variadic_shape;
  VJIT_INTERNAL_CHECK(slot < int(t.slot_shapes.size()), "type '" << t.name << "' has fixed_arity "
                                                                 << t.fixed_arity << " but "
                                                                 << t.slot_shapes.size() << " slot shapes");
  return t.slot_shapes[size_t(slot)];
}

void check_child(const SampleContext& c, int v, int slot) {
  int child = c.vertex(v).children[size_t(slot)];
  int n = int(c.sample.vertices.size());
  VJIT_USER_CHECK(child >= 0 && child < n, c.where(v)
                                               << ", slot " << slot << ": child " << child
                                               << " is out of range (the sample has " << n << " vertices)");
  VJIT_USER_CHECK(child != v, c.where(v)
                                  << ", slot " << slot << ": the vertex is its own child (a self-loop)");
  const TypeSignature& ct = c.type_of(child);
  Shape expected = expected_shape(c.type_of(v), slot);
  VJIT_USER_CHECK(ct.scatters, c.where(v) << ", slot " << slot << ": child " << child << " (type '" << ct.name
                                          << "') scatters nothing but the slot expects " << expected.str());
  VJIT_USER_CHECK(ct.scatter_shape == expected, c.where(v)
                                                    << ", slot " << slot << ": child " << child << " (type '"
                                                    << ct.name << "') scatters " << ct.scatter_shape.str()
                                                    << " but the slot expects " << expected.str());
}

void check_inputs(const SampleContext& c, int v) {
  const TypeSignature& t = c.type_of(v);
  const Vertex& x = c.vertex(v);
  if (t.vocab_size >= 0) {
    VJIT_USER_CHECK(x.token >= 0, c.where(v)
                                      << ": missing token (token " << x.token
                                      << "); the type pulls an embedding of " << t.vocab_size << " rows");
    VJIT_USER_CHECK(x.token < t.vocab_size, c.where(v) << ": token " << x.token << " is out of range [0, "
                                                       << t.vocab_size << ") of the embedding table");
  }
  if (t.needs_label)
    VJIT_USER_CHECK(x.label == -1 || (x.label >= 0 && x.label < t.num_classes),
                    c.where(v) << ": label " << x.label << " is out of range [0, " << t.num_classes
                               << ") (use -1 for no label)");
  if (t.feature_width >= 0) {
    VJIT_USER_CHECK(int(x.features.size()) == t.feature_width,
                    c.where(v) << ": feature row has width " << x.features.size() << " but the type pulls "
                               << t.feature_width);
    auto bad = std::find_if(x.features.begin(), x.features.end(), [](float f) { return !std::isfinite(f); });
    VJIT_USER_CHECK(bad == x.features.end(), c.where(v) << ": feature " << (bad - x.features.begin())
                                                        << " is " << *bad << " (inputs must be finite)");
  }
}

void check_vertex(const SampleContext& c, int v) {
  check_arity(c, v);
  for (int slot = 0; slot < int(c.vertex(v).children.size()); ++slot) check_child(c, v, slot);
  check_inputs(c, v);
}

Digraph make_digraph(const Sample& sample) {
  Digraph g(sample.vertices.size());
  for (size_t v = 0; v < sample.vertices.size(); ++v)
    for (int child : sample.vertices[v].children) boost::add_edge(v, size_t(child), g);
  return g;
}

// Finds a cycle with a depth-first search: a back edge u → v closes the
// cycle v → … → u → v along the tree edges.
struct CycleFinder : boost::default_dfs_visitor {
  struct Found {};
  std::vector<size_t>* parent;
  std::vector<size_t>* cycle;

  void tree_edge(Digraph::edge_descriptor e, const Digraph& g) const {
    (*parent)[boost::target(e, g)] = boost::source(e, g);
  }
  void back_edge(Digraph::edge_descriptor e, const Digraph& g) const {
    size_t from = boost::source(e, g), to = boost::target(e, g);
    for (size_t u = from; u != to; u = (*parent)[u]) cycle->push_back(u);
    cycle->push_back(to);
    std::reverse(cycle->begin(), cycle->end());
    throw Found{};
  }
};

[[noreturn]] void report_cycle(const SampleContext& c, const Digraph& g) {
  std::vector<size_t> parent(boost::num_vertices(g)), cycle;
  try {
    boost::depth_first_search(g, boost::visitor(CycleFinder{{}, &parent, &cycle}));
  } catch (const CycleFinder::Found&) {
  }
  VJIT_INTERNAL_CHECK(!cycle.empty(), "topological_sort found a cycle that depth_first_search does not");
  std::string path;
  for (size_t v : cycle) path += std::to_string(v) + " -> ";
  path += std::to_string(cycle.front());
  throw UserError(c.where(int(cycle.front())) + ": is on a cycle (parent -> child: " + path + ")");
}

std::vector<int> order_sample(const SampleContext& c) {
  Digraph g = make_digraph(c.sample);
  std::vector<size_t> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));  // children come out first
  } catch (const boost::not_a_dag&) {
    report_cycle(c, g);
  }
  return std::vector<int>(order.begin(), order.end());
}

void check_sample(const SampleContext& c) {
  int n = int(c.sample.vertices.size());
  for (int v = 0; v < n; ++v) check_type(c, v);
  for (int v = 0; v < n; ++v) check_vertex(c, v);
}

std::vector<int> validate_sample(std::span<const TypeSignature> types, const Sample& sample, size_t index) {
  SampleContext c{types, sample, index};
  check_sample(c);
  return order_sample(c);
}

}  // namespace

namespace scheduler {

void validate_and_flatten(std::span<const TypeSignature> types, const GraphBatch& batch, bool with_heights,
                          FlatBatch& flat, std::vector<int>& order, std::vector<int>& scratch) {
  for (size_t i = 0; i < batch.samples.size(); ++i) check_sample(SampleContext{types, batch.samples[i], i});
  flat.assign(batch, int(types.size()));
  // Whether there is a cycle; the sample that has one is then ordered alone,
  // which names the cycle. Heights need an acyclic graph, so they come after.
  if (try_topological_order(flat, order, scratch)) {
    if (with_heights) flat.assign(batch, int(types.size()), true);
    return;
  }
  for (int v = 0; v < flat.num_vertices(); ++v) {
    if (scratch[size_t(v)] == 0) continue;
    const size_t s = size_t(flat.ref(v).sample);
    validate_sample(types, batch.samples[s], s);  // throws, naming the cycle
  }
  VJIT_INTERNAL_CHECK(false, "the flat batch has a cycle that no sample has");
}

}  // namespace scheduler

std::vector<std::vector<int>> validate_and_order(const std::vector<TypeSignature>& types,
                                                 const GraphBatch& batch) {
  std::vector<std::vector<int>> orders;
  orders.reserve(batch.samples.size());
  for (size_t i = 0; i < batch.samples.size(); ++i)
    orders.push_back(validate_sample(types, batch.samples[i], i));
  return orders;
}

}  // namespace vjit
