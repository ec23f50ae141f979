#pragma once
// NCCL between GPUs, for data-parallel training with the CUDA executor
// (jit/gradient_exchange.h): each process of the job drives one GPU (its
// local rank's, runtime/cuda_driver.h) and the dense gradients are summed on
// the GPUs with ncclAllReduce, in place, one NCCL group per bucket.
//
// Built when the CUDA back end, MPI and NCCL's header are all found
// (VJIT_HAVE_NCCL, CMakeLists.txt); libnccl is loaded with dlopen when the
// first communicator is made, so binaries start without it. The unique id
// NCCL needs on every rank is made by rank 0 (nccl_unique_id) and sent to the
// others by the caller (over MPI: vjit::Distributed::broadcast_bytes).
//
// Faults: every group is waited for by polling an event against a deadline
// (Options::dist_timeout); past it the communicator is aborted
// (ncclCommAbort) and DistributedError names the rank and the wait.
// ncclCommInitRank itself has no deadline: it returns when every rank has
// joined (a rank that dies before that leaves mpirun to end the job).
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/cuda_driver.h"

namespace vjit::runtime {

// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES).
constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<uint8_t, kNcclIdBytes>;

// True when vjit was built with NCCL.
bool nccl_built();
// Empty when NCCL can be used here (built and libnccl loads); otherwise why not.
std::string nccl_unavailable_reason();
// Throws UserError when a node runs more processes than it has GPUs: NCCL
// needs a GPU of its own for every rank.
void check_gpu_per_rank(int local_rank, int gpus);

// A fresh id for a new communicator (ncclGetUniqueId); made by one rank.
NcclId nccl_unique_id();

class NcclCommunicator {
 public:
  // Joins the communicator of `size` ranks named by `id` as `rank`, on
  // `device`'s GPU and its stream 0 (ncclCommInitRank: every rank must call
  // it). Throws UserError when NCCL is unavailable or the GPU is shared.
  NcclCommunicator(CudaDevice& device, int rank, int size, const NcclId& id, double timeout_s);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // One bucket: begin(), then sum() per piece of it, then end(), which
  // launches the group and waits (polling, with the deadline) until every
  // piece is summed over the ranks, in place.
  void begin();
  void sum(DevicePtr data, int64_t floats);
  void end();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vjit::runtime
