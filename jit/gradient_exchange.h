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
#include <span>
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

// The buckets of the overlapped exchange (Options::Tuning::dist_overlap): the dense
// parameters in the order the backward makes their gradients final
// (final_point[p], runtime::Executor::gradient_final_points; ties in
// parameter order), cut into buckets of at most bucket_floats. A bucket also
// ends where the point changes once it holds min_floats, so that gradients
// final early are summed while the backward goes on. (Which values share a
// bucket does not change the sums: each value is summed over the ranks alone.)
std::vector<GradientBucket> plan_overlap_buckets(const std::vector<int64_t>& dense_floats,
                                                 const std::vector<int>& final_point, int64_t bucket_floats,
                                                 int64_t min_floats);

enum class GradientPath {
  HostMpi,  // through host memory, Distributed::allreduce_sum
  Nccl,     // on the GPUs, ncclAllReduce in place
};

// NCCL where the gradients are on a GPU, NCCL is wanted (Options::Tuning::dist_nccl)
// and built; through host memory otherwise.
GradientPath choose_gradient_path(bool gradients_on_device, bool want_nccl, bool nccl_built);
const char* gradient_path_name(GradientPath path);

// The dense buckets summed since the exchange was made, and those of them
// whose sum started during the backward pass (Options::Tuning::dist_overlap).
// started_early: of those, the ones started while another bucket still
// waited for gradients (the backward had steps left that write them).
struct ExchangeStats {
  int64_t buckets = 0;
  int64_t started_in_backward = 0;
  int64_t started_early = 0;
};

// Overlapped (Options::Tuning::dist_overlap, host path only): begin_backward before
// the backward, which then tells this exchange (a runtime::BackwardObserver)
// when gradients are final; each bucket's sum starts (Distributed::start_sum)
// as soon as all of its gradients are, progresses between the backward's
// steps, and sum_over_ranks waits for them, writes the sums back and then
// exchanges the embedding rows as without the overlap.
class GradientExchange final : public runtime::BackwardObserver {
 public:
  // `want_nccl`: Options::Tuning::dist_nccl; `timeout_s`: NCCL's deadline (Options::dist_timeout).
  // `min_overlap_bucket_floats`: plan_overlap_buckets' min_floats.
  GradientExchange(bool want_nccl = true, double timeout_s = 300,
                   int64_t min_overlap_bucket_floats = kMinOverlapBucketFloats)
      : want_nccl_(want_nccl), timeout_s_(timeout_s), min_overlap_bucket_floats_(min_overlap_bucket_floats) {}
  ~GradientExchange() override;

  // Before a backward whose gradients sum_over_ranks sums next: true when this
  // exchange is to hear of the gradients as they become final (pass it to
  // Executor::set_backward_observer); false when it cannot overlap (one
  // process, no gradient_final_points, the NCCL path).
  bool begin_backward(Distributed& comm, const Model& model, runtime::ParameterStore& store,
                      const std::vector<int>& gradient_final_points);
  void gradients_final(std::span<const int> params) override;
  void between_steps() override;

  void sum_over_ranks(Distributed& comm, const Model& model, runtime::ParameterStore& store);
  // The path the last sum_over_ranks took (HostMpi before the first).
  GradientPath last_path() const { return last_path_; }
  const ExchangeStats& stats() const { return stats_; }

  // Bucket size below which the overlapped plan does not end a bucket where
  // the final point changes (256 KiB: a collective each costs some tens of
  // microseconds between processes of one machine).
  static constexpr int64_t kMinOverlapBucketFloats = int64_t(1) << 16;

 private:
  // One bucket of the overlapped exchange.
  struct OverlapBucket {
    GradientBucket bucket;
    std::vector<float> values;  // its gradients, then their sums
    int missing = 0;            // its parameters whose gradients are not final yet
    int64_t ticket = -1;        // Distributed::start_sum's; -1: not started
  };
  void plan_overlap(const Model& model, runtime::ParameterStore& store, const std::vector<int>& final_points);
  void start_bucket(OverlapBucket& bucket);
  void finish_overlap(runtime::ParameterStore& store);

  void sum_bucket_on_host(Distributed& comm, const GradientBucket& bucket, runtime::ParameterStore& store);
  void sum_bucket_with_nccl(const GradientBucket& bucket, runtime::ParameterStore& store);
  void connect_nccl(Distributed& comm);
  void sum_sparse(Distributed& comm, const Model& model, int param, runtime::ParameterStore& store);

  bool want_nccl_ = true;
  double timeout_s_ = 300;
  int64_t min_overlap_bucket_floats_ = kMinOverlapBucketFloats;
  GradientPath last_path_ = GradientPath::HostMpi;
  std::unique_ptr<runtime::NcclCommunicator> nccl_;  // made on the first GPU exchange
  // Scratch kept between steps.
  std::vector<float> bucket_;
  std::vector<int32_t> my_rows_, all_rows_, union_rows_;
  std::vector<float> my_values_, all_values_, union_sums_;
  std::vector<int64_t> row_counts_, value_counts_;
  ExchangeStats stats_;
  // The overlap: its buckets (planned once: which parameters are dense and
  // when their gradients are final do not change), per parameter the buckets
  // holding a piece of it, and the communicator and store of the backward
  // being overlapped (null: none).
  std::vector<OverlapBucket> overlap_;
  std::vector<std::vector<int>> overlap_buckets_of_;
  Distributed* overlap_comm_ = nullptr;
  runtime::ParameterStore* overlap_store_ = nullptr;
  int64_t last_started_ = -1;  // the last started bucket's ticket, for polling
  size_t unstarted_ = 0;        // buckets of the overlapped backward not started yet
};

}  // namespace vjit
