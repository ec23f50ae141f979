#pragma once
// A CUDA graph per pass (VJIT_CUDA_GRAPHS): the CUDA device captures the work
// a forward or backward queues on its stream (cuStreamBeginCapture ..
// cuStreamEndCapture) and runs it as one cuGraphLaunch instead of hundreds of
// launches, copies and fills.
//
// A pass is captured every time it runs (the host still walks the plan and
// stages its index lists), but it is instantiated only when its structure is
// new: a capture whose structure equals one seen before updates that one's
// executable graph in place (cuGraphExecUpdate), the addresses, sizes and
// grids of its nodes being all that differs. The structure is the list of the
// primitives' device calls as the driver's update sees them: per kernel its
// function and block, per product its shape (cuBLASLt picks its kernels by
// shape), per copy its direction, per fill nothing but that it is one; not
// the grids, the rows or the addresses. Where the driver refuses an update
// all the same (a buffer that grew since is another allocation), the graph is
// instantiated again.
//
// None of this has run on a GPU: it is checked through the driver double
// (tests/cuda_double/), which models capture, instantiation, update and
// launch, and it stays off by default (docs/gpu.md).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/cuda_driver.h"

namespace vjit::runtime {

// The structure of a captured pass, call by call (see above). Two passes
// whose structures are equal can share one executable graph.
class GraphStructure {
 public:
  void kernel(const void* function, unsigned block, int stream);
  // `shape`: what the device's GEMM plan is keyed by (transposes, m, n, k,
  // leading dimensions, TF32).
  void gemm(std::span<const int64_t> shape, int stream);
  void copy(bool to_device, int stream);
  void fill(int stream);
  void clear() { words_.clear(), calls_ = 0; }
  size_t calls() const { return calls_; }
  size_t hash() const;
  bool operator==(const GraphStructure& other) const { return words_ == other.words_; }

 private:
  void call(uint64_t kind, int stream);
  std::vector<uint64_t> words_;
  size_t calls_ = 0;
};

// What the graphs of one executor did since it was made.
struct GraphCounts {
  int64_t captures = 0;
  int64_t instantiations = 0;  // a structure new to the cache, or an update the driver refused
  int64_t updates = 0;         // an executable graph updated in place
  int64_t refused_updates = 0;
  int64_t launches = 0;
};

// One executor's graphs: the executable graph of each structure seen lately
// (at most kMaxGraphs, the least recently used going first).
class StepGraphs {
 public:
  static constexpr size_t kMaxGraphs = 16;
  StepGraphs(CudaDevice& device, bool on) : device_(device), on_(on) {}
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  bool on() const { return on_; }
  bool capturing() const { return capturing_; }
  const GraphCounts& counts() const { return counts_; }

  // Buffers a captured pass's copies read or write, replaced while it was
  // captured (a staging buffer that grew): kept until the pass's graph has
  // run, freed when the next pass is captured (every pass ends with the device idle).
  void retire(DeviceBuffer buffer, void* pinned_host);

  // The capture of one pass on `stream`: begun when made (when graphs are on),
  // ended and launched by launch(); a pass left by an exception ends the
  // capture and drops what it captured.
  class Capture {
   public:
    Capture(StepGraphs& graphs, int stream);
    ~Capture();
    Capture(const Capture&) = delete;
    Capture& operator=(const Capture&) = delete;
    void launch();

   private:
    StepGraphs& graphs_;
    int stream_;
  };

 private:
  struct Cached {
    GraphStructure structure;
    size_t hash = 0;
    void* exec = nullptr;
    int64_t last_used = 0;
  };
  void begin(int stream);
  void end_and_launch(int stream);
  void abandon(int stream);
  // The executable graph for `graph`, whose structure is structure_: updated
  // from it or made from it.
  void* executable_for(void* graph);
  void free_retired();

  CudaDevice& device_;
  bool on_;
  bool capturing_ = false;
  GraphStructure structure_;
  std::vector<Cached> cache_;
  GraphCounts counts_;
  std::vector<DeviceBuffer> retired_buffers_;
  std::vector<void*> retired_pinned_;
};

}  // namespace vjit::runtime
