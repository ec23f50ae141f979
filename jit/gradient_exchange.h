#pragma once
// Data-parallel training: replaces one backward's gradients in a parameter
// store by their sums over every process of a vjit::Distributed, so that each
// process then takes the same optimizer step (Engine::train_step; the contract
// is in include/vjit/distributed.h). One code path for every executor:
//   Dense parameters: cut, in parameter order, into buckets of at most
//   Distributed::kBucketFloats floats (plan_buckets; a large parameter spans
//   several). Each bucket is one sum over the ranks, by one of two paths
//   (choose_gradient_path): through host memory with
//   Distributed::allreduce_sum (the CPU executor; a GPU's gradients copied
//   down and up), or, where the store keeps its gradients on a GPU and vjit
//   was built with NCCL, in place on the GPUs with one NCCL group per bucket.
//   Embedding tables (row-sparse gradients): each process contributes its
//   touched rows and their gradient rows (allgather, through host memory on
//   every executor); every process adds them up, in rank order, into the union
//   of the rows, writes those sums back and lists the union as the table's
//   touched rows.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/executor.h"
#include "runtime/nccl.h"
#include "vjit/distributed.h"
#include "vjit/model.h"

namespace vjit {

// A piece of one dense parameter's gradient: `floats` values from `offset` on.
struct BucketPiece {
  int param = 0;
  int64_t offset = 0, floats = 0;
};

// What one collective sums: pieces of consecutive dense parameters.
struct GradientBucket {
  std::vector<BucketPiece> pieces;
  int64_t floats = 0;
};

// The buckets of the dense gradients: dense_floats[p] is parameter p's size,
// 0 for one that is not dense (an embedding table). Parameter order, each
// bucket full (bucket_floats) but the last; every value in exactly one piece.
std::vector<GradientBucket> plan_buckets(const std::vector<int64_t>& dense_floats, int64_t bucket_floats);

enum class GradientPath {
  HostMpi,  // through host memory, Distributed::allreduce_sum
  Nccl,     // on the GPUs, ncclAllReduce in place
};

// NCCL where the gradients are on a GPU, NCCL is wanted (Options::dist_nccl)
// and built; through host memory otherwise.
GradientPath choose_gradient_path(bool gradients_on_device, bool want_nccl, bool nccl_built);
const char* gradient_path_name(GradientPath path);

class GradientExchange {
 public:
  // `want_nccl`: Options::dist_nccl; `timeout_s`: NCCL's deadline (Options::dist_timeout).
  GradientExchange(bool want_nccl = true, double timeout_s = 300) : want_nccl_(want_nccl), timeout_s_(timeout_s) {}
  ~GradientExchange();

  void sum_over_ranks(Distributed& comm, const Model& model, runtime::ParameterStore& store);
  // The path the last sum_over_ranks took (HostMpi before the first).
  GradientPath last_path() const { return last_path_; }

 private:
  void sum_bucket_on_host(Distributed& comm, const GradientBucket& bucket, runtime::ParameterStore& store);
  void sum_bucket_with_nccl(const GradientBucket& bucket, runtime::ParameterStore& store);
  void connect_nccl(Distributed& comm);
  void sum_sparse(Distributed& comm, const Model& model, int param, runtime::ParameterStore& store);

  bool want_nccl_ = true;
  double timeout_s_ = 300;
  GradientPath last_path_ = GradientPath::HostMpi;
  std::unique_ptr<runtime::NcclCommunicator> nccl_;  // made on the first GPU exchange
  // Scratch kept between steps.
  std::vector<float> bucket_;
  std::vector<int32_t> my_rows_, all_rows_, union_rows_;
  std::vector<float> my_values_, all_values_, union_sums_;
  std::vector<int64_t> row_counts_, value_counts_;
};

}  // namespace vjit
