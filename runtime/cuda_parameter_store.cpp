// The CUDA device's parameter store: parameters and gradients in two device
// blocks, the Model's values and the host gradients page-locked for the
// transfers. The optimizer step over it is CudaExecutor::update.
#include "runtime/cuda_executor.h"

#include <cstring>

namespace vjit::runtime {

CudaParameterStore::CudaParameterStore(CudaExecutor& owner, CudaDevice& device, Model& model, const ExecPlan& plan)
    : owner_(owner),
      device_(device),
      model_(model),
      values_(size_t(model.size())),
      grads_(size_t(model.size())),
      touched_(model, plan),
      host_grads_(size_t(model.size())),
      host_rows_(size_t(model.size())) {
  // Two blocks, each parameter's part 256-byte aligned.
  std::vector<size_t> offset(size_t(model.size()) + 1, 0);
  for (size_t p = 0; p < size_t(model.size()); ++p)
    offset[p + 1] = offset[p] + ((size_t(model.param(int(p)).shape.numel()) * sizeof(float) + 255) & ~size_t(255));
  values_bytes_ = offset.back();
  values_block_ = DeviceBuffer(device_, values_bytes_);
  grads_block_ = DeviceBuffer(device_, offset.back());
  device_.memset_zero(grads_block_.get(), offset.back());
  for (size_t p = 0; p < size_t(model.size()); ++p) {
    const size_t numel = size_t(model.param(int(p)).shape.numel());
    values_[p] = values_block_.get() + offset[p];
    grads_[p] = grads_block_.get() + offset[p];
    host_grads_[p].assign(numel, 0.0f);
    for (void* host : {static_cast<void*>(host_grads_[p].data()), static_cast<void*>(model.param(int(p)).value.data())})
      if (device_.pin(host, numel * sizeof(float))) pinned_.push_back(host);
  }
  upload(model);
}

CudaParameterStore::~CudaParameterStore() {
  for (void* host : pinned_) device_.unpin(host);
  device_.free_pinned(values_mirror_);
}

void CudaParameterStore::upload(const Model& model) {
  CudaDevice::get();
  for (int p = 0; p < model.size(); ++p) {
    const ParamData& param = model.param(p);
    device_.upload(values_[size_t(p)], param.value.data(), param.value.size() * sizeof(float));
  }
  device_.synchronize();
  model_behind_ = false;
}

// The whole values block in one copy, through a page-locked mirror made the
// first time (the Model's own pages may not all be pinned, and one transfer
// of the block costs less than one per parameter).
void CudaParameterStore::download(Model& model) const {
  if (!model_behind_) return;
  CudaDevice::get();
  const size_t bytes = values_bytes_;
  if (!values_mirror_) values_mirror_ = static_cast<char*>(device_.alloc_pinned(bytes));
  device_.download(values_mirror_, values_block_.get(), bytes);
  for (int p = 0; p < model.size(); ++p) {
    ParamData& param = model.param(p);
    std::memcpy(param.value.data(), values_mirror_ + (values_[size_t(p)] - values_block_.get()),
                param.value.size() * sizeof(float));
  }
  model_behind_ = false;
}

const std::vector<std::vector<float>>& CudaParameterStore::gradients() const {
  if (!host_current_) {
    owner_.fetch_gradients();
    host_current_ = true;
  }
  return host_grads_;
}

// Data-parallel training's reads and writes (jit/gradient_exchange.cpp): a
// dense gradient whole, an embedding table's a row at a time. A write makes
// the host copy stale and leaves the device holding the summed gradients.
void CudaParameterStore::read_gradient(int param, int64_t offset, int64_t floats, float* values) const {
  CudaDevice::get();
  device_.download(values, grads_[size_t(param)] + DevicePtr(offset) * sizeof(float), size_t(floats) * sizeof(float));
}

void CudaParameterStore::write_gradient(int param, int64_t offset, int64_t floats, const float* values) {
  CudaDevice::get();
  device_.upload(grads_[size_t(param)] + DevicePtr(offset) * sizeof(float), values, size_t(floats) * sizeof(float));
  device_.synchronize();
  host_current_ = false;
}

void CudaParameterStore::add_touched_rows(int param, std::span<const int32_t> rows) {
  for (int32_t row : rows) touched_.touch(param, row);
  touched_.finish();
  host_current_ = false;
}

}  // namespace vjit::runtime
