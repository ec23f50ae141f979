#pragma once
// Data-parallel training across processes (and machines) over MPI.
//
//   auto world = vjit::Distributed::world();            // MPI_COMM_WORLD (MPI_Init on first use)
//   vjit::Engine engine(program);
//   engine.set_distributed(world);                      // train_step now sums gradients over the ranks
//   for (const GraphBatch& global : batches)
//     engine.train_step(world->shard(global), adam);    // each rank runs its share of the global batch
//
// Every rank builds the same Program (same parameters: initialise them from the
// same seed, or load one checkpoint) and calls train_step with its shard of the
// same global batch. Engine::train_step then runs forward and backward on the
// shard, replaces the gradients by their sum over all ranks, and takes the same
// optimizer step on every rank, so the parameters stay equal everywhere. The
// objective is a sum over samples, so the summed gradient is the gradient of the
// global batch, and train_step returns the global batch's objective.
//
// What is exchanged: the dense parameters' gradients in buckets of about
// kBucketFloats floats (one collective per bucket, not per parameter); the
// embedding tables' gradients sparsely, only the rows some rank touched (each
// rank sends its touched rows and their gradient rows; every rank merges them
// into the union of the rows, which the optimizer then updates, as a single
// process would). The exchange runs after the backward pass, unless
// Options::Tuning::dist_overlap (VJIT_DIST_OVERLAP) asks the CPU executor to start each
// dense bucket's sum during the backward pass, once the last step that writes
// one of its gradients has run (start_sum; jit/gradient_exchange.h): the sums
// are the same, bitwise. The embedding rows are exchanged after the backward
// either way, and a GPU's gradients too (the CUDA executor does not overlap).
//
// Reduction order. With Options::deterministic (VJIT_DETERMINISTIC, the
// default) every sum is formed in rank order, 0 + g₀ + g₁ + … + g_{N−1}, from
// the gathered contributions of all ranks (MPI_Iallgather): every rank gets the
// bitwise same sums, equal to those one process gets by adding the shards'
// gradients in rank order, and a run is bitwise reproducible. Open MPI's
// MPI_Allreduce does not promise a fixed order, so it is used only with
// deterministic off (less traffic for N > 2: a ring moves 2(N−1)/N of the
// bytes, the gather N−1 times them); the results then agree to rounding.
// Either way a sum differs from a single process's gradient of the whole batch
// by float rounding only (the backward adds the samples in another order).
//
// Faults. Every collective is non-blocking and polled (MPI_Test) against a
// deadline, Options::dist_timeout (VJIT_DIST_TIMEOUT, seconds): a rank that
// died or hangs makes the others throw DistributedError naming the collective,
// the rank and the time waited, instead of waiting forever. After that error
// the communicator is unusable: the process should report and exit; the
// Distributed destructor then aborts the job (MPI_Abort) instead of
// finalizing. (mpirun itself usually ends the job first when a rank is killed.)
//
// Without MPI (vjit built without Open MPI), world() is a one-process
// communicator (rank 0 of 1) whose collectives return their input, so programs
// written for it run unchanged; launched by mpirun (OMPI_COMM_WORLD_SIZE > 1)
// it throws a UserError saying vjit was built without MPI.
//
// Linking: world(), available() and launched_with_several_processes() are in
// the component `distributed` (target vjit::distributed: find_package(vjit
// COMPONENTS distributed)), which links MPI; vjit::vjit alone does not.
//
// Threads: call a Distributed from one thread at a time (MPI_THREAD_FUNNELED).
// GPUs: with the CUDA executor (VJIT_DEVICE=cuda) each process drives the
// GPU of its local rank (runtime/cuda_driver.h); the dense gradients are
// summed with ncclAllReduce between the GPUs when vjit was built with NCCL and
// VJIT_DIST_NCCL is on (the NCCL unique id goes from rank 0 to the others by
// broadcast_bytes), otherwise through host memory over MPI; embedding rows go
// through host memory and MPI either way. Same buckets, same rows, same API
// (jit/gradient_exchange.h). NCCL's sum is not in rank order: with NCCL the
// ranks agree bitwise with each other, but not with the CPU's rank-order sum.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vjit/error.h"
#include "vjit/graph.h"
#include "vjit/options.h"

namespace vjit {

namespace detail {
class Communicator;  // jit/communicator.h
}

/// Time and bytes spent in collectives since the communicator was made.
struct CommStats {
  int64_t collectives = 0;  ///< collectives this rank took part in
  int64_t bytes_sent = 0;  ///< this rank's contributions, summed
  double seconds = 0;      ///< wall time inside collectives (waiting for the slowest rank included);
                           ///< of a started sum (start_sum), the time in its start, tests and wait
};

/// A communicator over the processes of an MPI job: the collectives of
/// data-parallel training (Engine::set_distributed). Without MPI, or run
/// without mpirun, it is one process (rank 0 of 1).
class Distributed {
 public:
  /// The dense gradients go in buckets of this many floats (4 MiB).
  static constexpr int64_t kBucketFloats = int64_t(1) << 20;

  /// The communicator over every process of the job (MPI_COMM_WORLD), made once
  /// per process; MPI is initialised on the first call and finalised at exit.
  /// `options` gives deterministic and dist_timeout.
  static std::shared_ptr<Distributed> world(const Options& options = Options::from_env());
  /// True when vjit was built with MPI.
  static bool available();
  /// True when this process was started by mpirun with more than one process
  /// (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE > 1 in the environment).
  static bool launched_with_several_processes();

  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const;           ///< this process's rank, 0 to size() − 1
  int size() const;           ///< the processes of the job
  bool deterministic() const; ///< sums in rank order (Options::deterministic)

  /// In place: data becomes the element-wise sum over all ranks (every rank
  /// passes the same length). Deterministic: summed in rank order.
  void allreduce_sum(std::span<float> data);
  /// The sum over all ranks of one value, in rank order.
  double allreduce_sum(double value);

  /// The same sum as allreduce_sum(data), not waited for: it progresses while
  /// test_sum or wait_sum is called (the overlap of the gradient exchange with
  /// the backward pass, Options::Tuning::dist_overlap). `data` (at most kBucketFloats
  /// floats) must stay alive and untouched until wait_sum returns; every rank
  /// starts its sums in the same order. Returns the sum's ticket. Deterministic:
  /// the ranks' data are gathered, and added in rank order by wait_sum.
  int64_t start_sum(std::span<float> data);
  /// Lets every started sum progress (MPI_Test); true when `ticket`'s is complete.
  /// Throws DistributedError when a sum was started more than dist_timeout ago.
  bool test_sum(int64_t ticket);
  /// Waits for `ticket`'s sum (bounded by dist_timeout from its start); data then
  /// holds the sum. A ticket is waited for once; when no sum is left pending,
  /// tickets start again from 0.
  void wait_sum(int64_t ticket);
  /// Every rank gets root's data (the same length on every rank).
  void broadcast(std::span<float> data, int root = 0);
  /// The same for raw bytes (an NCCL unique id, runtime/nccl.h).
  void broadcast_bytes(std::span<uint8_t> data, int root = 0);
  void barrier();  ///< returns once every rank called it
  /// Gathers a variable-length contribution of every rank, concatenated in rank
  /// order; counts[r] says how many elements came from rank r.
  /// @{
  void allgather(std::span<const int32_t> mine, std::vector<int32_t>& all, std::vector<int64_t>& counts);
  void allgather(std::span<const float> mine, std::vector<float>& all, std::vector<int64_t>& counts);
  /// @}

  /// This rank's share of a global batch: the samples [rank·B/N, (rank+1)·B/N).
  GraphBatch shard(const GraphBatch& global) const;

  const CommStats& stats() const;  ///< since the communicator was made or reset_stats()
  void reset_stats();              ///< zeroes stats()

 private:
  explicit Distributed(std::unique_ptr<detail::Communicator> communicator);
  std::unique_ptr<detail::Communicator> impl_;
};

}  // namespace vjit
