#pragma once
// Data-parallel training: replaces one backward's gradients in a parameter
// store by their sums over every process of a vjit::Distributed, so that each
// process then takes the same optimizer step (Engine::train_step; the contract
// is in include/vjit/distributed.h).
//   Dense parameters: packed, in parameter order, into one buffer summed by
//   Distributed::allreduce_sum (which cuts it into buckets).
//   Embedding tables (row-sparse gradients): each process contributes its
//   touched rows and their gradient rows (allgather); every process adds them
//   up, in rank order, into the union of the rows, and lists that union as the
//   table's touched rows.
#include <cstdint>
#include <vector>

#include "runtime/executor.h"
#include "vjit/distributed.h"
#include "vjit/model.h"

namespace vjit {

class GradientExchange {
 public:
  // Throws UserError when the store keeps its gradients off the host.
  void sum_over_ranks(Distributed& comm, const Model& model, runtime::ParameterStore& store);

 private:
  void sum_dense(Distributed& comm, const Model& model, const std::vector<GradientRows>& rows,
                 std::vector<std::vector<float>>& grads);
  void sum_sparse(Distributed& comm, const Model& model, int param, runtime::ParameterStore& store,
                  std::vector<float>& grad);

  // Scratch kept between steps.
  std::vector<float> dense_;
  std::vector<int32_t> my_rows_, all_rows_;
  std::vector<float> my_values_, all_values_;
  std::vector<int64_t> row_counts_, value_counts_;
};

}  // namespace vjit
