#include "jit/gradient_exchange.h"

#include <algorithm>

#include "vjit/error.h"

namespace vjit {

void GradientExchange::sum_over_ranks(Distributed& comm, const Model& model, runtime::ParameterStore& store) {
  std::vector<std::vector<float>>* grads = store.writable_gradients();
  VJIT_USER_CHECK(grads != nullptr, "data-parallel training (Engine::set_distributed) runs on the CPU executor "
                                    "only (VJIT_DEVICE=cpu): this executor keeps its gradients on the device");
  if (comm.size() == 1) return;
  // A copy: sum_sparse changes the store's rows while the dense pass reads them.
  const std::vector<GradientRows> rows = store.gradient_rows();
  sum_dense(comm, model, rows, *grads);
  for (int p = 0; p < model.size(); ++p)
    if (!rows[size_t(p)].all) sum_sparse(comm, model, p, store, (*grads)[size_t(p)]);
}

void GradientExchange::sum_dense(Distributed& comm, const Model& model, const std::vector<GradientRows>& rows,
                                 std::vector<std::vector<float>>& grads) {
  dense_.clear();
  for (int p = 0; p < model.size(); ++p)
    if (rows[size_t(p)].all) dense_.insert(dense_.end(), grads[size_t(p)].begin(), grads[size_t(p)].end());
  comm.allreduce_sum(dense_);
  size_t offset = 0;
  for (int p = 0; p < model.size(); ++p) {
    if (!rows[size_t(p)].all) continue;
    std::vector<float>& g = grads[size_t(p)];
    std::copy_n(dense_.begin() + int64_t(offset), g.size(), g.begin());
    offset += g.size();
  }
}

void GradientExchange::sum_sparse(Distributed& comm, const Model& model, int param, runtime::ParameterStore& store,
                                  std::vector<float>& grad) {
  const Shape& shape = model.param(param).shape;
  const size_t cols = size_t(shape.cols());
  my_rows_ = store.gradient_rows()[size_t(param)].rows;
  my_values_.resize(my_rows_.size() * cols);
  for (size_t i = 0; i < my_rows_.size(); ++i) {
    float* row = grad.data() + size_t(my_rows_[i]) * cols;
    std::copy_n(row, cols, my_values_.begin() + int64_t(i * cols));
    std::fill_n(row, cols, 0.0f);  // the sum starts from zero and adds every rank's rows in rank order
  }
  comm.allgather(std::span<const int32_t>(my_rows_), all_rows_, row_counts_);
  comm.allgather(std::span<const float>(my_values_), all_values_, value_counts_);
  for (size_t i = 0; i < all_rows_.size(); ++i) {
    const int32_t row = all_rows_[i];
    VJIT_INTERNAL_CHECK(row >= 0 && row < shape.rows(), "rank sent row " << row << " of " << model.param(param).name);
    const float* values = all_values_.data() + i * cols;
    float* sum = grad.data() + size_t(row) * cols;
    for (size_t c = 0; c < cols; ++c) sum[c] += values[c];
  }
  store.add_touched_rows(param, all_rows_);
}

}  // namespace vjit
