#include "jit/gradient_exchange.h"

#include <algorithm>
#include <utility>

#include "runtime/cuda_driver.h"
#include "vjit/error.h"

namespace vjit {

std::vector<GradientBucket> plan_buckets(const std::vector<int64_t>& dense_floats, int64_t bucket_floats) {
  VJIT_INTERNAL_CHECK(bucket_floats > 0, "bucket of " << bucket_floats << " floats");
  std::vector<GradientBucket> buckets;
  for (size_t p = 0; p < dense_floats.size(); ++p) {
    for (int64_t offset = 0; offset < dense_floats[p];) {
      if (buckets.empty() || buckets.back().floats == bucket_floats) buckets.emplace_back();
      GradientBucket& bucket = buckets.back();
      const int64_t floats = std::min(dense_floats[p] - offset, bucket_floats - bucket.floats);
      bucket.pieces.push_back({int(p), offset, floats});
      bucket.floats += floats;
      offset += floats;
    }
  }
  return buckets;
}

std::vector<GradientBucket> plan_overlap_buckets(const std::vector<int64_t>& dense_floats,
                                                 const std::vector<int>& final_point, int64_t bucket_floats,
                                                 int64_t min_floats) {
  VJIT_INTERNAL_CHECK(bucket_floats > 0 && final_point.size() == dense_floats.size(),
                      "bucket of " << bucket_floats << " floats, " << final_point.size() << " points for "
                                   << dense_floats.size() << " parameters");
  std::vector<int> order;
  for (size_t p = 0; p < dense_floats.size(); ++p)
    if (dense_floats[p] > 0) order.push_back(int(p));
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return final_point[size_t(a)] < final_point[size_t(b)]; });
  std::vector<GradientBucket> buckets;
  bool bucket_open = false;
  int bucket_point = 0;
  for (int p : order) {
    if (bucket_open && final_point[size_t(p)] != bucket_point && buckets.back().floats >= min_floats)
      bucket_open = false;
    for (int64_t offset = 0; offset < dense_floats[size_t(p)];) {
      if (!bucket_open || buckets.back().floats == bucket_floats) {
        buckets.emplace_back();
        bucket_open = true;
      }
      GradientBucket& bucket = buckets.back();
      const int64_t floats = std::min(dense_floats[size_t(p)] - offset, bucket_floats - bucket.floats);
      bucket.pieces.push_back({p, offset, floats});
      bucket.floats += floats;
      offset += floats;
    }
    bucket_point = final_point[size_t(p)];
  }
  return buckets;
}

GradientPath choose_gradient_path(bool gradients_on_device, bool want_nccl, bool nccl_built) {
  return gradients_on_device && want_nccl && nccl_built ? GradientPath::Nccl : GradientPath::HostMpi;
}

const char* gradient_path_name(GradientPath path) { return path == GradientPath::Nccl ? "nccl" : "host-mpi"; }

GradientExchange::~GradientExchange() = default;

namespace {

// Per parameter, its gradient's size when dense, 0 when row-sparse.
std::vector<int64_t> dense_sizes(const Model& model, const std::vector<GradientRows>& rows) {
  std::vector<int64_t> dense_floats(size_t(model.size()), 0);
  for (int p = 0; p < model.size(); ++p)
    if (rows[size_t(p)].all) dense_floats[size_t(p)] = model.param(p).shape.numel();
  return dense_floats;
}

}  // namespace

void GradientExchange::sum_over_ranks(Distributed& comm, const Model& model, runtime::ParameterStore& store) {
  if (comm.size() == 1 || model.size() == 0) return;
  // A copy: sum_sparse changes the store's rows while the dense pass reads them.
  const std::vector<GradientRows> rows = store.gradient_rows();
  if (overlap_comm_) {
    VJIT_INTERNAL_CHECK(overlap_comm_ == &comm && overlap_store_ == &store,
                        "the overlapped backward had another communicator or store");
    finish_overlap(store);
    last_path_ = GradientPath::HostMpi;
  } else {
    last_path_ = choose_gradient_path(store.device_gradient(0) != 0, want_nccl_, runtime::nccl_built());
    if (last_path_ == GradientPath::Nccl && !nccl_) connect_nccl(comm);
    for (const GradientBucket& bucket : plan_buckets(dense_sizes(model, rows), Distributed::kBucketFloats)) {
      if (last_path_ == GradientPath::Nccl) sum_bucket_with_nccl(bucket, store);
      else sum_bucket_on_host(comm, bucket, store);
      ++stats_.buckets;
    }
  }
  for (int p = 0; p < model.size(); ++p)
    if (!rows[size_t(p)].all) sum_sparse(comm, model, p, store);
}

bool GradientExchange::begin_backward(Distributed& comm, const Model& model, runtime::ParameterStore& store,
                                      const std::vector<int>& gradient_final_points) {
  // A backward that threw after starting sums: they are waited for (every
  // rank started them), their results dropped.
  if (overlap_comm_)
    for (OverlapBucket& b : overlap_)
      if (b.ticket >= 0) overlap_comm_->wait_sum(std::exchange(b.ticket, -1));
  overlap_comm_ = nullptr;
  overlap_store_ = nullptr;
  if (comm.size() == 1 || model.size() == 0 || gradient_final_points.size() != size_t(model.size())) return false;
  if (choose_gradient_path(store.device_gradient(0) != 0, want_nccl_, runtime::nccl_built()) == GradientPath::Nccl)
    return false;
  if (overlap_buckets_of_.empty()) plan_overlap(model, store, gradient_final_points);
  for (OverlapBucket& b : overlap_) {
    b.missing = int(b.bucket.pieces.size());  // a parameter has one piece in a bucket
    b.ticket = -1;
  }
  overlap_comm_ = &comm;
  overlap_store_ = &store;
  last_started_ = -1;
  unstarted_ = overlap_.size();
  return true;
}

void GradientExchange::plan_overlap(const Model& model, runtime::ParameterStore& store,
                                    const std::vector<int>& final_points) {
  const std::vector<GradientBucket> buckets =
      plan_overlap_buckets(dense_sizes(model, store.gradient_rows()), final_points, Distributed::kBucketFloats,
                           min_overlap_bucket_floats_);
  overlap_.resize(buckets.size());
  overlap_buckets_of_.assign(size_t(model.size()), {});
  for (size_t b = 0; b < buckets.size(); ++b) {
    overlap_[b].bucket = buckets[b];
    overlap_[b].values.resize(size_t(buckets[b].floats));
    for (const BucketPiece& piece : buckets[b].pieces) overlap_buckets_of_[size_t(piece.param)].push_back(int(b));
  }
}

void GradientExchange::gradients_final(std::span<const int> params) {
  if (!overlap_comm_) return;
  for (int p : params)
    for (int b : overlap_buckets_of_[size_t(p)])
      if (--overlap_[size_t(b)].missing == 0) {
        start_bucket(overlap_[size_t(b)]);
        ++stats_.started_in_backward;
        if (unstarted_ > 0) ++stats_.started_early;
      }
}

void GradientExchange::between_steps() {
  if (overlap_comm_ && last_started_ >= 0) overlap_comm_->test_sum(last_started_);
}

void GradientExchange::start_bucket(OverlapBucket& b) {
  float* next = b.values.data();
  for (const BucketPiece& piece : b.bucket.pieces) {
    overlap_store_->read_gradient(piece.param, piece.offset, piece.floats, next);
    next += piece.floats;
  }
  b.ticket = last_started_ = overlap_comm_->start_sum(b.values);
  --unstarted_;
}

// Starts what the backward did not (in bucket order, the same on every rank),
// then waits for each sum in turn and writes it back.
void GradientExchange::finish_overlap(runtime::ParameterStore& store) {
  for (OverlapBucket& b : overlap_)
    if (b.ticket < 0) start_bucket(b);
  for (OverlapBucket& b : overlap_) {
    overlap_comm_->wait_sum(std::exchange(b.ticket, -1));
    const float* next = b.values.data();
    for (const BucketPiece& piece : b.bucket.pieces) {
      store.write_gradient(piece.param, piece.offset, piece.floats, next);
      next += piece.floats;
    }
    ++stats_.buckets;
  }
  overlap_comm_ = nullptr;
  overlap_store_ = nullptr;
}

void GradientExchange::sum_bucket_on_host(Distributed& comm, const GradientBucket& bucket,
                                          runtime::ParameterStore& store) {
  bucket_.resize(size_t(bucket.floats));
  float* next = bucket_.data();
  for (const BucketPiece& piece : bucket.pieces) {
    store.read_gradient(piece.param, piece.offset, piece.floats, next);
    next += piece.floats;
  }
  comm.allreduce_sum(bucket_);
  next = bucket_.data();
  for (const BucketPiece& piece : bucket.pieces) {
    store.write_gradient(piece.param, piece.offset, piece.floats, next);
    next += piece.floats;
  }
}

void GradientExchange::sum_bucket_with_nccl(const GradientBucket& bucket, runtime::ParameterStore& store) {
  nccl_->begin();
  for (const BucketPiece& piece : bucket.pieces)
    nccl_->sum(store.device_gradient(piece.param) + uint64_t(piece.offset) * sizeof(float), piece.floats);
  nccl_->end();
}

// Every rank checks that it can use NCCL before rank 0 makes the id the
// others wait for, so a missing library or a shared GPU fails each rank at
// once with its own reason.
void GradientExchange::connect_nccl(Distributed& comm) {
  const std::string unavailable = runtime::nccl_unavailable_reason();
  VJIT_USER_CHECK(unavailable.empty(), "data-parallel training on the GPU: " << unavailable);
  runtime::CudaDevice& device = runtime::CudaDevice::get();
  runtime::check_gpu_per_rank(runtime::local_rank_from_env(), device.info().devices);
  runtime::NcclId id{};
  if (comm.rank() == 0) id = runtime::nccl_unique_id();
  comm.broadcast_bytes(id);
  nccl_ = std::make_unique<runtime::NcclCommunicator>(device, comm.rank(), comm.size(), id, timeout_s_);
}

// The union of the rows every rank touched, each summed in rank order from
// zero: the same sums on every rank, as one process adding the shards'
// gradients in rank order would form them.
void GradientExchange::sum_sparse(Distributed& comm, const Model& model, int param, runtime::ParameterStore& store) {
  const Shape& shape = model.param(param).shape;
  const int64_t cols = shape.cols();
  my_rows_ = store.gradient_rows()[size_t(param)].rows;
  my_values_.resize(my_rows_.size() * size_t(cols));
  for (size_t i = 0; i < my_rows_.size(); ++i)
    store.read_gradient(param, int64_t(my_rows_[i]) * cols, cols, my_values_.data() + i * size_t(cols));
  comm.allgather(std::span<const int32_t>(my_rows_), all_rows_, row_counts_);
  comm.allgather(std::span<const float>(my_values_), all_values_, value_counts_);
  union_rows_ = all_rows_;
  std::sort(union_rows_.begin(), union_rows_.end());
  union_rows_.erase(std::unique(union_rows_.begin(), union_rows_.end()), union_rows_.end());
  union_sums_.assign(union_rows_.size() * size_t(cols), 0.0f);
  for (size_t i = 0; i < all_rows_.size(); ++i) {
    const int32_t row = all_rows_[i];
    VJIT_INTERNAL_CHECK(row >= 0 && row < shape.rows(), "rank sent row " << row << " of " << model.param(param).name);
    const size_t slot = size_t(std::lower_bound(union_rows_.begin(), union_rows_.end(), row) - union_rows_.begin());
    const float* values = all_values_.data() + i * size_t(cols);
    float* sum = union_sums_.data() + slot * size_t(cols);
    for (int64_t c = 0; c < cols; ++c) sum[c] += values[c];
  }
  for (size_t i = 0; i < union_rows_.size(); ++i)
    store.write_gradient(param, int64_t(union_rows_[i]) * cols, cols, union_sums_.data() + i * size_t(cols));
  store.add_touched_rows(param, union_rows_);
}

}  // namespace vjit
