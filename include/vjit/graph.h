#pragma once
// Input graphs. A sample is one DAG of typed vertices; each vertex lists its
// children in slot order (gather(k) reads what child k scattered), and carries
// its own external inputs: a token id (for pull_embedding), a label (for
// per-vertex losses; -1 means "no label here") and a feature row (pull).
// Plain data, used by every layer: checking a batch against a program is
// vjit/validate.h's, reading treebanks vjit/data.h's.
//
// Accepted, with these meanings (the engine computes what the reference
// interpreter does; tests/test_bad_input.cpp, GraphMeaning):
//   - a variadic vertex without children is a leaf: gather_sum gives zeros,
//     gather_all only zero padding rows, child_count 0, max_children 0 (a
//     vertex function that divides by child_count gets what it computes);
//   - a child listed more than once feeds every slot it is listed in, fixed or
//     variadic, and receives the sum of the gradients those slots send it;
//   - a sample without vertices contributes nothing: no loss, no gradient, no
//     pushed value (as an empty batch does);
//   - a token, label or feature row on a vertex whose type does not read it
//     (no pull_embedding, no per-vertex loss, no pull) is ignored: data readers
//     attach them to every vertex, the vertex function decides what it reads.
#include <cstdint>
#include <string>
#include <vector>

#include "vjit/shape.h"

namespace vjit {

/// One vertex of a sample: its type, its children and its own inputs.
struct Vertex {
  int type = 0;  ///< the vertex type, an index into the Program's types (Program::type_index)
  std::vector<int> children;  ///< indices into the same sample, in slot order
  int token = -1;  ///< row of the pull_embedding table; -1: none
  int label = -1;  ///< the label a per-vertex loss reads; -1: no label here
  std::vector<float> features;  ///< the row pull() reads (its width is the type's)
};

/// One input graph: a DAG of typed vertices (in any order; the engine orders them).
struct Sample {
  std::string name;  ///< used in error messages; empty means "sample <index>"
  std::vector<Vertex> vertices;  ///< children are indices into this vector

  /// Appends a vertex and returns its index.
  int add_vertex(int type, std::vector<int> children = {}, int token = -1, int label = -1) {
    vertices.push_back(Vertex{type, std::move(children), token, label, {}});
    return int(vertices.size()) - 1;
  }
};

/// The samples one call of the engine runs together.
struct GraphBatch {
  std::vector<Sample> samples;  ///< in sample order; results are indexed by it
  /// The index of samples[0] in the global batch this one was cut from
  /// (Distributed::shard sets it; 0 for a whole batch). Dropout masks are drawn
  /// per (global sample index, vertex, op, element), so each rank's shard draws
  /// the masks the whole batch would: data-parallel training with dropout equals
  /// one process training on the global batch.
  int first_sample = 0;

  /// The vertices of all samples.
  int64_t num_vertices() const {
    int64_t n = 0;
    for (const Sample& s : samples) n += int64_t(s.vertices.size());
    return n;
  }
};

/// What a vertex type requires of the graph, exported by a Program so that
/// graphs are checked without the graph code knowing the IR.
struct TypeSignature {
  std::string name;  ///< the type's name (Program::type_name)
  int fixed_arity = 0;        ///< number of gather(k) slots: children 0..fixed_arity-1
  bool variadic = false;      ///< gather_sum / gather_all take any number of children after the fixed ones
  int max_children = -1;      ///< upper bound on the variadic children, for gather_all (-1: none)
  std::vector<Shape> slot_shapes;  ///< expected scatter shape of child k (k < fixed_arity)
  Shape variadic_shape;       ///< expected scatter shape of each variadic child (k >= fixed_arity)
  bool scatters = false;  ///< whether the type scatters a value for its parents to gather
  Shape scatter_shape;  ///< the shape it scatters, when it does
  int feature_width = -1;     ///< pull() width; -1 when the type does not pull
  int vocab_size = -1;        ///< rows of the pull_embedding table; -1 when unused
  bool needs_label = false;   ///< has a per-vertex loss that reads the label
  int num_classes = -1;       ///< label range for softmax_cross_entropy
};

}  // namespace vjit
