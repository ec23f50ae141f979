#pragma once
// A Model owns named parameters: their shapes, values and deterministic seeded
// initialisation. Vertex functions refer to parameters by the Param handle.
#include <cstdint>
#include <string>
#include <vector>

#include "vjit/shape.h"

namespace vjit {

enum class Init {
  Xavier,   // uniform in ±sqrt(6 / (fan_in + fan_out))
  Uniform,  // uniform in ±scale
  Zeros,
  Ones,
};

struct Param {
  int id = -1;
  Shape shape;
};

struct ParamData {
  std::string name;
  Shape shape;
  std::vector<float> value;
  // Frozen: optimizers never update it (it takes no part in the step's
  // gradient check, norm or clipping either), and vertex types built while it
  // is frozen compute no gradient for it (Program::add_type drops its
  // ParamGrad). Constant tensors (Builder::constant) are frozen parameters.
  bool frozen = false;
};

class Model {
 public:
  explicit Model(uint64_t seed = 1) : seed_(seed) {}

  // Adds a parameter; the name must be unique. `scale` is used by Init::Uniform.
  Param add(const std::string& name, Shape shape, Init init = Init::Xavier, float scale = 0.1f);

  int size() const { return int(params_.size()); }
  const ParamData& param(int id) const { return params_.at(size_t(id)); }
  ParamData& param(int id) { return params_.at(size_t(id)); }
  const ParamData& param(Param p) const { return param(p.id); }
  ParamData& param(Param p) { return param(p.id); }
  // A frozen parameter holding `values` (shape.numel() of them, row-major);
  // the name must be unique.
  Param add_frozen(const std::string& name, Shape shape, std::vector<float> values);
  // Freezes or unfreezes a parameter (see ParamData::frozen). Freeze before
  // Program::add_type to also skip computing its gradient.
  void freeze(Param p, bool frozen = true);
  // Removes the parameters from index `size` on (Program::add_type undoing
  // the constants of a vertex type whose body threw).
  void truncate(int size);

  // Looks a parameter up by name; throws UserError naming it when absent.
  Param find(const std::string& name) const;
  int64_t total_numel() const;

 private:
  uint64_t seed_;
  std::vector<ParamData> params_;
};

}  // namespace vjit
