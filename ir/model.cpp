#include "vjit/model.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "vjit/error.h"

namespace vjit {

namespace {
constexpr int64_t kAlignFloats = 16;  // 64 bytes: where a parameter or run starts in the block

int64_t aligned(int64_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Fan-in and fan-out of a parameter read as [out, in] (a vector is [n] → fan n).
std::pair<double, double> fans(const Shape& shape) {
  if (shape.rank == 2) return {double(shape.dims[1]), double(shape.dims[0])};
  return {double(shape.numel()), double(shape.numel())};
}
}  // namespace

ParamValues& ParamValues::operator=(std::span<const float> values) {
  VJIT_USER_CHECK(values.size() == size_, "a parameter holding " << size_ << " values cannot be assigned "
                                                                 << values.size() << " (its shape is fixed)");
  if (values.data() != data_) std::copy(values.begin(), values.end(), data_);
  return *this;
}

bool operator==(const ParamValues& a, std::span<const float> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

Model::Model(const Model& other) : seed_(other.seed_) { *this = other; }

Model& Model::operator=(const Model& other) {
  if (this == &other) return *this;
  seed_ = other.seed_;
  params_.clear();
  params_.reserve(other.params_.size());
  for (const ParamData& p : other.params_) params_.push_back(ParamData{p.name, p.shape, {}, p.frozen});
  adopt_block(other.block_, other.offsets());
  return *this;
}

std::vector<int64_t> Model::offsets() const {
  std::vector<int64_t> out(params_.size());
  for (size_t p = 0; p < params_.size(); ++p) out[p] = params_[p].value.data() - block_.data();
  return out;
}

void Model::point_at(ParamData& param, int64_t offset) {
  param.value.data_ = block_.data() + offset;
  param.value.size_ = size_t(param.shape.numel());
}

void Model::adopt_block(std::vector<float> block, const std::vector<int64_t>& offsets) {
  ++value_moves_;
  block_ = std::move(block);
  for (size_t p = 0; p < params_.size(); ++p) point_at(params_[p], offsets[p]);
}

int64_t Model::append_values(int64_t floats) {
  const int64_t at = aligned(int64_t(block_.size()));
  if (block_.capacity() >= size_t(at + floats)) {  // no reallocation: every view stays
    block_.resize(size_t(at + floats), 0.0f);
  } else {
    std::vector<float> grown;
    grown.reserve(std::max(size_t(at + floats), 2 * block_.capacity()));
    grown.assign(block_.begin(), block_.end());
    grown.resize(size_t(at + floats), 0.0f);
    adopt_block(std::move(grown), offsets());
  }
  return at;
}

Param Model::add(const std::string& name, Shape shape, Init init, float scale) {
  for (const ParamData& p : params_)
    VJIT_USER_CHECK(p.name != name, "Model::add: a parameter named '" << name << "' already exists");
  VJIT_USER_CHECK(shape.rank >= 1 && shape.numel() > 0,
                  "Model::add: parameter '" << name << "' needs a non-empty vector or matrix shape, got "
                                            << shape.str());
  const int64_t at = append_values(shape.numel());
  params_.push_back(ParamData{name, shape, {}, false});
  ParamData& data = params_.back();
  point_at(data, at);
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
  return Param{int(params_.size()) - 1, shape};
}

Param Model::add_frozen(const std::string& name, Shape shape, std::vector<float> values) {
  VJIT_USER_CHECK(shape.rank >= 1 && int64_t(values.size()) == shape.numel(),
                  "Model::add_frozen: parameter '" << name << "' of shape " << shape.str() << " needs "
                                                   << shape.numel() << " values, got " << values.size());
  Param p = add(name, shape, Init::Zeros);
  params_.back().value = values;
  params_.back().frozen = true;
  return p;
}

void Model::freeze(Param p, bool frozen) {
  VJIT_USER_CHECK(p.id >= 0 && p.id < size(), "Model::freeze: unknown parameter id " << p.id);
  params_[size_t(p.id)].frozen = frozen;
}

void Model::truncate(int size) {
  if (size < 0 || size >= this->size()) return;
  params_.resize(size_t(size));
  int64_t end = 0;  // the block keeps what the remaining parameters use
  for (const ParamData& p : params_) end = std::max(end, int64_t(p.value.end() - block_.data()));
  block_.resize(size_t(end));
}

Param Model::find(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return Param{int(i), params_[i].shape};
  std::string valid;
  for (const ParamData& p : params_) valid += (valid.empty() ? "" : ", ") + p.name;
  throw UserError("Model: no parameter named '" + name + "' (valid: " + (valid.empty() ? "none" : valid) + ")");
}

void Model::arrange(const std::vector<std::vector<int>>& runs) {
  std::vector<int> run_of(params_.size(), -1);
  for (size_t r = 0; r < runs.size(); ++r)
    for (int p : runs[r]) {
      VJIT_USER_CHECK(p >= 0 && p < size(), "Model::arrange: run " << r << " names parameter " << p << " of " << size());
      VJIT_USER_CHECK(run_of[size_t(p)] < 0, "Model::arrange: parameter '" << params_[size_t(p)].name
                                                                             << "' is in two runs or twice in one");
      run_of[size_t(p)] = int(r);
    }
  // Runs at the place of their first parameter; the rest in their present order.
  std::vector<int> present(params_.size());
  for (size_t p = 0; p < present.size(); ++p) present[p] = int(p);
  const std::vector<int64_t> old = offsets();
  std::stable_sort(present.begin(), present.end(), [&](int a, int b) { return old[size_t(a)] < old[size_t(b)]; });
  std::vector<int64_t> where(params_.size(), -1);
  std::vector<float> block;
  block.reserve(block_.size() + runs.size() * kAlignFloats);
  auto place = [&](int p) {
    where[size_t(p)] = int64_t(block.size());
    block.insert(block.end(), params_[size_t(p)].value.begin(), params_[size_t(p)].value.end());
  };
  for (int p : present) {
    if (where[size_t(p)] >= 0) continue;
    block.resize(size_t(aligned(int64_t(block.size()))), 0.0f);
    if (run_of[size_t(p)] < 0) place(p);
    else for (int q : runs[size_t(run_of[size_t(p)])]) place(q);
  }
  adopt_block(std::move(block), where);
}

bool Model::consecutive(std::span<const int> params) const {
  for (size_t i = 0; i + 1 < params.size(); ++i)
    if (param(params[i]).value.end() != param(params[i + 1]).value.begin()) return false;
  return true;
}

int64_t Model::total_numel() const {
  int64_t n = 0;
  for (const ParamData& p : params_) n += p.shape.numel();
  return n;
}

}  // namespace vjit
