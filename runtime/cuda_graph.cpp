#include "runtime/cuda_graph.h"

#include <algorithm>
#include <functional>

namespace vjit::runtime {

namespace {

// The first word of each call: its kind and stream.
enum CallKind : uint64_t { kKernel = 1, kGemm = 2, kUpload = 3, kDownload = 4, kFill = 5 };

}  // namespace

void GraphStructure::call(uint64_t kind, int stream) {
  words_.push_back(kind << 8 | uint64_t(stream));
  ++calls_;
}

void GraphStructure::kernel(const void* function, unsigned block, int stream) {
  call(kKernel, stream);
  words_.insert(words_.end(), {uint64_t(reinterpret_cast<uintptr_t>(function)), block});
}

void GraphStructure::gemm(std::span<const int64_t> shape, int stream) {
  call(kGemm, stream);
  words_.push_back(shape.size());
  for (int64_t value : shape) words_.push_back(uint64_t(value));
}

void GraphStructure::copy(bool to_device, int stream) { call(to_device ? kUpload : kDownload, stream); }

void GraphStructure::fill(int stream) { call(kFill, stream); }

size_t GraphStructure::hash() const {
  size_t h = words_.size();
  for (uint64_t word : words_) h = h * 0x9e3779b97f4a7c15ull + std::hash<uint64_t>{}(word);
  return h;
}

StepGraphs::~StepGraphs() {
  for (Cached& cached : cache_) device_.destroy_graph_exec(cached.exec);
  free_retired();
}

void StepGraphs::retire(DeviceBuffer buffer, void* pinned_host) {
  retired_buffers_.push_back(std::move(buffer));
  retired_pinned_.push_back(pinned_host);
}

void StepGraphs::free_retired() {
  retired_buffers_.clear();
  for (void* pinned : retired_pinned_) device_.free_pinned(pinned);
  retired_pinned_.clear();
}

void StepGraphs::begin(int stream) {
  free_retired();
  structure_.clear();
  device_.begin_capture(stream, &structure_);
  capturing_ = true;
}

void StepGraphs::abandon(int stream) {
  capturing_ = false;
  if (void* graph = device_.end_capture(stream)) device_.destroy_graph(graph);
}

void StepGraphs::end_and_launch(int stream) {
  capturing_ = false;
  void* graph = device_.end_capture(stream);
  ++counts_.captures;
  void* exec = nullptr;
  try {
    exec = executable_for(graph);
  } catch (...) {
    device_.destroy_graph(graph);
    throw;
  }
  device_.destroy_graph(graph);
  device_.launch_graph(exec, stream);
  ++counts_.launches;
}

void* StepGraphs::executable_for(void* graph) {
  const size_t hash = structure_.hash();
  const int64_t now = counts_.captures;
  auto found = std::find_if(cache_.begin(), cache_.end(),
                            [&](const Cached& c) { return c.hash == hash && c.structure == structure_; });
  if (found != cache_.end()) {
    found->last_used = now;
    if (device_.update_graph_exec(found->exec, graph)) {
      ++counts_.updates;
      return found->exec;
    }
    // Same structure as the driver's update sees it, but a copy's buffer is
    // another allocation now (a staging buffer or arena that grew).
    ++counts_.refused_updates;
    void* fresh = device_.instantiate_graph(graph);
    device_.destroy_graph_exec(found->exec);
    found->exec = fresh;
    ++counts_.instantiations;
    return fresh;
  }
  if (cache_.size() == kMaxGraphs) {
    auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                   [](const Cached& a, const Cached& b) { return a.last_used < b.last_used; });
    device_.destroy_graph_exec(oldest->exec);
    cache_.erase(oldest);
  }
  Cached cached{structure_, hash, device_.instantiate_graph(graph), now};
  ++counts_.instantiations;
  cache_.push_back(std::move(cached));
  return cache_.back().exec;
}

StepGraphs::Capture::Capture(StepGraphs& graphs, int stream) : graphs_(graphs), stream_(stream) {
  if (graphs_.on_) graphs_.begin(stream_);
}

StepGraphs::Capture::~Capture() {
  if (!graphs_.capturing_) return;
  try {
    graphs_.abandon(stream_);
  } catch (...) {  // the pass's own exception is the one to report
  }
}

void StepGraphs::Capture::launch() {
  if (graphs_.capturing_) graphs_.end_and_launch(stream_);
}

}  // namespace vjit::runtime
