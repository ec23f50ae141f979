#pragma once
// A Model owns named parameters: their shapes, values and deterministic seeded
// initialisation. Vertex functions refer to parameters by the Param handle.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vjit/shape.h"

namespace vjit {

namespace ir {
class ModelLayout;  // ir/model_layout.h: how vjit's own code lays the block out
}  // namespace ir

/// How Model::add fills a new parameter's values (from the Model's seed).
enum class Init {
  Xavier,   ///< uniform in ±sqrt(6 / (fan_in + fan_out))
  Uniform,  ///< uniform in ±scale
  Zeros,  ///< all 0
  Ones,  ///< all 1
};

/// A handle to a parameter of a Model, as vertex functions name it.
struct Param {
  int id = -1;  ///< its index in the Model (Model::param)
  Shape shape;  ///< its shape, as added
};

/// The values of one parameter, row-major: a view of its place in the Model's
/// one block of parameter memory, with a vector's reading interface. It cannot
/// be resized or copied as a view; assigning copies values in, which must be as
/// many as it holds. Model::add, assigning a Model to it and building an
/// Engine (VJIT_PARAM_LAYOUT) may move the block: a pointer or span taken from
/// it before is then stale (ParamData::value itself stays valid), and
/// Model::value_moves() tells when that happened.
class ParamValues {
 public:
  /// An empty view (size 0).
  ParamValues() = default;
  ParamValues(const ParamValues&) = delete;
  ParamValues(ParamValues&& other) noexcept : data_(other.data_), size_(other.size_) {}  ///< the same view
  /// Copies `values` in; throws UserError unless there are size() of them.
  ParamValues& operator=(std::span<const float> values);
  /// Copies values in, as operator=(std::span<const float>).
  /// @{
  ParamValues& operator=(const std::vector<float>& values) { return *this = std::span<const float>(values); }
  ParamValues& operator=(const ParamValues& other) { return *this = std::span<const float>(other); }
  /// @}

  /// Reading and writing the values as a fixed-size std::vector<float> does.
  /// @{
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }
  float& front() { return data_[0]; }
  float& back() { return data_[size_ - 1]; }
  const float& front() const { return data_[0]; }
  const float& back() const { return data_[size_ - 1]; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  const float* begin() const { return data_; }
  const float* end() const { return data_ + size_; }
  operator std::span<float>() { return {data_, size_}; }
  operator std::span<const float>() const { return {data_, size_}; }
  /// @}
  operator std::vector<float>() const { return {begin(), end()}; }  ///< a copy

  /// Equal when the values are equal, element by element.
  /// @{
  friend bool operator==(const ParamValues& a, std::span<const float> b);
  friend bool operator==(const ParamValues& a, const ParamValues& b) { return a == std::span<const float>(b); }
  friend bool operator==(const ParamValues& a, const std::vector<float>& b) {
    return a == std::span<const float>(b);
  }
  /// @}

 private:
  friend class Model;
  ParamValues& operator=(ParamValues&&) = default;  ///< Model re-points its views
  float* data_ = nullptr;
  size_t size_ = 0;
};

/// A parameter as the Model holds it.
struct ParamData {
  std::string name;  ///< unique in its Model
  /// Fixed by Model::add: the values, every plan and the reference interpreter
  /// are sized by it, so it is read-only (a new shape is a new parameter).
  const Shape shape{};
  ParamValues value;  ///< its values (a view into the Model's block)
  /// Frozen: optimizers never update it (it takes no part in the step's
  /// gradient check, norm or clipping either), and vertex types built while it
  /// is frozen compute no gradient for it (Program::add_type drops its
  /// ParamGrad). Constant tensors (Builder::constant) are frozen parameters.
  bool frozen = false;
};

/// Named parameters in one block of memory, with seeded initialisation. A
/// Model is copied with its values (the copy has a block of its own).
class Model {
 public:
  explicit Model(uint64_t seed = 1) : seed_(seed) {}  ///< `seed` makes every Init draw the same values on every platform

  /// Adds a parameter; the name must be unique. `scale` is used by Init::Uniform.
  Param add(const std::string& name, Shape shape, Init init = Init::Xavier, float scale = 0.1f);

  int size() const { return int(params_.size()); }  ///< the number of parameters
  /// A parameter by index (0 to size() − 1) or by handle.
  /// @{
  const ParamData& param(int id) const { return params_.at(size_t(id)); }
  ParamData& param(int id) { return params_.at(size_t(id)); }
  const ParamData& param(Param p) const { return param(p.id); }
  ParamData& param(Param p) { return param(p.id); }
  /// @}
  /// A frozen parameter holding `values` (shape.numel() of them, row-major);
  /// the name must be unique.
  Param add_frozen(const std::string& name, Shape shape, std::vector<float> values);
  /// Freezes or unfreezes a parameter (see ParamData::frozen). Freeze before
  /// Program::add_type to also skip computing its gradient.
  void freeze(Param p, bool frozen = true);

  /// Looks a parameter up by name; throws UserError naming it and listing the
  /// model's parameters when absent.
  Param find(const std::string& name) const;
  int64_t total_numel() const;  ///< the values of all parameters

  /// How many times the values moved to another place in memory: growing the
  /// block as parameters are added, assigning another Model to this one, or an
  /// Engine laying the block out for its stacked weights when it is built
  /// (VJIT_PARAM_LAYOUT). A pointer or span into a ParamData::value taken
  /// while this was n is stale once it is not n; the values themselves never
  /// change by moving.
  uint64_t value_moves() const { return value_moves_; }

  /// A copy holds the values in a block of its own; a move takes the block.
  /// @{
  Model(const Model& other);
  Model& operator=(const Model& other);
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  /// @}

 private:
  friend class ir::ModelLayout;
  /// Lays the values out again in the block: each run's parameters one right
  /// after another in the run's order (a run of parameters is then one
  /// row-major block: stacked weights a merged product reads in place), each
  /// run and every other parameter starting at a multiple of 16 floats. Runs
  /// are disjoint; a parameter in none keeps its relative order. Values do not
  /// change. An engine arranges its Model when it is built (per-program
  /// layout, runtime/param_layout.h), and only when the block does not already
  /// hold its runs so.
  void arrange(const std::vector<std::vector<int>>& runs);
  /// Whether `params` lie one right after another, in this order, in the block.
  bool consecutive(std::span<const int> params) const;
  /// Removes the parameters from index `size` on (Program::add_type undoing
  /// the constants of a vertex type whose body threw).
  void truncate(int size);
  /// Makes room for `floats` more values (zeros) at the end of the block; their offset.
  int64_t append_values(int64_t floats);
  /// Points `param`'s view at `offset` floats into the block.
  void point_at(ParamData& param, int64_t offset);
  /// Points every parameter's view into `block` at `offsets[p]`, which becomes the block.
  void adopt_block(std::vector<float> block, const std::vector<int64_t>& offsets);
  std::vector<int64_t> offsets() const;

  uint64_t seed_;
  std::vector<ParamData> params_;
  std::vector<float> block_;  ///< every parameter's values (ParamValues views into it)
  uint64_t value_moves_ = 0;  ///< adopt_block calls: see value_moves()
};

}  // namespace vjit
