#pragma once
// What one run of F (and ∂F) over a batch is asked to do, and what it returns:
// the same for the engine and the reference interpreter, so their results
// compare field by field.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace vjit {

/// What one run of F over a batch is asked to do.
struct RunOptions {
  bool training = true;   ///< dropout active
  bool backward = true;   ///< compute parameter gradients
  uint64_t seed = 0;      ///< dropout masks are a function of (seed, GraphBatch::first_sample + sample, vertex, op, element)
};

/// The values a batch pushed, in one flat buffer: at(s, v, k) is the k-th value
/// pushed by vertex v of sample s (flattened row-major), count(s, v) how many it
/// pushed (its type's push() calls, in the order of the vertex function).
template <typename T>
class PushedValues {
 public:
  int num_samples() const { return int(sample_begin_.size()) - 1; }  ///< samples of the batch
  int num_vertices(int s) const { return sample_begin_[size_t(s) + 1] - sample_begin_[size_t(s)]; }  ///< vertices of sample s
  /// How many values vertex v of sample s pushed.
  int count(int s, int v) const {
    int id = vertex_id(s, v);
    return vertex_begin_[size_t(id) + 1] - vertex_begin_[size_t(id)];
  }
  /// The k-th value vertex v of sample s pushed, flattened row-major.
  std::span<const T> at(int s, int v, int k) const {
    size_t push = size_t(vertex_begin_[size_t(vertex_id(s, v))] + k);
    return {values_.data() + value_begin_[push], size_t(value_begin_[push + 1] - value_begin_[push])};
  }
  /// Every pushed value, vertex after vertex.
  const std::vector<T>& values() const { return values_; }

  // --- filling (the engine and the reference interpreter) ---
  /// Starts over with the samples' vertex counts; buffers keep their capacity.
  template <typename VertexCount>
  void reset(int num_samples, VertexCount vertex_count) {
    sample_begin_.resize(size_t(num_samples) + 1);
    sample_begin_[0] = 0;
    for (int s = 0; s < num_samples; ++s) sample_begin_[size_t(s) + 1] = sample_begin_[size_t(s)] + vertex_count(s);
    vertex_begin_.assign(1, 0);
    value_begin_.assign(1, 0);
    values_.clear();
  }
  /// Declares the pushes of the next vertex (in sample, vertex order): `widths`
  /// values each. Returns the position of its first value in values().
  template <typename Widths>
  int64_t add_vertex(const Widths& widths) {
    int64_t first = value_begin_.back();
    for (int64_t w : widths) value_begin_.push_back(value_begin_.back() + w);
    vertex_begin_.push_back(int(value_begin_.size()) - 1);
    return first;
  }
  /// After the last add_vertex: sizes the buffer (zeros) for the values to be written.
  void allocate() { values_.assign(size_t(value_begin_.back()), T(0)); }
  /// The position in values() of push k of the flat_vertex-th vertex (in sample, vertex order).
  int64_t value_offset(int flat_vertex, int k) const { return value_begin_[size_t(vertex_begin_[size_t(flat_vertex)] + k)]; }
  T* data() { return values_.data(); }  ///< the buffer the values are written to
  /// Puts `other`'s samples after this one's (the groups of a sharded infer).
  void append(const PushedValues& other) {
    const int vertices = sample_begin_.back();
    const int pushes = vertex_begin_.back();
    const int64_t values = value_begin_.back();
    for (size_t s = 1; s < other.sample_begin_.size(); ++s) sample_begin_.push_back(vertices + other.sample_begin_[s]);
    for (size_t v = 1; v < other.vertex_begin_.size(); ++v) vertex_begin_.push_back(pushes + other.vertex_begin_[v]);
    for (size_t p = 1; p < other.value_begin_.size(); ++p) value_begin_.push_back(values + other.value_begin_[p]);
    values_.insert(values_.end(), other.values_.begin(), other.values_.end());
  }

 private:
  int vertex_id(int s, int v) const { return sample_begin_[size_t(s)] + v; }

  std::vector<int> sample_begin_{0};   ///< per sample: its first vertex id
  std::vector<int> vertex_begin_{0};   ///< per vertex id: its first push
  std::vector<int64_t> value_begin_{0};  ///< per push: its first value
  std::vector<T> values_;
};

template <typename T>
/// What a run returns: the objective, the pushed values and, after a backward
/// pass, the parameters' gradients (in float for the engine, float or double
/// for the reference interpreter).
struct Evaluation {
  double objective = 0.0;  ///< Σ of every add_loss over the batch
  PushedValues<T> pushes;  ///< the values the vertices pushed
  /// param_grads[param id]: d objective / d parameter, flattened (zeros when unused).
  std::vector<std::vector<T>> param_grads;
};

}  // namespace vjit
