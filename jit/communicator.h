#pragma once
// What a vjit::Distributed runs on: the collectives of one communicator
// (vjit/distributed.h). The core library holds Distributed's member functions,
// which forward to this interface, so the engine and the gradient exchange
// (jit/gradient_exchange.h) need no MPI; the communicators themselves (over
// MPI, or one process without it) and the factory Distributed::world are in
// the library vjit_distributed (distributed/world.cpp), which alone links MPI.
#include <cstdint>
#include <span>
#include <vector>

#include "vjit/distributed.h"

namespace vjit::detail {

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank = 0, size = 1;
  bool deterministic = true;
  CommStats stats;

  // The collectives of Distributed, of the same names and meaning. The roots
  // passed to broadcast and broadcast_bytes are ranks (Distributed checks).
  virtual void allreduce_sum(std::span<float> data) = 0;
  virtual double allreduce_sum(double value) = 0;
  virtual int64_t start_sum(std::span<float> data) = 0;
  virtual bool test_sum(int64_t ticket) = 0;
  virtual void wait_sum(int64_t ticket) = 0;
  virtual void broadcast(std::span<float> data, int root) = 0;
  virtual void broadcast_bytes(std::span<uint8_t> data, int root) = 0;
  virtual void barrier() = 0;
  virtual void allgather(std::span<const int32_t> mine, std::vector<int32_t>& all, std::vector<int64_t>& counts) = 0;
  virtual void allgather(std::span<const float> mine, std::vector<float>& all, std::vector<int64_t>& counts) = 0;
};

}  // namespace vjit::detail
