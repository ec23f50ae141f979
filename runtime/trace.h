#pragma once
// VJIT_TRACE: a Chrome trace-event file (what Perfetto and chrome://tracing
// load) of one run — one complete event ("ph":"X") per engine call, task,
// GEMM, fused kernel, copy and optimizer step, on a track per thread.
//
// The recorder keeps events in memory and writes them all, as one JSON file,
// through io::write_file_atomically when asked (Engine::flush_trace, and the
// engine's destructor). Memory is bounded: past max_events the later events
// are counted, not kept, and the file says how many were dropped. Recording
// takes a lock per event; whoever records checks first that a recorder exists
// (a null pointer when tracing is off), so an untraced run pays one branch.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace vjit::runtime {

enum class TraceCategory : uint8_t { Call, Engine, Task, Gemm, Fused, Copy, Kernel, Optimizer, Block };
const char* trace_category_name(TraceCategory category);

// What an event carries in "args"; negative fields are left out of the file.
struct TraceArgs {
  int type = -1;       // vertex type (written as its name)
  int task = -1;
  int64_t rows = -1;   // rows the step ran over
  int64_t cols = -1;   // floats per row of the value written
  int64_t bytes = -1;  // bytes moved (copies) or touched (kernels, GEMMs)
  int64_t m = -1, n = -1, k = -1, products = -1;  // GEMMs: each product's shape, how many
};

class TraceRecorder {
 public:
  static constexpr size_t kDefaultMaxEvents = size_t(1) << 19;  // about 50 MB of events

  // Checks that `path` can be written by writing an empty trace there now: a
  // UserError naming the file at construction, not a lost trace at exit.
  TraceRecorder(std::string path, std::vector<std::string> type_names, size_t max_events = kDefaultMaxEvents);

  // Nanoseconds since the recorder was built (the file's time origin).
  int64_t now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
  }
  // A complete event from `start` (now()) to now, on the calling thread's
  // track. `name` must outlive the recorder's last write (a literal, an op's
  // name or a kernel name of the plan); empty: the vertex type's name.
  void record(std::string_view name, TraceCategory category, int64_t start, const TraceArgs& args = {});
  // Names the calling thread's track ("vjit caller", "vjit stream"); a
  // thread that records unnamed is a "vjit pool thread".
  void name_this_thread(std::string_view name);

  // The whole trace so far as JSON, and written to the path (atomically).
  // write() throws UserError naming the file when it cannot be written.
  std::string json() const;
  void write() const;
  const std::string& path() const { return path_; }
  size_t events() const;
  int64_t dropped() const;

 private:
  struct Event {
    std::string_view name;
    TraceCategory category;
    int tid;
    int64_t start, duration;
    TraceArgs args;
  };
  int thread_id_locked(std::string_view default_name);

  std::string path_;
  std::vector<std::string> type_names_;
  size_t max_events_;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  int64_t dropped_ = 0;
  std::unordered_map<std::thread::id, int> tids_;
  std::vector<std::string> thread_names_;  // per tid
};

// Records one event over its scope when `recorder` is not null.
class TraceScope {
 public:
  TraceScope(TraceRecorder* recorder, std::string_view name, TraceCategory category, TraceArgs args = {})
      : recorder_(recorder), name_(name), category_(category), args_(args), start_(recorder ? recorder->now() : 0) {}
  ~TraceScope() {
    if (recorder_ != nullptr) recorder_->record(name_, category_, start_, args_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  TraceArgs& args() { return args_; }

 private:
  TraceRecorder* recorder_;
  std::string_view name_;
  TraceCategory category_;
  TraceArgs args_;
  int64_t start_;
};

}  // namespace vjit::runtime
