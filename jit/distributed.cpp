#include "vjit/distributed.h"

#include "jit/communicator.h"

namespace vjit {

// Distributed::world, available and launched_with_several_processes, and the
// communicators themselves, are in distributed/world.cpp (vjit::distributed).

Distributed::Distributed(std::unique_ptr<detail::Communicator> communicator) : impl_(std::move(communicator)) {}
Distributed::~Distributed() = default;

int Distributed::rank() const { return impl_->rank; }
int Distributed::size() const { return impl_->size; }
bool Distributed::deterministic() const { return impl_->deterministic; }
const CommStats& Distributed::stats() const { return impl_->stats; }
void Distributed::reset_stats() { impl_->stats = {}; }

void Distributed::allreduce_sum(std::span<float> data) { impl_->allreduce_sum(data); }
double Distributed::allreduce_sum(double value) { return impl_->allreduce_sum(value); }
int64_t Distributed::start_sum(std::span<float> data) { return impl_->start_sum(data); }
bool Distributed::test_sum(int64_t ticket) { return impl_->test_sum(ticket); }
void Distributed::wait_sum(int64_t ticket) { impl_->wait_sum(ticket); }
void Distributed::barrier() { impl_->barrier(); }

void Distributed::broadcast(std::span<float> data, int root) {
  VJIT_USER_CHECK(root >= 0 && root < size(), "Distributed::broadcast: root " << root << " is not a rank of " << size());
  impl_->broadcast(data, root);
}

void Distributed::broadcast_bytes(std::span<uint8_t> data, int root) {
  VJIT_USER_CHECK(root >= 0 && root < size(), "Distributed::broadcast_bytes: root " << root << " is not a rank of "
                                                                                     << size());
  impl_->broadcast_bytes(data, root);
}

void Distributed::allgather(std::span<const int32_t> mine, std::vector<int32_t>& all, std::vector<int64_t>& counts) {
  impl_->allgather(mine, all, counts);
}

void Distributed::allgather(std::span<const float> mine, std::vector<float>& all, std::vector<int64_t>& counts) {
  impl_->allgather(mine, all, counts);
}

GraphBatch Distributed::shard(const GraphBatch& global) const {
  const size_t count = global.samples.size(), ranks = size_t(impl_->size), rank = size_t(impl_->rank);
  VJIT_USER_CHECK(count >= ranks, "Distributed::shard: a global batch of " << count << " samples cannot give each of "
                                                                        << ranks << " ranks a sample");
  GraphBatch mine;
  const size_t begin = rank * count / ranks, end = (rank + 1) * count / ranks;
  mine.samples.assign(global.samples.begin() + int64_t(begin), global.samples.begin() + int64_t(end));
  mine.first_sample = global.first_sample + int(begin);
  return mine;
}

}  // namespace vjit
