#include "vjit/model.h"

#include <cmath>
#include <random>

#include "vjit/error.h"

namespace vjit {

namespace {
// Fan-in and fan-out of a parameter read as [out, in] (a vector is [n] → fan n).
std::pair<double, double> fans(const Shape& shape) {
  if (shape.rank == 2) return {double(shape.dims[1]), double(shape.dims[0])};
  return {double(shape.numel()), double(shape.numel())};
}
}  // namespace

Param Model::add(const std::string& name, Shape shape, Init init, float scale) {
  for (const ParamData& p : params_)
    VJIT_USER_CHECK(p.name != name, "Model::add: a parameter named '" << name << "' already exists");
  VJIT_USER_CHECK(shape.rank >= 1 && shape.numel() > 0,
                  "Model::add: parameter '" << name << "' needs a non-empty vector or matrix shape, got "
                                            << shape.str());
  ParamData data{name, shape, std::vector<float>(size_t(shape.numel()), 0.0f)};
  // Each parameter draws from its own stream, so adding one never changes another's values.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + params_.size() + 1);
  double bound = 0.0;
  switch (init) {
    case Init::Xavier: {
      auto [fan_in, fan_out] = fans(shape);
      bound = std::sqrt(6.0 / (fan_in + fan_out));
      break;
    }
    case Init::Uniform: bound = scale; break;
    case Init::Zeros: break;
    case Init::Ones: std::fill(data.value.begin(), data.value.end(), 1.0f); break;
  }
  if (bound > 0.0) {
    std::uniform_real_distribution<double> uniform(-bound, bound);
    for (float& v : data.value) v = float(uniform(rng));
  }
  params_.push_back(std::move(data));
  return Param{int(params_.size()) - 1, shape};
}

Param Model::add_frozen(const std::string& name, Shape shape, std::vector<float> values) {
  VJIT_USER_CHECK(shape.rank >= 1 && int64_t(values.size()) == shape.numel(),
                  "Model::add_frozen: parameter '" << name << "' of shape " << shape.str() << " needs "
                                                   << shape.numel() << " values, got " << values.size());
  Param p = add(name, shape, Init::Zeros);
  params_.back().value = std::move(values);
  params_.back().frozen = true;
  return p;
}

void Model::freeze(Param p, bool frozen) {
  VJIT_USER_CHECK(p.id >= 0 && p.id < size(), "Model::freeze: unknown parameter id " << p.id);
  params_[size_t(p.id)].frozen = frozen;
}

void Model::truncate(int size) {
  if (size >= 0 && size < this->size()) params_.resize(size_t(size));
}

Param Model::find(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return Param{int(i), params_[i].shape};
  throw UserError("Model: no parameter named '" + name + "'");
}

int64_t Model::total_numel() const {
  int64_t n = 0;
  for (const ParamData& p : params_) n += p.shape.numel();
  return n;
}

}  // namespace vjit
